// The MCP budget of one prompt (src/parts/mcp-budget.ts): answers are held by at most
// MCP_READS_AT_ONCE drafts at once, from their read to their take, even when an early draft is
// slow (the others used to be read and held while it was still reading); takes go in draft order.
import { describe, expect, it } from "vitest";
import { MCP_READS_AT_ONCE, McpBudget } from "../../src/parts/mcp-budget.js";
import { sleep } from "../support/wait.js";

describe("McpBudget", () => {
  it("holds at most MCP_READS_AT_ONCE answers while a slow first draft reads; takes in draft order; none read once full", async () => {
    const budget = new McpBudget(15);
    let held = 0;
    let most = 0;
    const taken: number[] = [];
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => budget.turn()).map(async (turn, i) => {
        let holding = false;
        try {
          const read = await turn.read(async () => {
            holding = true;
            held++;
            most = Math.max(most, held);
            await sleep(i === 0 ? 300 : 10);
            return 1;
          });
          if (read.full) return "not read";
          const room = await turn.take(read.value);
          if (room.ok) taken.push(i);
          return room.ok ? "stored" : "over";
        } finally {
          if (holding) held--;
          turn.done();
        }
      }),
    );
    expect(most).toBe(MCP_READS_AT_ONCE);
    expect(taken).toEqual(Array.from({ length: 15 }, (_, i) => i));
    // Draft k + 4 gets its slot once draft k has taken: 15 to 17 find room left (12 to 14), read
    // and are over; 18 and 19 find the budget full and are not read.
    expect(results).toEqual([...Array<string>(15).fill("stored"), "over", "over", "over", "not read", "not read"]);
  });

  it("a turn done without reading frees its slot for the next", async () => {
    const budget = new McpBudget(10);
    const turns = Array.from({ length: MCP_READS_AT_ONCE + 1 }, () => budget.turn());
    for (const turn of turns.slice(0, MCP_READS_AT_ONCE)) turn.done();
    const last = turns.at(-1)!;
    expect(await last.read(async () => "read")).toEqual({ full: false, value: "read" });
    last.done();
  });
});
