import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newId } from "../../src/ids.js";
import { createTestDatabase, TEST_ENGINE, type TestDatabase } from "../support/db.js";
import { killReplicas, startReplica, writeLedgerConfig } from "../support/replica.js";

// Crash injection: a real server process takes prompts from several clients and is killed with
// SIGKILL at random moments, then restarted. Every prompt it acknowledged must be fully present
// (message and all its parts), nothing may dangle, and every session's event log stays gap-free.
// CI runs CRASH_ROUNDS=3; `npm run soak` runs more.
const ROUNDS = Number(process.env.CRASH_ROUNDS ?? 3);
const CLIENTS = 4;

let db: TestDatabase;
let dir: string;
beforeAll(async () => {
  if (TEST_ENGINE !== "postgres") return;
  db = await createTestDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), "ledger-crash-"));
  await writeLedgerConfig(dir, "http://127.0.0.1:9/v1");
});
afterAll(async () => {
  await killReplicas();
  await db?.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe.skipIf(TEST_ENGINE !== "postgres")("kill -9 under load", () => {
  // A bound against a hang, not a speed goal: each round restarts a server process.
  it(`keeps every acknowledged prompt whole across ${ROUNDS} crashes`, { timeout: Math.max(180_000, ROUNDS * 60_000) }, async () => {
    const acknowledged = new Map<string, number>(); // message id → parts it was acknowledged with
    for (let round = 0; round < ROUNDS; round++) {
      const replica = await startReplica({ name: `crash-${round}`, cwd: dir, databaseUrl: db.url! });
      const sessions = await Promise.all(
        Array.from({ length: CLIENTS }, async () => (await replica.connect.createSession({ directory: dir })).session!.id),
      );
      let stop = false;
      const clients = sessions.map(async (sessionId, c) => {
        for (let i = 0; !stop; i++) {
          const messageId = newId("msg");
          const parts = Array.from({ length: 1 + ((i + c) % 4) }, (_, k) => ({
            kind: { case: "text" as const, value: { text: `client ${c} prompt ${i} part ${k}` } },
          }));
          try {
            const res = await replica.connect.prompt({ sessionId, messageId, noReply: true, parts });
            acknowledged.set(messageId, res.message!.parts.length);
          } catch {
            return; // the server died under us: unacknowledged, may or may not be stored
          }
        }
      });
      await new Promise((r) => setTimeout(r, 200 + Math.random() * 600));
      await replica.kill9();
      stop = true;
      await Promise.all(clients);
    }
    expect(acknowledged.size).toBeGreaterThan(0);

    // A clean restart finds the ledger consistent.
    const last = await startReplica({ name: "crash-check", cwd: dir, databaseUrl: db.url! });
    await last.stop();
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const counts = await client.query<{ id: string; parts: string }>(
        "select m.id, count(p.id)::text as parts from message m left join part p on p.message_id = m.id group by m.id",
      );
      const stored = new Map(counts.rows.map((r) => [r.id, Number(r.parts)]));
      for (const [id, parts] of acknowledged) expect(stored.get(id), id).toBe(parts);
      for (const [id, parts] of stored) expect(parts, `message ${id} has no parts`).toBeGreaterThan(0);
      const dangling = await client.query<{ n: string }>(
        "select count(*)::text as n from part p left join message m on m.id = p.message_id where m.id is null",
      );
      expect(dangling.rows[0]!.n).toBe("0");
      const gaps = await client.query<{ id: string }>(
        "select s.id from session s left join session_event e on e.session_id = s.id group by s.id, s.last_seq having count(e.seq) <> s.last_seq or coalesce(max(e.seq), 0) <> s.last_seq",
      );
      expect(gaps.rows).toEqual([]);
    } finally {
      await client.end();
    }
  });
});
