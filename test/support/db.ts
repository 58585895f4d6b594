import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import type { Kysely } from "kysely";
import pg from "pg";
import { SessionSchema } from "../../gen/ledger/v1/session_pb.js";
import { newId } from "../../src/ids.js";
import { openDatabase, type Database, type DatabaseTarget } from "../../src/storage/db.js";
import type { DB } from "../../src/storage/schema.js";
import { insertSession } from "../../src/storage/session-store.js";
import { migrations } from "../../src/storage/migrations/index.js";

/** Which engine this test run uses: `LEDGER_TEST_DB=pglite|postgres` (default postgres). */
export const TEST_ENGINE: "postgres" | "pglite" = process.env.LEDGER_TEST_DB === "pglite" ? "pglite" : "postgres";

/** Server used to create per-run databases: `TEST_DATABASE_URL` or the local test cluster. */
export const ADMIN_URL = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";

/** A fresh, empty database for one test file, and how to drop it. */
export interface TestDatabase {
  target: DatabaseTarget;
  /** The Postgres URL (postgres engine only). */
  url?: string;
  drop(): Promise<void>;
}

/**
 * Creates a database of its own for the calling test file: a new Postgres database
 * `ledger_test_<random>` on the test cluster, or an in-memory PGlite. Never shares one.
 */
export async function createTestDatabase(engine = TEST_ENGINE): Promise<TestDatabase> {
  if (engine === "pglite") return { target: { kind: "pglite", dir: ":memory:" }, drop: async () => {} };
  const name = `ledger_test_${Date.now().toString(36)}_${randomBytes(4).toString("hex")}`;
  await admin(`create database ${name}`);
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    target: { kind: "postgres", url: url.toString(), poolSize: 5 },
    url: url.toString(),
    drop: () => admin(`drop database if exists ${name} with (force)`),
  };
}

/**
 * For a test file that uses the storage layer directly: a fresh test database (see
 * {@link createTestDatabase}), opened and migrated; its `close()` also drops it.
 */
export async function openTestDatabase(): Promise<Database> {
  const test = await createTestDatabase();
  const database = await openDatabase(test.target);
  return {
    ...database,
    async close() {
      await database.close();
      await test.drop();
    },
  };
}

/** Stores a new session row (directory /tmp, title "t") and returns its id. */
export async function insertTestSession(db: Kysely<DB>): Promise<string> {
  const session = create(SessionSchema, { id: newId("ses"), directory: "/tmp", title: "t" });
  await insertSession(db, session, new Date());
  return session.id;
}

async function admin(statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: ADMIN_URL });
  try {
    await client.connect();
  } catch (error) {
    throw new Error(
      `Postgres is not reachable at ${ADMIN_URL} (${String(error)}). Start it (.ci/run does: pg_ctlcluster ... main start), ` +
        "set TEST_DATABASE_URL, or run the PGlite tests only with `npx vitest run --project pglite`.",
    );
  }
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}

/** The names of the migrations after `name` (which must exist), newest first: the order `migrateTo(name)` takes them down. */
export function migrationsAfter(name: string): string[] {
  const names = Object.keys(migrations).sort();
  if (!names.includes(name)) throw new Error(`no migration ${name}`);
  return names.filter((n) => n > name).reverse();
}
