import { PGlite } from "@electric-sql/pglite";
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { getLogBounds } from "../../src/storage/session-store.js";
import { TEST_ENGINE } from "../support/db.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";

// Database round trips per noReply prompt, counted where the driver sends them: every
// `pg.Client#query` (pool connections and the relay's own) on Postgres; on PGlite every
// `query`/`exec`, and a `transaction` as two (its begin and commit) plus what runs inside it.
// A prompt to a session this process knows is ONE statement (lock, message, parts, events,
// session counters), plus on Postgres the commit hint for other replicas sent after it.

let t: TestLedger;
let count = 0;
beforeAll(async () => {
  // No periodic catch-up check: its query would land in the counts.
  t = await startTestLedger({ events: { catch_up_ms: 0 } });
});
afterAll(() => t?.close());
afterEach(() => vi.restoreAllMocks());

function countRoundTrips(): void {
  const query = pg.Client.prototype.query;
  vi.spyOn(pg.Client.prototype, "query").mockImplementation(function (this: pg.Client, ...args: unknown[]) {
    count++;
    return (query as (...a: unknown[]) => unknown).apply(this, args) as never;
  });
  for (const name of ["query", "exec"] as const) {
    const original = PGlite.prototype[name];
    vi.spyOn(PGlite.prototype, name).mockImplementation(function (this: PGlite, ...args: unknown[]) {
      count++;
      return (original as (...a: unknown[]) => unknown).apply(this, args) as never;
    });
  }
  const transaction = PGlite.prototype.transaction;
  vi.spyOn(PGlite.prototype, "transaction").mockImplementation(function (this: PGlite, fn: (tx: never) => unknown) {
    count += 2;
    return transaction.call(this, (tx) => {
      const counted = new Proxy(tx, {
        get(target, key) {
          const value = Reflect.get(target, key) as unknown;
          if ((key === "query" || key === "exec") && typeof value === "function")
            return (...args: unknown[]) => {
              count++;
              return (value as (...a: unknown[]) => unknown).apply(target, args);
            };
          return value;
        },
      });
      return fn(counted as never) as Promise<unknown>;
    }) as never;
  });
}

/** Round trips of `fn`, including what it leaves running in the background for `settleMs`. */
async function roundTrips(fn: () => Promise<unknown>, settleMs = 150): Promise<number> {
  count = 0;
  await fn();
  await new Promise((r) => setTimeout(r, settleMs));
  return count;
}

describe(`round trips per noReply prompt on ${TEST_ENGINE}`, () => {
  it("a prompt to a session this replica knows is one statement (plus the commit hint on Postgres): at most 2", async () => {
    const session = (await t.client.createSession({ directory: t.dir })).session!;
    // CreateSession's own commit hint goes out after its answer (in memory, before it is sent):
    // let it leave before counting.
    await roundTrips(async () => {});
    countRoundTrips();
    for (const parts of [1, 5, 20]) {
      const drafts = Array.from({ length: parts }, (_, i) => text(`part ${i}`));
      const n = await roundTrips(() => t.client.prompt({ sessionId: session.id, noReply: true, parts: drafts }));
      expect(n, `${parts} part(s)`).toBe(TEST_ENGINE === "postgres" ? 2 : 1);
    }
    vi.restoreAllMocks();
    const stored = await t.client.listMessages({ sessionId: session.id });
    expect(stored.messages.map((m) => m.parts.length)).toEqual([1, 5, 20]);
    expect((await t.client.getSession({ sessionId: session.id })).session!.messageCount).toBe(3);
  });

  it("a session another process changed costs a refused statement and a read more, once", async () => {
    const session = (await t.client.createSession({ directory: t.dir })).session!;
    // Another process's write: this replica's knowledge of the row is now stale.
    await t.ledger.deps.db.updateTable("session").set({ time_updated: new Date() }).where("id", "=", session.id).execute();
    countRoundTrips();
    // Stale: the statement refuses the write (1), the session is read again (2), written (3), hinted (4 on Postgres).
    const first = await roundTrips(() => t.client.prompt({ sessionId: session.id, noReply: true, parts: [text("a")] }));
    expect(first).toBe(TEST_ENGINE === "postgres" ? 4 : 3);
    const second = await roundTrips(() => t.client.prompt({ sessionId: session.id, noReply: true, parts: [text("b")] }));
    expect(second).toBe(TEST_ENGINE === "postgres" ? 2 : 1);
  });

  it("a WatchSession reads its log bounds and first page in one statement (was three: bounds, page, existence)", async () => {
    const session = (await t.client.createSession({ directory: t.dir })).session!;
    await t.client.prompt({ sessionId: session.id, noReply: true, parts: [text("a")] });
    const { lastSeq } = (await getLogBounds(t.ledger.deps.db, session.id))!;
    const controller = new AbortController();
    countRoundTrips();
    for (const afterSeq of [0n, lastSeq]) {
      const n = await roundTrips(async () => {
        const next = t.client
          .watchSession({ sessionId: session.id, afterSeq }, { signal: controller.signal })
          [Symbol.asyncIterator]()
          .next();
        // From 0 the replay yields at once; at the last seq the watch waits for live events.
        if (afterSeq === 0n) expect((await next).value?.event?.seq).toBe(1n);
        else next.catch(() => {});
      });
      expect(n, `after_seq ${afterSeq}`).toBe(1);
    }
    controller.abort();
  });
});
