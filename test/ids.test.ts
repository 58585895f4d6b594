import { describe, expect, it } from "vitest";
import { isId, newId } from "../src/ids.js";

// Server ids draw their ULID randomness from a pooled buffer of OS random bytes (src/ids.ts):
// still valid ULIDs, unique, ascending in this process, with every character of the alphabet.

describe("newId", () => {
  it("makes valid, unique, ascending ids across many pool refills", () => {
    const ids = Array.from({ length: 20_000 }, (_, i) => newId(i % 2 === 0 ? "msg" : "prt").slice(4));
    expect(ids.every((id) => isId("msg", `msg_${id}`))).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
  });

  it("uses all 32 characters in the random part of a new millisecond's first id", async () => {
    const seen = new Set<string>();
    for (let i = 0; i < 40; i++) {
      await new Promise((r) => setTimeout(r, 2));
      for (const char of newId("ses").slice(14)) seen.add(char);
    }
    expect(seen.size).toBe(32);
  });
});
