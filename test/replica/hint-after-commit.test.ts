import { mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { text } from "../support/prompt.js";
import { killReplicas, startReplica, type Replica } from "../support/replica.js";

// The commit hint is sent after the commit, outside the write transaction (a NOTIFY inside it
// would serialize every commit of the Postgres instance). A writer that dies between its commit
// and its hint sends none; a watcher on another replica must still get the committed events, from
// its periodic check of the watched sessions' last_seq (`events.catch_up_ms`). The writer here is
// a real `ledger serve` child that SIGKILLs itself right before its first hint
// (LEDGER_TEST_DIE_BEFORE_HINT=1). Postgres only: PGlite is one process by construction.

const POSTGRES = process.env.LEDGER_TEST_DB === "postgres";
const START_MS = 60_000;
/** The watcher's check interval (ms). */
const CATCH_UP_MS = 400;

let dir: string | undefined;
let database: TestDatabase | undefined;
let writer: Replica;
let watcher: Replica;

beforeAll(
  async () => {
    if (!POSTGRES) return;
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-hint-")));
    await writeFile(path.join(dir, "ledger.json"), JSON.stringify({ events: { catch_up_ms: CATCH_UP_MS } }));
    database = await createTestDatabase("postgres");
    [writer, watcher] = await Promise.all([
      startReplica({
        name: "writer",
        cwd: dir,
        databaseUrl: database.url!,
        timeoutMs: START_MS,
        env: { LEDGER_TEST_DIE_BEFORE_HINT: "1" },
      }),
      startReplica({ name: "watcher", cwd: dir, databaseUrl: database.url!, timeoutMs: START_MS }),
    ]);
  },
  2 * START_MS + 30_000,
);

afterAll(async () => {
  const exit = POSTGRES ? await watcher.stop(20_000) : undefined;
  await killReplicas();
  await database?.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
  if (exit) expect({ code: exit.code, forced: exit.forced }).toEqual({ code: 0, forced: false });
}, 60_000);

describe.runIf(POSTGRES)("commit hint after the commit", () => {
  it("a writer killed between its commit and its hint: the watcher on another replica still gets the events within the check interval", async () => {
    const { session } = await watcher.connect.createSession({ directory: dir! });
    const sessionId = session!.id;
    const seen: SessionEvent[] = [];
    const controller = new AbortController();
    const watching = (async () => {
      for await (const res of watcher.connect.watchSession({ sessionId, afterSeq: 1n }, { signal: controller.signal }))
        if (res.event) seen.push(res.event);
    })().catch(() => {});
    // The watch is attached (its replay, empty, is done) before the writer commits.
    await new Promise((r) => setTimeout(r, 300));

    const prompt = writer.connect.prompt({ sessionId, noReply: true, parts: [text("one"), text("two")] });
    await expect(prompt).rejects.toThrow();
    const exit = await writer.exited;
    expect(exit.signal).toBe("SIGKILL");
    const died = Date.now();

    // Committed before the kill: the rows are there.
    const sql = new pg.Client({ connectionString: database!.url });
    await sql.connect();
    const stored = await sql.query<{ kind: string }>("select kind from session_event where session_id = $1 and seq > 1 order by seq", [
      sessionId,
    ]);
    await sql.end();
    expect(stored.rows.map((r) => r.kind)).toEqual([
      "agent_switched",
      "message_updated",
      "part_updated",
      "part_updated",
      "prompted",
      "session_updated",
    ]);

    // No hint will ever come: the watcher's periodic check finds last_seq ahead and reads the rows.
    while (seen.length < stored.rows.length && Date.now() - died < CATCH_UP_MS + 5000) await new Promise((r) => setTimeout(r, 20));
    const waited = Date.now() - died;
    controller.abort();
    await watching;
    expect(seen.map((e) => Number(e.seq))).toEqual([2, 3, 4, 5, 6, 7]);
    expect(waited).toBeLessThan(CATCH_UP_MS + 2000);
  });
});
