import pg from "pg";

/** Releases a held session lock. */
export type Release = () => Promise<void>;

/** One agent loop per session across every process that shares the database. */
export interface SessionLocks {
  /**
   * Waits until this process holds the session's lock and returns its release. Rejects with the
   * signal's reason when `signal` aborts while waiting. `onLost` is called if the lock is lost
   * while held (its connection dropped: another replica may take the session over).
   */
  acquire(sessionId: string, signal: AbortSignal, onLost?: () => void): Promise<Release>;
  /** Takes the lock only if it is free right now; undefined when another run holds it. */
  tryAcquire(sessionId: string): Promise<Release | undefined>;
}

/**
 * Postgres advisory locks (`pg_advisory_lock(hashtextextended(session_id, 0))`), each held on a
 * dedicated connection for as long as the loop runs: if the holder dies, Postgres ends its
 * session and the lock goes to the next waiter (another replica). Waiting is cancelled by
 * closing the waiting connection.
 */
export function postgresLocks(url: string): SessionLocks {
  return {
    async acquire(sessionId, signal, onLost) {
      signal.throwIfAborted();
      const client = new pg.Client({ connectionString: url, application_name: "ledger-loop-lock" });
      let held = false;
      let released = false;
      const lost = () => {
        if (held && !released) onLost?.();
      };
      client.on("error", lost);
      client.on("end", lost);
      await client.connect();
      const cancel = () => void client.end().catch(() => {});
      signal.addEventListener("abort", cancel, { once: true });
      try {
        // An abort that came while connecting must not leave us waiting for the lock.
        signal.throwIfAborted();
        await client.query("select pg_advisory_lock(hashtextextended($1, 0))", [sessionId]);
        held = true;
      } catch (error) {
        await client.end().catch(() => {});
        signal.throwIfAborted();
        throw error;
      } finally {
        signal.removeEventListener("abort", cancel);
      }
      return async () => {
        released = true;
        await unlock(client, sessionId)();
      };
    },
    async tryAcquire(sessionId) {
      const client = new pg.Client({ connectionString: url, application_name: "ledger-loop-lock" });
      client.on("error", () => {});
      await client.connect();
      const { rows } = await client.query<{ locked: boolean }>("select pg_try_advisory_lock(hashtextextended($1, 0)) as locked", [
        sessionId,
      ]);
      if (rows[0]?.locked) return unlock(client, sessionId);
      await client.end().catch(() => {});
      return undefined;
    },
  };
}

function unlock(client: pg.Client, sessionId: string): Release {
  return async () => {
    await client.query("select pg_advisory_unlock(hashtextextended($1, 0))", [sessionId]).catch(() => {});
    await client.end().catch(() => {});
  };
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
  };
}
