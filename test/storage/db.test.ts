import { create } from "@bufbuild/protobuf";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MessageSchema } from "../../gen/ledger/v1/message_pb.js";
import { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { SessionSchema } from "../../gen/ledger/v1/session_pb.js";
import { newId } from "../../src/ids.js";
import { DatabaseOpenError, errorText, migrate, openDatabase, targetFromEnv, type Database } from "../../src/storage/db.js";
import { insertMessage } from "../../src/storage/message-store.js";
import { insertParts, listPartRows, rowToPart } from "../../src/storage/part-store.js";
import { deleteSessionRow, insertSession } from "../../src/storage/session-store.js";
import { captureStatements } from "../support/pg-capture.js";
import { createTestDatabase, insertTestSession, openTestDatabase, ADMIN_URL, TEST_ENGINE } from "../support/db.js";

let database: Database;
beforeAll(async () => {
  database = await openTestDatabase();
});
afterAll(() => database?.close());

const newSession = () => insertTestSession(database.db);

describe(`storage on ${TEST_ENGINE}`, () => {
  it("runs migrations once and is a no-op the second time", async () => {
    await migrate(database.db);
    const rows = await database.db
      .selectFrom("kysely_migration" as never)
      .selectAll()
      .execute();
    expect(rows.map((r) => (r as { name: string }).name)).toEqual([
      "2026-11-30T0200-create-ledger",
      "2026-11-30T0300-event-retention",
      "2026-11-30T2200-event-data-bytes",
      "2026-12-02T0900-message-parent-id",
      "2026-12-05T0900-permission-request",
      "2026-12-05T0900-session-message-count",
      "2026-12-06T0900-session-todo",
      "2026-12-07T0900-session-owner",
      "2026-12-08T0900-quota-usage",
      "2026-12-09T0900-message-part-data-bytes",
      "2026-12-10T0900-data-bytes-backfill",
    ]);
  });

  it.skipIf(TEST_ENGINE !== "postgres")(
    "checks an up-to-date database with two reads: no lock, no introspection of the schema",
    async () => {
      const sent = await captureStatements(() => migrate(database.db));
      expect(sent.map((s) => s.text.replace(/\s+/g, " ").trim())).toEqual([
        "select to_regclass('kysely_migration') is not null as present",
        "select name from kysely_migration",
      ]);
    },
  );

  it("refuses a database that ran a migration this build does not know, as Kysely's Migrator does", async () => {
    await sql`insert into kysely_migration (name, timestamp) values ('2099-01-01T0000-from-a-newer-build', now()::text)`.execute(
      database.db,
    );
    try {
      await expect(migrate(database.db)).rejects.toThrow(/corrupted migrations.*2099-01-01T0000-from-a-newer-build/);
    } finally {
      await sql`delete from kysely_migration where name = '2099-01-01T0000-from-a-newer-build'`.execute(database.db);
    }
    await migrate(database.db);
  });

  it("inserts more parts than one statement's bind parameters allow, keeping order", async () => {
    const sessionId = await newSession();
    const messageId = newId("msg");
    const count = 12_000; // > 65,535 / 7 columns
    await database.db.transaction().execute(async (trx) => {
      await insertMessage(trx, {
        message: create(MessageSchema, { kind: { case: "user", value: { id: messageId, sessionId } } }),
        position: 1,
      });
      await insertParts(
        trx,
        Array.from({ length: count }, (_, i) => ({
          part: create(PartSchema, { id: newId("prt"), sessionId, messageId, kind: { case: "text", value: { text: String(i) } } }),
          position: i + 2,
        })),
      );
    });
    const parts = (await listPartRows(database.db, sessionId, [messageId])).map(rowToPart);
    expect(parts).toHaveLength(count);
    expect(parts.map((p) => (p.kind.case === "text" ? p.kind.value.text : ""))).toEqual(Array.from({ length: count }, (_, i) => String(i)));
  });

  it("cascades a session delete to messages, parts, events and child sessions", async () => {
    const sessionId = await newSession();
    const child = create(SessionSchema, { id: newId("ses"), directory: "/tmp", parentId: sessionId });
    await insertSession(database.db, child, new Date());
    const messageId = newId("msg");
    await database.db.transaction().execute(async (trx) => {
      await insertMessage(trx, {
        message: create(MessageSchema, { kind: { case: "user", value: { id: messageId, sessionId } } }),
        position: 1,
      });
      await insertParts(trx, [
        { part: create(PartSchema, { id: newId("prt"), sessionId, messageId, kind: { case: "text", value: { text: "x" } } }), position: 2 },
      ]);
      await trx.insertInto("session_event").values({ session_id: sessionId, seq: 1, kind: "prompted", data: "{}" }).execute();
    });
    expect(await deleteSessionRow(database.db, sessionId)).toBe(true);
    for (const table of ["message", "part", "session_event"] as const) {
      expect(await database.db.selectFrom(table).select("session_id").where("session_id", "=", sessionId).execute()).toEqual([]);
    }
    expect(await database.db.selectFrom("session").select("id").where("id", "=", child.id).execute()).toEqual([]);
  });

  it("refuses a reused seq and a reused position in a session", async () => {
    const sessionId = await newSession();
    await database.db.insertInto("session_event").values({ session_id: sessionId, seq: 1, kind: "prompted", data: "{}" }).execute();
    await expect(
      database.db.insertInto("session_event").values({ session_id: sessionId, seq: 1, kind: "prompted", data: "{}" }).execute(),
    ).rejects.toThrow();
    const message = (id: string) => create(MessageSchema, { kind: { case: "user", value: { id, sessionId } } });
    await database.db.transaction().execute((trx) => insertMessage(trx, { message: message(newId("msg")), position: 1 }));
    await expect(
      database.db.transaction().execute((trx) => insertMessage(trx, { message: message(newId("msg")), position: 1 })),
    ).rejects.toThrow();
  });
});

describe("openDatabase failures", () => {
  it.skipIf(TEST_ENGINE === "pglite")("names the database and the cause when the database does not exist", async () => {
    const url = new URL(ADMIN_URL);
    url.pathname = "/ledger_no_such_database";
    url.password = "secret";
    const error = await openDatabase({ kind: "postgres", url: url.toString() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DatabaseOpenError);
    expect((error as Error).message).toMatch(
      /^database postgres:\/\/\S+\/ledger_no_such_database: database "ledger_no_such_database" does not exist$/,
    );
    expect((error as Error).message).not.toContain("secret");
  });

  it("names the cause when nothing listens on the port", async () => {
    const port = await closedPort();
    const error = await openDatabase({ kind: "postgres", url: `postgres://postgres@127.0.0.1:${port}/x` }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DatabaseOpenError);
    expect((error as Error).message).toBe(`database postgres://postgres@127.0.0.1:${port}/x: connect ECONNREFUSED 127.0.0.1:${port}`);
  });

  it("refuses an embedded directory that is a file or holds no database, writing nothing (a typo'd --db)", async () => {
    const folder = await mkdtemp(path.join(os.tmpdir(), "ledger-db-dir-"));
    try {
      await writeFile(path.join(folder, "README.md"), "# my project\n");
      const notDb = await openDatabase({ kind: "pglite", dir: folder }).catch((e: unknown) => e);
      expect(notDb).toBeInstanceOf(DatabaseOpenError);
      expect((notDb as Error).message).toBe(
        `embedded database ${folder} cannot be used: it is not empty and holds no database (no PG_VERSION among its 1 entries): ` +
          "name a new or empty directory to create one, or an existing database",
      );
      const file = path.join(folder, "README.md");
      const onFile = await openDatabase({ kind: "pglite", dir: file }).catch((e: unknown) => e);
      expect(onFile).toBeInstanceOf(DatabaseOpenError);
      expect((onFile as Error).message).toBe(`embedded database ${file} cannot be used: it is a file, not a directory`);
      expect(await readdir(folder)).toEqual(["README.md"]);
    } finally {
      await rm(folder, { recursive: true, force: true });
    }
  });

  it("describes what PGlite throws that is no Error (its file system's ErrnoError), never as [object Object]", () => {
    expect(errorText({ name: "ErrnoError", errno: 2 })).toBe("ErrnoError EACCES (errno 2 of PGlite's file system)");
    expect(errorText({ name: "ErrnoError", errno: 44 })).toBe("ErrnoError ENOENT (errno 44 of PGlite's file system)");
    expect(errorText({ errno: 1234 })).toBe("file system error (errno 1234 of PGlite's file system)");
    expect(errorText({ message: "disk full" })).toBe("disk full");
    expect(errorText({ code: "EIO" })).toBe("EIO");
    expect(errorText({ detail: "x" })).toBe('{"detail":"x"}');
    expect(errorText({})).toBe("something without a message was thrown ([object Object])");
    expect(errorText("plain")).toBe("plain");
  });
});

/** A loopback port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe("the Postgres pool size (LEDGER_DB_POOL)", () => {
  it("is read from the environment, 1-1000, and refused otherwise naming the variable", () => {
    const url = "postgres://postgres@127.0.0.1:5432/x";
    expect(targetFromEnv("/d", { DATABASE_URL: url })).toEqual({ kind: "postgres", url });
    expect(targetFromEnv("/d", { DATABASE_URL: url, LEDGER_DB_POOL: "3" })).toEqual({ kind: "postgres", url, poolSize: 3 });
    expect(targetFromEnv("/d", { LEDGER_DB_POOL: "3" })).toEqual({ kind: "pglite", dir: "/d" });
    for (const bad of ["0", "1001", "2.5", "many"])
      expect(() => targetFromEnv("/d", { DATABASE_URL: url, LEDGER_DB_POOL: bad })).toThrow(
        new DatabaseOpenError(`LEDGER_DB_POOL: expected the number of Postgres connections (1-1000), got "${bad}"`),
      );
  });

  it.skipIf(TEST_ENGINE !== "postgres")("bounds the connections a ledger opens", async () => {
    const test = await createTestDatabase("postgres");
    const opened = await openDatabase(targetFromEnv("/unused", { DATABASE_URL: test.url!, LEDGER_DB_POOL: "2" }));
    try {
      await Promise.all(Array.from({ length: 6 }, () => sqlSleep(opened)));
      expect(opened.poolStats()).toMatchObject({ total: 2 });
    } finally {
      await opened.close();
      await test.drop();
    }
  });
});

async function sqlSleep(opened: Database): Promise<void> {
  const { sql } = await import("kysely");
  await sql`select pg_sleep(0.05)`.execute(opened.db);
}
