import { mkdirSync } from "node:fs";
import { PGlite } from "@electric-sql/pglite";
import { Kysely, PGliteDialect, PostgresDialect, sql } from "kysely";
import { Migrator } from "kysely/migration";
import pg from "pg";
import { migrations } from "./migrations/index.js";
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
 * when needed. Throws `DatabaseOpenError` naming the database (password hidden) and the cause
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

/** Reads `DATABASE_URL`: a Postgres target when set, else PGlite in `dir`. */
export function targetFromEnv(dir: string, env: NodeJS.ProcessEnv = process.env): DatabaseTarget {
  const url = env.DATABASE_URL;
  return url ? { kind: "postgres", url } : { kind: "pglite", dir };
}

/**
 * Runs all pending migrations (Kysely `Migrator` with the static list). Throws with the cause's
 * message: `migration <name> failed: <cause>` when a migration fails, the cause's own message
 * (e.g. `connect ECONNREFUSED 127.0.0.1:5499`) when none could run; `cause` is set.
 */
export async function migrate(db: Kysely<DB>): Promise<void> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === "Error");
  if (failed) throw new Error(`migration ${failed.migrationName} failed: ${errorText(error)}`, { cause: error });
  if (error) throw new Error(errorText(error), { cause: error });
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

function openPostgres(url: string, poolSize = 10): Database {
  const pool = new pg.Pool({ connectionString: url, max: poolSize });
  // An idle client that loses its connection must not crash the process.
  pool.on("error", (error) => process.stderr.write(`postgres pool: ${error.message}\n`));
  const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  const poolStats = () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount });
  return { db, kind: "postgres", location: redact(url), poolStats, close: () => db.destroy() };
}

async function openPglite(dir: string): Promise<Database> {
  if (dir !== ":memory:") mkdirSync(dir, { recursive: true });
  const pglite = dir === ":memory:" ? new PGlite() : new PGlite(dir);
  await pglite.waitReady;
  const db = new Kysely<DB>({ dialect: new PGliteDialect({ pglite }) });
  return { db, kind: "pglite", location: dir, poolStats: () => ({ total: 1, idle: 0, waiting: 0 }), close: () => db.destroy() };
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
