import { mkdirSync } from "node:fs";
import { cp, readdir, rm } from "node:fs/promises";
import path from "node:path";
import type { PGlite, PGliteOptions } from "@electric-sql/pglite";
import { Kysely, PGliteDialect, PostgresDialect, sql } from "kysely";
import { Migrator } from "kysely/migration";
import pg from "pg";
import { migrations } from "./migrations/index.js";
import { PreparingClient } from "./prepared.js";
import { ensureTemplate, isNewDataDir, templateBlob, templateDisabled } from "./pglite-template.js";
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
 * an existing `dir` is opened as it is. Throws `DatabaseOpenError` naming the database (password hidden) and the cause
 * when it cannot be reached or a migration fails, e.g.
 * `database postgres://postgres@127.0.0.1:5432/x: database "x" does not exist`.
 */
export async function openDatabase(target: DatabaseTarget): Promise<Database> {
  const opened = target.kind === "postgres" ? openPostgres(target.url, target.poolSize) : await openPglite(target.dir);
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

/**
 * A one-line description of a failure: its message; for an `AggregateError` with an empty
 * message (Node's connect errors when several addresses were tried), its errors' messages;
 * else its `code`.
 */
function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
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
  const { PGlite } = await import("@electric-sql/pglite");
  const memory = dir === ":memory:";
  const options = pgliteOptions(PGlite.defaultStartParams);
  const create = async (dataDir: string | undefined, loadDataDir?: Blob) => {
    const pglite = new PGlite({ ...options, ...(dataDir === undefined ? {} : { dataDir }), ...(loadDataDir ? { loadDataDir } : {}) });
    await pglite.waitReady;
    return pglite;
  };
  let pglite: PGlite | undefined;
  if (!templateDisabled() && (memory || (await isNewDataDir(dir)))) {
    const template = await ensureTemplate(
      (dataDir) => create(dataDir),
      (made) => migrate(new Kysely<DB>({ dialect: new PGliteDialect({ pglite: made }) })),
    );
    if (template) {
      try {
        if (memory) pglite = await create(undefined, await templateBlob(template));
        else {
          await cp(template.dataDir, dir, { recursive: true });
          pglite = await create(dir);
        }
      } catch (error) {
        process.stderr.write(`note: the PGlite template ${template.dataDir} did not open (${errorText(error)}); running initdb\n`);
        if (!memory) await emptyDir(dir);
      }
    }
  }
  if (!memory) mkdirSync(dir, { recursive: true });
  pglite ??= await create(memory ? undefined : dir);
  const db = new Kysely<DB>({ dialect: new PGliteDialect({ pglite }) });
  return { db, kind: "pglite", location: dir, poolStats: () => ({ total: 1, idle: 0, waiting: 0 }), close: () => db.destroy() };
}

/** Removes everything inside `dir` (a new data directory a failed template copy left half filled). */
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
