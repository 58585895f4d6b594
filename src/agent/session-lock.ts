import pg from "pg";
import { LockPoolExhaustedError } from "../errors.js";

/** Releases a held session lock. */
export type Release = () => Promise<void>;

/** One agent loop per session across every process that shares the database. */
export interface SessionLocks {
  /**
   * Waits until this process holds the session's lock and returns its release. Rejects with the
   * signal's reason when `signal` aborts while waiting, and with `LockPoolExhaustedError`
   * (RESOURCE_EXHAUSTED) at once when no lock connection is free. `onLost` is called if the
   * lock is lost while held (its connection dropped: another replica may take the session over).
   */
  acquire(sessionId: string, signal: AbortSignal, onLost?: () => void): Promise<Release>;
  /**
   * Takes the lock only if it is free right now (Shell, Summarize, recovery); undefined when
   * another run holds it. Rejects with `LockPoolExhaustedError` when no lock connection is free.
   */
  tryAcquire(sessionId: string): Promise<Release | undefined>;
  /** Closes the idle lock connections (shutdown, after every loop ended). */
  close(): Promise<void>;
}

/** Options of {@link postgresLocks}. */
export interface PostgresLockOptions {
  /** Most connections holding (or waiting for) session locks at once (`limits.lock_connections`). */
  max: number;
}

/**
 * Postgres advisory locks (`pg_advisory_lock(hashtextextended(session_id, 0))`), each held on a
 * connection of its own for as long as the loop runs: if the holder dies, Postgres ends its
 * session and the lock goes to the next waiter (another replica). The connections come from a
 * pool of their own, apart from the query pool, bounded by `options.max`: a lock asked for
 * while all of them hold or wait for a lock fails at once with `LockPoolExhaustedError` instead
 * of opening one more connection (or queueing behind loops that may run for minutes). A released
 * lock's connection drops every advisory lock it holds (`pg_advisory_unlock_all`) and goes back
 * to the pool; one that failed or was cancelled is closed. Waiting is cancelled on the server
 * (a cancel request for the waiting query) and then the waiting connection is closed.
 */
export function postgresLocks(url: string, options: PostgresLockOptions): SessionLocks {
  const pool = new pg.Pool({ connectionString: url, max: options.max, application_name: "ledger-loop-lock", idleTimeoutMillis: 60_000 });
  // An idle lock connection that loses its server must not crash the process.
  pool.on("error", () => {});
  let inUse = 0;

  /**
   * A connection of the pool, counted from the moment it is asked for; throws when none is free.
   * While checked out, its errors are listened to here (the pool listens only to idle ones).
   */
  async function checkOut(sessionId: string, forLoop: boolean): Promise<{ client: pg.PoolClient; giveBack: (destroy: boolean) => void }> {
    if (inUse >= options.max) throw new LockPoolExhaustedError(sessionId, options.max, { forLoop });
    inUse++;
    let client: pg.PoolClient;
    try {
      client = await pool.connect();
    } catch (error) {
      inUse--;
      throw error;
    }
    const ignore = () => {};
    client.on("error", ignore);
    let returned = false;
    const giveBack = (destroy: boolean) => {
      if (returned) return;
      returned = true;
      inUse--;
      client.off("error", ignore);
      client.release(destroy);
    };
    return { client, giveBack };
  }

  /** Unlocks everything the connection holds and returns it to the pool (or closes it if that fails). */
  function unlocker(client: pg.PoolClient, giveBack: (destroy: boolean) => void, onRelease = () => {}): Release {
    return async () => {
      onRelease();
      const ok = await client.query("select pg_advisory_unlock_all()").then(
        () => true,
        () => false,
      );
      giveBack(!ok);
    };
  }

  return {
    async acquire(sessionId, signal, onLost) {
      signal.throwIfAborted();
      const { client, giveBack } = await checkOut(sessionId, true);
      let held = false;
      let released = false;
      const lost = () => {
        if (held && !released) onLost?.();
      };
      client.on("error", lost);
      client.on("end", lost);
      const detach = () => {
        released = true;
        client.off("error", lost);
        client.off("end", lost);
      };
      // Postgres does not notice a closed client while its backend waits for a lock: the
      // connection is closed at once, and the wait is cancelled on the server (a backend that
      // still waits keeps its pid, so the cancel cannot reach another session's query).
      const cancel = () => {
        const pid = (client as unknown as { processID?: number }).processID;
        giveBack(true);
        void cancelBackend(url, pid);
      };
      signal.addEventListener("abort", cancel, { once: true });
      try {
        // An abort that came while connecting must not leave us waiting for the lock.
        signal.throwIfAborted();
        await client.query("select pg_advisory_lock(hashtextextended($1, 0))", [sessionId]);
        // An abort that came as the lock was granted has closed (or is closing) its connection.
        signal.throwIfAborted();
        held = true;
      } catch (error) {
        detach();
        giveBack(true);
        signal.throwIfAborted();
        throw error;
      } finally {
        signal.removeEventListener("abort", cancel);
      }
      return unlocker(client, giveBack, detach);
    },
    async tryAcquire(sessionId) {
      const { client, giveBack } = await checkOut(sessionId, false);
      try {
        const { rows } = await client.query<{ locked: boolean }>("select pg_try_advisory_lock(hashtextextended($1, 0)) as locked", [
          sessionId,
        ]);
        if (rows[0]?.locked) return unlocker(client, giveBack);
        giveBack(false);
        return undefined;
      } catch (error) {
        giveBack(true);
        throw error;
      }
    },
    close: () => pool.end(),
  };
}

/**
 * Cancels what backend `pid` is running (`pg_cancel_backend`, over a short connection of its own:
 * the lock pool may be full). Never rejects: after a failure (no connection to be had, no pid
 * known) the backend waits on until it gets the lock and finds its client gone.
 */
async function cancelBackend(url: string, pid: number | undefined): Promise<void> {
  if (!pid) return;
  const canceller = new pg.Client({ connectionString: url, application_name: "ledger-loop-lock-cancel", connectionTimeoutMillis: 5_000 });
  canceller.on("error", () => {});
  try {
    await canceller.connect();
    await canceller.query("select pg_cancel_backend($1)", [pid]);
  } catch {
    // Closing the waiting connection is all that is left.
  } finally {
    await canceller.end().catch(() => undefined);
  }
}

/** In-process locks, for the embedded database (one process by construction). */
export function processLocks(): SessionLocks {
  const tails = new Map<string, Promise<void>>();
  return {
    async acquire(sessionId, signal) {
      signal.throwIfAborted();
      const previous = tails.get(sessionId) ?? Promise.resolve();
      let release!: () => void;
      const mine = new Promise<void>((resolve) => (release = resolve));
      const tail = previous.then(() => mine);
      tails.set(sessionId, tail);
      await previous;
      return async () => {
        release();
        if (tails.get(sessionId) === tail) tails.delete(sessionId);
      };
    },
    async tryAcquire(sessionId) {
      if (tails.has(sessionId)) return undefined;
      return this.acquire(sessionId, new AbortController().signal);
    },
    close: async () => {},
  };
}
