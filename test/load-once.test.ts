import { describe, expect, it } from "vitest";
import { loadOnce, loadOncePerKey } from "../src/load-once.js";
import { rejection } from "./support/errors.js";

// The first-use loaders of heavy packages (sharp, typescript, web-tree-sitter, the MCP SDK,
// provider packages): one load shared by every caller, and a failed load tried again.

/** A load that fails its first `failures` calls, then answers `value-<n>` (n = its call count); counts its calls. */
function flaky(failures: number) {
  const calls: string[] = [];
  const load = async (key = "") => {
    calls.push(key);
    if (calls.length <= failures) throw new Error(`load ${calls.length} failed`);
    return `value-${calls.length}`;
  };
  return { load, calls };
}

describe("loadOnce", () => {
  it("runs the load on the first call only; every call gets the same promise", async () => {
    const { load, calls } = flaky(0);
    const once = loadOnce(load);
    expect(calls).toEqual([]);
    const first = once();
    const second = once();
    expect(second).toBe(first);
    expect(await first).toBe("value-1");
    expect(await once()).toBe("value-1");
    expect(calls).toHaveLength(1);
  });

  it("tries again after a failed load, then keeps the success", async () => {
    const { load, calls } = flaky(1);
    const once = loadOnce(load);
    expect(String(await rejection(once()))).toBe("Error: load 1 failed");
    expect(await once()).toBe("value-2");
    expect(await once()).toBe("value-2");
    expect(calls).toHaveLength(2);
  });
});

describe("loadOncePerKey", () => {
  it("loads each key once, and only the key that failed again", async () => {
    const { load, calls } = flaky(1);
    const perKey = loadOncePerKey(load);
    expect(String(await rejection(perKey("a")))).toBe("Error: load 1 failed");
    expect(await perKey("b")).toBe("value-2");
    expect(await perKey("a")).toBe("value-3");
    expect(await Promise.all([perKey("a"), perKey("b")])).toEqual(["value-3", "value-2"]);
    expect(calls).toEqual(["a", "b", "a"]);
  });
});
