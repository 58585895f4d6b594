import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Database } from "../../src/storage/db.js";
import { countInWindow } from "../../src/storage/quota-store.js";
import { openTestDatabase, TEST_ENGINE } from "../support/db.js";
import { sleep, waitFor } from "../support/wait.js";

// The prompts_per_minute counter (docs/security.md, "Quotas"): one transaction over the counters,
// nothing counted on a refusal, the time left in the window, ended windows deleted.

let database: Database;
beforeAll(async () => {
  database = await openTestDatabase();
});
afterAll(() => database?.close());

const rows = () => database.db.selectFrom("quota_usage").select(["key", "count"]).orderBy("key").execute();

describe(`quota windows on ${TEST_ENGINE}`, () => {
  it("counts against every counter, refuses without counting any when one is full, and says how long the window lasts", async () => {
    // An hour's window: the test waits for the next one only in an hour's last 10 s (with a
    // minute's, one run in six waited up to 10 s).
    const windowMs = 3_600_000;
    const left = windowMs - (Date.now() % windowMs);
    if (left < 10_000) await sleep(left + 250);
    const counters = [
      { key: "p:acme/alice", limit: 5 },
      { key: "t:acme", limit: 2 },
    ];
    const first = await countInWindow(database.db, counters, windowMs / 1000);
    const second = await countInWindow(database.db, counters, windowMs / 1000);
    expect(first.refused).toBeUndefined();
    expect(second.refused).toBeUndefined();
    expect(await rows()).toEqual([
      { key: "p:acme/alice", count: 2 },
      { key: "t:acme", count: 2 },
    ]);
    const third = await countInWindow(database.db, counters, windowMs / 1000);
    expect(third).toEqual({ refused: 1, count: 2, retryAfterMs: expect.any(Number) });
    expect(third.retryAfterMs).toBeGreaterThan(0);
    expect(third.retryAfterMs).toBeLessThanOrEqual(windowMs);
    expect(Math.abs(third.retryAfterMs - (windowMs - (Date.now() % windowMs)))).toBeLessThan(2_000);
    // Rolled back: alice's counter did not move.
    expect(await rows()).toEqual([
      { key: "p:acme/alice", count: 2 },
      { key: "t:acme", count: 2 },
    ]);
    // A full first counter refuses at index 0.
    expect((await countInWindow(database.db, [{ key: "t:acme", limit: 2 }], windowMs / 1000)).refused).toBe(0);
  });

  it("deletes the rows of ended windows after a counter's first event in a window", async () => {
    await database.db
      .insertInto("quota_usage")
      .values({ key: "p:old/bob", window_start: sql<Date>`now() - interval '5 minutes'`, count: 7 })
      .execute();
    await countInWindow(database.db, [{ key: "p:acme/carol", limit: 1 }], 60);
    await waitFor("the ended window deleted", async () => !(await rows()).some((r) => r.key === "p:old/bob"));
    expect((await rows()).map((r) => r.key)).toContain("p:acme/carol");
  });
});
