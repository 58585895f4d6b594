import net from "node:net";
import path from "node:path";
import lockfile from "proper-lockfile";
import { startLedger, type RunningLedger } from "../app.js";
import { loadConfig, type LedgerConfig } from "../config/config.js";
import { logger } from "../observe/log.js";
import type { WebPage } from "../server/web-page.js";
import { targetFromEnv, type DatabaseTarget } from "../storage/db.js";
import type { CliIo } from "./io.js";

/** The default embedded database directory, relative to the working directory. */
export const DEFAULT_DB_DIR = ".ledger/db";

/**
 * Picks the database: `DATABASE_URL` (Postgres) in `env` when set, else PGlite in `db` (default
 * `./.ledger/db`, relative to `cwd`; `:memory:` for a throw-away one).
 */
export function databaseTarget(db: string | undefined, cwd = process.cwd(), env: NodeJS.ProcessEnv = process.env): DatabaseTarget {
  const dir = db === ":memory:" ? db : path.resolve(cwd, db ?? DEFAULT_DB_DIR);
  return targetFromEnv(dir, env);
}

/**
 * Starts a ledger on `host:port` for this process. An embedded (PGlite) data directory can be
 * used by one process only, so it is locked first (`<dir>.lock`); a second process gets a clear
 * error: for `serve` (`forServe`), to pass another `--db` or use Postgres with `DATABASE_URL`;
 * for a client command, to talk to the running server with `--url` or pass another `--db`.
 * A port already in use (or not allowed) throws an error naming it and suggesting `--port 0`.
 */
export async function startLocal(options: {
  config: LedgerConfig;
  db?: string;
  host?: string;
  port?: number;
  forServe?: boolean;
  /** The browser page to serve at `/`; absent: none. */
  web?: WebPage;
  /** Default: this process's working directory and environment. */
  cwd?: string;
  env?: NodeJS.ProcessEnv;
}): Promise<RunningLedger> {
  // A port in use is found before the embedded database is made or locked, so nothing is left behind.
  if (options.port) await portFree(options.host ?? "127.0.0.1", options.port);
  const database = databaseTarget(options.db, options.cwd, options.env);
  const release =
    database.kind === "pglite" && database.dir !== ":memory:" ? await lockDir(database.dir, options.forServe === true) : async () => {};
  try {
    const ledger = await startLedger({ config: options.config, database, host: options.host, port: options.port, web: options.web }).catch(
      (error: unknown) => {
        throw listenError(error, options.host ?? "127.0.0.1", options.port ?? 0) ?? error;
      },
    );
    return {
      ...ledger,
      async close(graceMs, closeOptions) {
        await ledger.close(graceMs, closeOptions);
        await release();
      },
    };
  } catch (error) {
    await release();
    throw error;
  }
}

async function lockDir(dir: string, forServe: boolean): Promise<() => Promise<void>> {
  const { mkdir } = await import("node:fs/promises");
  await mkdir(dir, { recursive: true });
  try {
    return await lockfile.lock(dir, { stale: 15_000, update: 5_000, realpath: false });
  } catch (error) {
    if ((error as { code?: string }).code !== "ELOCKED") throw error;
    const advice = forServe
      ? "Pass --db with another directory, or run every server on one Postgres database with DATABASE_URL=postgres://... "
      : "Talk to that server with --url http://HOST:PORT, or pass --db with another directory. ";
    throw new Error(
      `the embedded database ${dir} is in use by another ledger process (a running "ledger serve"?). ${advice}` +
        `If that process crashed, its lock expires within 15 s.`,
    );
  }
}

/**
 * Resolves when `port` on `host` can be listened on now (it is then closed again); throws
 * {@link listenError}'s error (or the listen error) otherwise. A probe: the port may still be
 * taken before the server listens, which then fails the same way.
 */
async function portFree(host: string, port: number): Promise<void> {
  const probe = net.createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once("error", (error) => reject(listenError(error, host, port) ?? error));
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve()));
  });
}

/** A readable error for a listen failure the user can fix with `--port`/`--host`, else undefined. */
function listenError(error: unknown, host: string, port: number): Error | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  if (code === "EADDRINUSE") {
    return new Error(
      `port ${port} on ${host} is already in use (another "ledger serve"?): pass --port with a free port, or --port 0 to pick one`,
      { cause: error },
    );
  }
  if (code === "EACCES") {
    return new Error(
      `not allowed to listen on ${host}:${port} (ports below 1024 need privileges): pass --port with a port from 1024 up, or --port 0 to pick one`,
      { cause: error },
    );
  }
  if (code === "EADDRNOTAVAIL") return new Error(`--host ${host} is not an address of this machine`, { cause: error });
  return undefined;
}

/**
 * {@link startLocal} as a CLI command starts it: the config found the CLI's way (`--config`,
 * else `LEDGER_CONFIG`, else ./ledger.json, ledger.jsonc, opencode.json, opencode.jsonc, from
 * `io.cwd` and `io.env`; `--lenient-config` or `LEDGER_LENIENT_CONFIG=1` makes unknown keys
 * warnings; throws `ConfigError`), its warnings printed once on `io.stderr` ({@link printConfigWarnings};
 * `serve` also logs them), the `--db` directory, and with `serve` the address to listen on (for
 * `ledger serve`, which also takes the embedded database's lock as the serving process, and
 * serves `serve.web` if given).
 */
export function startLocalForCli(
  opts: { config?: string; db?: string; lenientConfig?: boolean },
  io: Pick<CliIo, "cwd" | "env" | "stderr">,
  serve?: { host: string; port: number; web?: WebPage },
): Promise<RunningLedger> {
  const config = loadConfig({ explicitPath: opts.config, cwd: io.cwd, env: io.env, lenient: opts.lenientConfig || undefined });
  printConfigWarnings(config, io.stderr, { log: serve !== undefined });
  return startLocal({
    config,
    db: opts.db,
    cwd: io.cwd,
    env: io.env,
    ...(serve ? { ...serve, forServe: true } : {}),
  });
}

/**
 * Prints each of `config.warnings` (ignored OpenCode keys, dropped unknown keys, a `"*"` written
 * last, URLs in `instructions`; docs/opencode-migration.md) on `stderr` as `warning: <text>\n`,
 * and with `log` also as one log line each (`config: <first line>`, the rest as `detail`), as
 * `ledger serve` does; a client command's in-process server does not log them (its log lines
 * would mix into the command's output).
 */
export function printConfigWarnings(config: LedgerConfig, stderr: CliIo["stderr"], options: { log: boolean }): void {
  for (const warning of config.warnings) {
    stderr.write(`warning: ${warning}\n`);
    if (!options.log) continue;
    logger.warn(`config: ${warning.split("\n")[0]}`, {
      config: config.source,
      detail: warning
        .split("\n")
        .slice(1)
        .map((l) => l.trim()),
    });
  }
}
