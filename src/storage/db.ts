import { constants, mkdirSync } from "node:fs";
import { access, cp, mkdir, readdir, rename, rm, rmdir } from "node:fs/promises";
import path from "node:path";
import type { PGlite, PGliteOptions } from "@electric-sql/pglite";
import { Kysely, PGliteDialect, PostgresDialect, sql } from "kysely";
import { Migrator } from "kysely/migration";
import pg from "pg";
import { migrations } from "./migrations/index.js";
import { PreparingClient } from "./prepared.js";
import { dataDirState, ensureTemplate, removeDeadStagedCopies, stagedCopyPath, templateBlob, templateDisabled } from "./pglite-template.js";
import type { DB } from "./schema.js";

/** Where the ledger lives: a Postgres URL, or an embedded PGlite data directory (or `:memory:`). */
export type DatabaseTarget = { kind: "postgres"; url: string; poolSize?: number } | { kind: "pglite"; dir: string };

/** Connections of the database: open ones, idle ones, and queries waiting for one. */
export interface PoolStats {
  total: number;
  idle: number;
  waiting: number;
}

/** An open database: the Kysely handle, which engine it is, and how to close it. */
export interface Database {
  db: Kysely<DB>;
  kind: DatabaseTarget["kind"];
  /** Human-readable location (URL without password, or the PGlite directory). */
  location: string;
  /** The `pg.Pool`'s counts right now; PGlite is one embedded connection: 1/0/0. */
  poolStats(): PoolStats;
  close(): Promise<void>;
}

/**
 * Opens the database and runs every pending migration. Postgres goes through a `pg.Pool`
 * (default 10 connections); PGlite through Kysely's built-in `PGliteDialect`, creating `dir`
 * when needed. PGlite itself is imported here, on first use, so a ledger on Postgres never loads
 * it. A new embedded database (`:memory:`, or a missing or empty `dir`) starts from a copy of the
 * migrated template (see `pglite-template.ts`; `LEDGER_PGLITE_TEMPLATE=off` runs initdb instead);
 * an existing `dir` (one holding `PG_VERSION`) is opened as it is; a file, or a directory that
 * holds anything else, is refused before anything is written ({@link embeddedDirState}). Throws
 * `DatabaseOpenError` naming the database (password hidden) and the cause when it cannot be
 * reached, created or used, or a migration fails, e.g.
 * `database postgres://postgres@127.0.0.1:5432/x: database "x" does not exist`.
 */
export async function openDatabase(target: DatabaseTarget): Promise<Database> {
  const opened =
    target.kind === "postgres"
      ? openPostgres(target.url, target.poolSize)
      : await openPglite(target.dir).catch((error: unknown) => {
          throw error instanceof DatabaseOpenError
            ? error
            : new DatabaseOpenError(`embedded database ${target.dir}: ${errorText(error)}`, { cause: error });
        });
  try {
    await migrate(opened.db);
  } catch (error) {
    await opened.close().catch(() => undefined);
    throw new DatabaseOpenError(`database ${opened.location}: ${errorText(error)}`, { cause: error });
  }
  return opened;
}

/** The database could not be opened (unreachable, missing, refused, or a migration failed); the message says which and why. */
export class DatabaseOpenError extends Error {
  override name = "DatabaseOpenError";
}

/** Asks the database for `select 1`: resolves when it answered, throws what the driver throws (unreachable, refused, ...). */
export async function ping(db: Kysely<DB>): Promise<void> {
  await sql`select 1`.execute(db);
}

/** Connections of the Postgres pool unless `LEDGER_DB_POOL` says otherwise. */
export const DEFAULT_POOL_SIZE = 10;

/**
 * Reads `DATABASE_URL`: a Postgres target when set (with `LEDGER_DB_POOL` connections, 1–1000,
 * default {@link DEFAULT_POOL_SIZE}), else PGlite in `dir`. Throws `DatabaseOpenError` for a
 * `LEDGER_DB_POOL` that is no integer in range.
 */
export function targetFromEnv(dir: string, env: NodeJS.ProcessEnv = process.env): DatabaseTarget {
  const url = env.DATABASE_URL;
  if (!url) return { kind: "pglite", dir };
  const pool = env.LEDGER_DB_POOL;
  if (pool === undefined || pool === "") return { kind: "postgres", url };
  const poolSize = Number(pool);
  if (!Number.isInteger(poolSize) || poolSize < 1 || poolSize > 1000)
    throw new DatabaseOpenError(`LEDGER_DB_POOL: expected the number of Postgres connections (1-1000), got ${JSON.stringify(pool)}`);
  return { kind: "postgres", url, poolSize };
}

/**
 * Runs all pending migrations (Kysely `Migrator` with the static list). Throws with the cause's
 * message: `migration <name> failed: <cause>` when a migration fails, the cause's own message
 * (e.g. `connect ECONNREFUSED 127.0.0.1:5499`) when none could run; `cause` is set.
 */
export async function migrate(db: Kysely<DB>): Promise<void> {
  if (await upToDate(db)) return;
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === "Error");
  if (failed) throw new Error(`migration ${failed.migrationName} failed: ${errorText(error)}`, { cause: error });
  if (error) throw new Error(errorText(error), { cause: error });
}

/**
 * True when the database has run exactly the migrations of this build (`kysely_migration` holds
 * their names and no others): then `migrate` has nothing to do, and skips Kysely's `Migrator`,
 * which introspects every table and column of the schema and takes its lock first. Two reads
 * instead: measured (2026-12-03, `ledger sessions` on an embedded database, a process per
 * command) the Migrator took 230 ms of the command's 2.2 s, these 2 ms. A database behind or
 * ahead of this build, or one never migrated, goes through the Migrator (which migrates, waits
 * for another process's migration, or refuses an unknown one as before).
 */
async function upToDate(db: Kysely<DB>): Promise<boolean> {
  const table = await sql<{ present: boolean }>`select to_regclass('kysely_migration') is not null as present`.execute(db);
  if (!table.rows[0]?.present) return false;
  const applied = await sql<{ name: string }>`select name from kysely_migration`.execute(db);
  const names = new Set(Object.keys(migrations));
  return applied.rows.length === names.size && applied.rows.every((row) => names.has(row.name));
}

/** Names of the errno values of PGlite's WebAssembly file system (Emscripten's `ERRNO_CODES`), for the usual ones. */
const WASM_ERRNO: Readonly<Record<number, string>> = {
  2: "EACCES",
  20: "EEXIST",
  28: "EINVAL",
  29: "EIO",
  31: "EISDIR",
  44: "ENOENT",
  51: "ENOSPC",
  54: "ENOTDIR",
  55: "ENOTEMPTY",
  63: "EPERM",
  69: "EROFS",
};

/**
 * A one-line description of something thrown that is no `Error`: its string `message`, else its
 * `code`; PGlite's WebAssembly file system throws `{ name: "ErrnoError", errno: 2 }`, described as
 * `ErrnoError EACCES (errno 2 of PGlite's file system)`; else its JSON (at most 200
 * characters); a primitive as `String` gives it. Never a bare `[object Object]`.
 */
function objectText(thrown: unknown): string {
  if (typeof thrown !== "object" || thrown === null) return String(thrown);
  const { message, code, errno, name } = thrown as { message?: unknown; code?: unknown; errno?: unknown; name?: unknown };
  if (typeof message === "string" && message) return message;
  if (typeof code === "string" && code) return code;
  if (typeof errno === "number") {
    const label = typeof name === "string" && name ? name : "file system error";
    const known = WASM_ERRNO[errno];
    return `${label}${known ? ` ${known}` : ""} (errno ${errno} of PGlite's file system)`;
  }
  let json: string | undefined;
  try {
    json = JSON.stringify(thrown);
  } catch {
    json = undefined;
  }
  return json && json !== "{}" ? json.slice(0, 200) : `something without a message was thrown (${Object.prototype.toString.call(thrown)})`;
}

/**
 * A one-line description of a failure: its message; for an `AggregateError` with an empty
 * message (Node's connect errors when several addresses were tried), its errors' messages;
 * else its `code`; for something thrown that is no `Error`, see {@link objectText}. Exported for
 * its tests.
 */
export function errorText(error: unknown): string {
  if (!(error instanceof Error)) return objectText(error);
  if (error.message) return error.message;
  if (error instanceof AggregateError && error.errors.length > 0) return [...new Set(error.errors.map(errorText))].join("; ");
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" ? code : error.name;
}

function openPostgres(url: string, poolSize = DEFAULT_POOL_SIZE): Database {
  // PreparingClient: the per-prompt write statement stays prepared on each connection (prepared.ts).
  const pool = new pg.Pool({ connectionString: url, max: poolSize, Client: PreparingClient });
  // An idle client that loses its connection must not crash the process.
  pool.on("error", (error) => process.stderr.write(`postgres pool: ${error.message}\n`));
  const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  const poolStats = () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount });
  return { db, kind: "postgres", location: redact(url), poolStats, close: () => db.destroy() };
}

/**
 * PGlite's start options for the ledger: PGlite's defaults (`PGlite.defaultStartParams`, e.g.
 * `--single`, no parallel workers) plus {@link PGLITE_SETTINGS} as `-c name=value`. Takes the
 * defaults as an argument so this module does not import PGlite.
 */
export function pgliteOptions(defaultStartParams: readonly string[]): PGliteOptions {
  return { startParams: [...defaultStartParams, ...PGLITE_SETTINGS.flatMap((setting) => ["-c", setting])] };
}

/**
 * Postgres settings passed to PGlite at every start. `shared_buffers` 16 MB instead of 128 MB:
 * Postgres initializes its shared memory inside PGlite's WebAssembly memory, which never
 * shrinks, so every MB counts in the process's RSS; one embedded connection does not need them
 * (files on disk are cached by the OS, a `:memory:` database is in memory anyway). Measured:
 * idle RSS of a new `--db` directory 374 → 250 MiB, noReply prompt latency unchanged (see
 * docs/operations.md#memory).
 */
const PGLITE_SETTINGS: readonly string[] = ["shared_buffers=16MB"];

async function openPglite(dir: string): Promise<Database> {
  const memory = dir === ":memory:";
  const state = memory ? "new" : await embeddedDirState(dir);
  const { PGlite } = await import("@electric-sql/pglite");
  const options = pgliteOptions(PGlite.defaultStartParams);
  const create = async (dataDir: string | undefined, loadDataDir?: Blob) => {
    const pglite = new PGlite({ ...options, ...(dataDir === undefined ? {} : { dataDir }), ...(loadDataDir ? { loadDataDir } : {}) });
    await pglite.waitReady;
    return pglite;
  };
  let pglite: PGlite | undefined;
  if (state === "new" && !memory) await removeDeadStagedCopies(dir);
  if (state === "new" && !templateDisabled()) {
    const template = await ensureTemplate(
      (dataDir) => create(dataDir),
      (made) => migrate(new Kysely<DB>({ dialect: new PGliteDialect({ pglite: made }) })),
    );
    if (template) {
      // Writing the copy fails for reasons of `dir` (permissions, disk space), not the template's: that throws.
      if (!memory) await copyIntoPlace(template.dataDir, dir);
      try {
        pglite = memory ? await create(undefined, await templateBlob(template)) : await create(dir);
      } catch (error) {
        process.stderr.write(`note: the PGlite template ${template.dataDir} did not open (${errorText(error)}); running initdb\n`);
        if (!memory) await emptyDir(dir);
      }
    }
  }
  if (!memory) mkdirSync(dir, { recursive: true });
  try {
    pglite ??= await create(memory ? undefined : dir);
  } catch (error) {
    const advice =
      state === "database"
        ? " (a database whose creation was interrupted holds nothing yet: if a ledger command creating it was stopped, delete the directory and run again)"
        : "";
    throw new DatabaseOpenError(`embedded database ${dir} did not open: ${errorText(error)}${advice}`, { cause: error });
  }
  const db = new Kysely<DB>({ dialect: new PGliteDialect({ pglite }) });
  return { db, kind: "pglite", location: dir, poolStats: () => ({ total: 1, idle: 0, waiting: 0 }), close: () => db.destroy() };
}

/**
 * Whether the embedded database directory `dir` is `new` (missing or empty: a database is made)
 * or an existing `database` (it holds `PG_VERSION`). Throws `DatabaseOpenError` naming `dir`
 * and the reason for a file, for a directory holding anything else (nothing is written into
 * it), and for one that this process cannot read or write. The CLI checks its `--db` with this before locking it.
 */
export async function embeddedDirState(dir: string): Promise<"new" | "database"> {
  let state: Awaited<ReturnType<typeof dataDirState>>;
  try {
    state = await dataDirState(dir);
  } catch (error) {
    throw new DatabaseOpenError(`embedded database ${dir} cannot be read: ${errorText(error)}`, { cause: error });
  }
  if (state.kind === "refused") throw new DatabaseOpenError(`embedded database ${dir} cannot be used: ${state.reason}`);
  if (state.kind === "database") {
    // PGlite only says "failed to initialize properly" for a database it may not write.
    try {
      await access(dir, constants.R_OK | constants.W_OK | constants.X_OK);
    } catch (error) {
      throw new DatabaseOpenError(
        `embedded database ${dir} cannot be written by this process (${errorText(error)}): every start writes to it; ` +
          "run as its owner, or copy it to a directory of yours",
        { cause: error },
      );
    }
  }
  return state.kind;
}

/**
 * Copies the template's data directory to the new database `dir` so that `dir` is never half
 * made: the copy goes to a hidden sibling ({@link stagedCopyPath}) and is renamed onto `dir`
 * (missing, or the empty directory the CLI's lock made). A process killed while copying (Ctrl-C
 * during the first command) leaves `dir` as it was, and the sibling, which the next open removes.
 * Throws `DatabaseOpenError` when `dir` or its parent cannot be written.
 */
async function copyIntoPlace(template: string, dir: string): Promise<void> {
  const staged = stagedCopyPath(dir);
  try {
    await mkdir(path.dirname(dir), { recursive: true });
    await cp(template, staged, { recursive: true });
    try {
      await rename(staged, dir);
    } catch (error) {
      // POSIX renames a directory onto an empty one; elsewhere the empty one goes first.
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== "EEXIST" && code !== "ENOTEMPTY" && code !== "EPERM" && code !== "EISDIR") throw error;
      await rmdir(dir);
      await rename(staged, dir);
    }
  } catch (error) {
    await rm(staged, { recursive: true, force: true }).catch(() => undefined);
    throw new DatabaseOpenError(`embedded database ${dir} could not be created: ${errorText(error)}`, { cause: error });
  }
}

/** Removes everything inside `dir` (a new data directory whose copy of the template did not open). */
async function emptyDir(dir: string): Promise<void> {
  const entries = await readdir(dir).catch(() => []);
  await Promise.all(entries.map((name) => rm(path.join(dir, name), { recursive: true, force: true })));
}

function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "postgres";
  }
}
