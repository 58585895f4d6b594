// Session locks on Postgres (src/agent/session-lock.ts) against a real database: a wait for a
// session's lock that is cancelled (the client left, a deadline, a drain) must end the waiting
// query on the server, not only close our side of its connection. Postgres does not notice a
// closed client while a backend waits for a lock: before the fix the backend went on waiting,
// holding a connection slot and a place in the lock's queue, until the holder released.
// Postgres only: the embedded PGlite locks in-process, without connections.
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postgresLocks, type SessionLocks } from "../../src/agent/session-lock.js";
import { createTestDatabase, TEST_ENGINE, type TestDatabase } from "../support/db.js";
import { waitFor } from "../support/wait.js";

let database: TestDatabase | undefined;
let locks: SessionLocks;
let observer: pg.Client;

beforeAll(async () => {
  if (TEST_ENGINE !== "postgres") return;
  database = await createTestDatabase("postgres");
  locks = postgresLocks(database.url!, { max: 4 });
  observer = new pg.Client({ connectionString: database.url! });
  await observer.connect();
});

afterAll(async () => {
  await observer?.end();
  await locks?.close();
  await database?.drop();
});

/** Backends of this database waiting for an advisory lock, as `pg_stat_activity` shows them. */
async function waitingBackends(): Promise<number> {
  const { rows } = await observer.query<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity
      where datname = current_database() and application_name = 'ledger-loop-lock' and wait_event_type = 'Lock'`,
  );
  return rows[0]!.n;
}

describe.skipIf(TEST_ENGINE !== "postgres")("postgresLocks", () => {
  it("a cancelled wait ends the waiting query on the server; the next waiter gets the lock when the holder releases", async () => {
    const session = "ses_01JDLOCKTEST0000000000000";
    const held = await locks.acquire(session, new AbortController().signal);
    const abort = new AbortController();
    const waiting = locks.acquire(session, abort.signal);
    await waitFor("the second acquire to wait on the server", async () => (await waitingBackends()) === 1);

    abort.abort(new Error("client left"));
    await expect(waiting).rejects.toThrow("client left");
    // The orphaned backend is gone, not queued for the lock behind the holder.
    await waitFor("the cancelled wait to end on the server", async () => (await waitingBackends()) === 0, 5_000);

    const third = locks.acquire(session, new AbortController().signal);
    await waitFor("the third acquire to wait on the server", async () => (await waitingBackends()) === 1);
    await held();
    const release = await third;
    expect(await waitingBackends()).toBe(0);
    await release();
  });
});
