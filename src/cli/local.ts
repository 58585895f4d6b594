import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import lockfile from "proper-lockfile";
import { checkHostAuth, startLedger, type RunningLedger } from "../app.js";
import { loadConfig, type LedgerConfig } from "../config/config.js";
import { logger } from "../observe/log.js";
import type { WebPage } from "../server/web-page.js";
import { embeddedDirState, targetFromEnv, type DatabaseTarget } from "../storage/db.js";
import type { CliIo } from "./io.js";

/** The default embedded database directory, relative to the working directory. */
export const DEFAULT_DB_DIR = ".ledger/db";

/**
 * Picks the database: `DATABASE_URL` (Postgres) in `env` when set, else PGlite in `db` (default
 * `./.ledger/db`, relative to `cwd`; `:memory:` for a throw-away one).
 */
export function databaseTarget(db: string | undefined, cwd = process.cwd(), env: NodeJS.ProcessEnv = process.env): DatabaseTarget {
  // An empty --db would resolve to the working directory itself.
  if (db !== undefined && db.trim() === "") throw new Error("--db: expected a directory (or :memory:), got an empty string");
  const dir = db === ":memory:" ? db : path.resolve(cwd, db ?? DEFAULT_DB_DIR);
  return targetFromEnv(dir, env);
}

/** How long a command waits for an embedded database another ledger process holds, unless `LEDGER_DB_LOCK_WAIT_MS` says otherwise (ms). */
export const DEFAULT_LOCK_WAIT_MS = 10_000;

/**
 * Starts a ledger on `host:port` for this process. An embedded (PGlite) data directory can be
 * used by one process only, so it is locked first (`<dir>.lock`); a file or a directory that is
 * no database is refused first (`DatabaseOpenError`, `embeddedDirState`). When another process
 * holds it, `onWait` is told once and the lock is tried again every 200 ms for up to
 * `lockWaitMs` (default {@link DEFAULT_LOCK_WAIT_MS}): a few CLI commands run at once take turns.
 * Then the error says: for `serve` (`forServe`), to pass another `--db` or use Postgres with
 * `DATABASE_URL`; for a client command, to talk to the running server with `--url` or pass
 * another `--db`. A port already in use (or not allowed) throws an error naming it and
 * suggesting `--port 0`; a `host` that does not resolve, or is not this machine's, throws one
 * naming `--host`; a non-loopback `host` without a token throws `ConfigError` (`checkHostAuth`).
 * All three are found before the embedded database is made or locked.
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
  /** How long to wait for an embedded database another process holds (ms); default {@link DEFAULT_LOCK_WAIT_MS}. */
  lockWaitMs?: number;
  /** Told once (one line, no newline) when the embedded database is held by another process and this one waits. */
  onWait?: (message: string) => void;
  /**
   * Told (one line, no newline) when the embedded database's lock is lost while this process
   * holds it: its `<dir>.lock` was removed, or another process took it over as stale (this one
   * did not renew it for 15 s). Default: an uncaught error, which ends the process.
   */
  onLockLost?: (message: string) => void;
}): Promise<RunningLedger> {
  // A host refused for want of a token, one that does not resolve, or a port in use is found
  // before the embedded database is made or locked, so nothing is left behind. Port 0 is probed
  // too: it checks the host.
  if (options.port !== undefined) {
    const host = options.host ?? "127.0.0.1";
    // The address first: a host that does not resolve is said before asking for a token.
    await portFree(host, options.port);
    checkHostAuth(host, options.config);
  }
  const database = databaseTarget(options.db, options.cwd, options.env);
  const release =
    database.kind === "pglite" && database.dir !== ":memory:"
      ? await lockDir(
          database.dir,
          options.forServe === true,
          options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS,
          options.onWait,
          options.onLockLost,
        )
      : async () => {};
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

async function lockDir(
  dir: string,
  forServe: boolean,
  waitMs: number,
  onWait?: (message: string) => void,
  onLockLost?: (message: string) => void,
): Promise<() => Promise<void>> {
  // A file, or a folder that is no database, is refused before the lock's mkdir writes anything.
  await embeddedDirState(dir);
  try {
    await mkdir(dir, { recursive: true });
  } catch (error) {
    throw new Error(`embedded database ${dir} could not be created: ${(error as Error).message}`, { cause: error });
  }
  const onCompromised = (error: Error) => {
    const message =
      `the lock of the embedded database ${dir} was lost (${error.message}): another process may be using the database now; ` +
      "stopping, so that two processes never write it at once";
    if (!onLockLost) throw new Error(message, { cause: error });
    onLockLost(message);
  };
  const lock = (retries: number) =>
    lockfile.lock(dir, {
      stale: 15_000,
      update: 5_000,
      realpath: false,
      retries: { retries, factor: 1, minTimeout: 200, maxTimeout: 200 },
      onCompromised,
    });
  try {
    return await lock(0);
  } catch (error) {
    if ((error as { code?: string }).code !== "ELOCKED") {
      throw new Error(`embedded database ${dir} could not be locked (${dir}.lock is made next to it): ${(error as Error).message}`, {
        cause: error,
      });
    }
  }
  const advice = forServe
    ? "Pass --db with another directory, or run every server on one Postgres database with DATABASE_URL=postgres://... "
    : "Talk to that server with --url http://HOST:PORT, or pass --db with another directory. ";
  if (waitMs > 0) {
    onWait?.(
      `waiting up to ${waitMs / 1000} s for the embedded database ${dir}: another ledger process uses it` +
        (forServe ? "" : ` (a running "ledger serve"? then use --url)`),
    );
    try {
      return await lock(Math.ceil(waitMs / 200));
    } catch (error) {
      if ((error as { code?: string }).code !== "ELOCKED") throw error;
    }
  }
  throw new Error(
    `the embedded database ${dir} is in use by another ledger process (a running "ledger serve"?). ${advice}` +
      `If that process crashed, its lock expires within 15 s.`,
  );
}

/**
 * Resolves when `port` on `host` can be listened on now (it is then closed again; port 0: any
 * port, which checks that `host` resolves to an address of this machine); throws
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
  if (code === "ENOTFOUND" || code === "EAI_NONAME") {
    return new Error(
      `--host ${host}: no such host (the name did not resolve: ${String(code)}); pass an address of this machine, e.g. 127.0.0.1, or 0.0.0.0 for every interface`,
      { cause: error },
    );
  }
  if (code === "EAI_AGAIN") {
    return new Error(
      `--host ${host}: the name could not be looked up now (EAI_AGAIN: DNS did not answer); try again, or pass an IP address such as 127.0.0.1 or 0.0.0.0`,
      { cause: error },
    );
  }
  return undefined;
}

/**
 * {@link startLocal} as a CLI command starts it: the config found the CLI's way (`--config`,
 * else `LEDGER_CONFIG`, else ./ledger.json, ledger.jsonc, opencode.json, opencode.jsonc, from
 * `io.cwd` and `io.env`; `--lenient-config` or `LEDGER_LENIENT_CONFIG=1` makes unknown keys
 * warnings; throws `ConfigError`), its warnings printed once on `io.stderr` ({@link printConfigWarnings};
 * `serve` also logs them), the `--db` directory, and with `serve` the address to listen on (for
 * `ledger serve`, which also takes the embedded database's lock as the serving process, and
 * serves `serve.web` if given). Waiting for a held embedded database ({@link lockWaitFromEnv})
 * is said once on `io.stderr`. With `use.reads` (a command that only reads), an embedded
 * database that does not exist yet (missing or empty directory) is not made: a note on
 * `io.stderr` says so and the command reads an empty `:memory:` one.
 */
export async function startLocalForCli(
  opts: { config?: string; db?: string; lenientConfig?: boolean },
  io: Pick<CliIo, "cwd" | "env" | "stderr" | "exit">,
  serve?: { host: string; port: number; web?: WebPage },
  use: { reads?: boolean } = {},
): Promise<RunningLedger> {
  const config = loadConfig({ explicitPath: opts.config, cwd: io.cwd, env: io.env, lenient: opts.lenientConfig || undefined });
  printConfigWarnings(config, io.stderr, { log: serve !== undefined });
  const lockWaitMs = lockWaitFromEnv(io.env);
  let db = opts.db;
  if (use.reads) {
    // A command that only reads makes no database (a trial, 2026-12-04: "sessions --db" with a
    // mistyped path made that directory tree and a 39 MB database, then said "no sessions"): it
    // reads an empty one in memory instead, and says so.
    const target = databaseTarget(db, io.cwd, io.env);
    // A directory another process is making right now (it holds `<dir>.lock` while it copies
    // the template in) is not "none": this command waits for it on the lock as before.
    if (
      target.kind === "pglite" &&
      target.dir !== ":memory:" &&
      (await embeddedDirState(target.dir)) === "new" &&
      !existsSync(`${target.dir}.lock`)
    ) {
      io.stderr.write(
        `note: no embedded database at ${target.dir} yet (nothing is stored there); this command only reads, so it makes none\n`,
      );
      db = ":memory:";
    }
  }
  return startLocal({
    config,
    db,
    cwd: io.cwd,
    env: io.env,
    lockWaitMs,
    onWait: (message) => void io.stderr.write(`${message}\n`),
    // Not an uncaught error with a stack: the reason, and exit 1 at once (no drain: another
    // process may be writing the database).
    onLockLost: (message) => {
      io.stderr.write(`error: ${message}\n`);
      io.exit(1);
    },
    ...(serve ? { ...serve, forServe: true } : {}),
  });
}

/**
 * `LEDGER_DB_LOCK_WAIT_MS`: how long a command waits for an embedded database another process
 * holds, 0–600000 ms (0: fail at once); unset or empty: {@link DEFAULT_LOCK_WAIT_MS}. Throws for
 * anything else, naming the variable.
 */
export function lockWaitFromEnv(env: NodeJS.ProcessEnv): number {
  const raw = env.LEDGER_DB_LOCK_WAIT_MS;
  if (raw === undefined || raw.trim() === "") return DEFAULT_LOCK_WAIT_MS;
  const ms = Number(raw);
  if (!Number.isInteger(ms) || ms < 0 || ms > 600_000)
    throw new Error(`LEDGER_DB_LOCK_WAIT_MS: expected milliseconds from 0 to 600000, got ${JSON.stringify(raw)}`);
  return ms;
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
