import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { lastSeq, storedEvents } from "../support/stored.js";

// Load: 50 concurrent clients for a bounded time, half on their own session and half sharing 5
// sessions. No errors; within each session every client's prompts are stored in the order it
// sent them; each session's event log is gap-free. Throughput is a benchmark matter, not asserted.
const CLIENTS = 50;
const DURATION_MS = Number(process.env.LOAD_MS ?? 3000);
// The test's timeout grows with its own size (`npm run soak` sets LOAD_MS=30000, vitest's default
// is 30 s): the load itself, plus the sessions' setup and the per-session checks after it.
const TIMEOUT_MS = Math.max(60_000, DURATION_MS * 2 + 30_000);

let t: TestLedger;
beforeAll(async () => {
  t = await startTestLedger({}, { transport: "http" });
});
afterAll(() => t?.close());

describe("50 concurrent clients", () => {
  it("stores every prompt in per-session order without an error", { timeout: TIMEOUT_MS }, async () => {
    const shared = await Promise.all(
      Array.from({ length: 5 }, async () => (await t.client.createSession({ directory: t.dir })).session!.id),
    );
    const own = await Promise.all(
      Array.from({ length: CLIENTS / 2 }, async () => (await t.client.createSession({ directory: t.dir })).session!.id),
    );
    const sessionOf = (c: number) => (c < CLIENTS / 2 ? own[c]! : shared[c % shared.length]!);
    const errors: unknown[] = [];
    const sent = new Map<number, number>();
    const end = Date.now() + DURATION_MS;
    await Promise.all(
      Array.from({ length: CLIENTS }, async (_, c) => {
        for (let i = 0; Date.now() < end; i++) {
          try {
            await t.client.prompt({
              sessionId: sessionOf(c),
              noReply: true,
              parts: [{ kind: { case: "text", value: { text: `${c}:${i}` } } }],
            });
            sent.set(c, i + 1);
          } catch (error) {
            errors.push(error);
            return;
          }
        }
      }),
    );
    expect(errors).toEqual([]);
    for (const sessionId of [...own, ...shared]) {
      const rows = await t.ledger.deps.db
        .selectFrom("part")
        .select(["data", "position"])
        .where("session_id", "=", sessionId)
        .orderBy("position")
        .execute();
      const seen = new Map<number, number>();
      for (const row of rows) {
        const [c, i] = String((row.data as { text?: { text?: string } }).text?.text)
          .split(":")
          .map(Number) as [number, number];
        expect(i, `client ${c} in ${sessionId}`).toBe(seen.get(c) ?? 0);
        seen.set(c, i + 1);
      }
      for (const [c, n] of seen) expect(n).toBe(sent.get(c));
      const last = await lastSeq(t.ledger.deps.db, sessionId);
      const seqs = await storedEvents(t.ledger.deps.db, sessionId);
      expect(seqs.map((s) => s.seq)).toEqual(Array.from({ length: last }, (_, k) => k + 1));
    }
  });
});
