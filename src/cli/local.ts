import path from "node:path";
import lockfile from "proper-lockfile";
import { startLedger, type RunningLedger } from "../app.js";
import type { LedgerConfig } from "../config/config.js";
import { targetFromEnv, type DatabaseTarget } from "../storage/db.js";

/** The default embedded database directory, relative to the working directory. */
export const DEFAULT_DB_DIR = ".ledger/db";

/**
 * Picks the database: `DATABASE_URL` (Postgres) when set, else PGlite in `db` (default
 * `./.ledger/db`; `:memory:` for a throw-away one).
 */
export function databaseTarget(db: string | undefined): DatabaseTarget {
  const dir = db === ":memory:" ? db : path.resolve(db ?? DEFAULT_DB_DIR);
  return targetFromEnv(dir);
}

/**
 * Starts a ledger on `host:port` for this process. An embedded (PGlite) data directory can be
 * used by one process only, so it is locked first (`<dir>.lock`); a second process gets a clear
 * error telling it to use `--url` or another `--db`.
 */
export async function startLocal(options: { config: LedgerConfig; db?: string; host?: string; port?: number }): Promise<RunningLedger> {
  const database = databaseTarget(options.db);
  const release = database.kind === "pglite" && database.dir !== ":memory:" ? await lockDir(database.dir) : async () => {};
  try {
    const ledger = await startLedger({ config: options.config, database, host: options.host, port: options.port });
    return {
      ...ledger,
      async close(graceMs) {
        await ledger.close(graceMs);
        await release();
      },
    };
  } catch (error) {
    await release();
    throw error;
  }
}

async function lockDir(dir: string): Promise<() => Promise<void>> {
  const { mkdir } = await import("node:fs/promises");
  await mkdir(dir, { recursive: true });
  try {
    return await lockfile.lock(dir, { stale: 15_000, update: 5_000, realpath: false });
  } catch (error) {
    if ((error as { code?: string }).code !== "ELOCKED") throw error;
    throw new Error(
      `the embedded database ${dir} is in use by another ledger process (a running "ledger serve"?). ` +
        `Talk to that server with --url http://HOST:PORT, or pass --db with another directory. ` +
        `If that process crashed, its lock expires within 15 s.`,
    );
  }
}
