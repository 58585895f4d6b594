import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { sql } from "kysely";
import { Migrator } from "kysely/migration";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { MessageSchema } from "../../gen/ledger/v1/message_pb.js";
import { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { SessionSchema } from "../../gen/ledger/v1/session_pb.js";
import { newId } from "../../src/ids.js";
import { migrate, openDatabase, type Database } from "../../src/storage/db.js";
import { toJsonb } from "../../src/storage/jsonb.js";
import { migrations } from "../../src/storage/migrations/index.js";
import { getVersionedSessionRow, insertSession, rowToSession } from "../../src/storage/session-store.js";
import { PREPARED } from "../../src/storage/prepared.js";
import { storedEventJson, writeSessionStatement, type StatementEvent } from "../../src/storage/session-write.js";
import type { EventKind } from "../../src/ledger/writer.js";
import { createTestDatabase, migrationsAfter, TEST_ENGINE, type TestDatabase } from "../support/db.js";

// The one-statement session write: the lock, the version check, gap-free seqs after last_seq,
// positions after last_position, the message count kept in its column, rows taken from the
// events' JSON, all or nothing.

let test: TestDatabase;
let database: Database;
beforeAll(async () => {
  test = await createTestDatabase();
  database = await openDatabase(test.target);
});
afterAll(async () => {
  await database?.close();
  await test?.drop();
});

async function newSession(): Promise<string> {
  const session = create(SessionSchema, { id: newId("ses"), directory: "/tmp", title: "t" });
  await insertSession(database.db, session, new Date());
  return session.id;
}

function prompt(sessionId: string, texts: string[]): StatementEvent[] {
  const messageId = newId("msg");
  const message = create(MessageSchema, { kind: { case: "user", value: { id: messageId, sessionId, agent: "build" } } });
  const parts = texts.map((t) =>
    create(PartSchema, { id: newId("prt"), sessionId, messageId, kind: { case: "text", value: { text: t } } }),
  );
  return [
    { event: event(sessionId, { case: "messageUpdated", value: { message } }), row: { kind: "insertMessage", requestHash: "h" } },
    ...parts.map((part) => ({ event: event(sessionId, { case: "partUpdated", value: { part } }), row: { kind: "insertPart" as const } })),
    { event: event(sessionId, { case: "prompted", value: { messageId, noReply: true } }) },
  ];
}

function event(sessionId: string, kind: EventKind): SessionEvent {
  return create(SessionEventSchema, { sessionId, time: timestampFromDate(new Date()), kind });
}

describe(`one-statement session write on ${TEST_ENGINE}`, () => {
  it("appends events after last_seq, rows after last_position, counts the message, and stores the events' JSON", async () => {
    const sessionId = await newSession();
    const first = prompt(sessionId, ["a", "b"]);
    const result = await writeSessionStatement(database.db, { sessionId, events: first, now: new Date(), touch: true });
    expect(result).toMatchObject({ lastSeq: 4, lastPosition: 3, messageCount: 1 });
    expect(first.map((e) => e.event.seq)).toEqual([1n, 2n, 3n, 4n]);
    const second = prompt(sessionId, ["c"]);
    expect(await writeSessionStatement(database.db, { sessionId, events: second, now: new Date(), touch: false })).toMatchObject({
      lastSeq: 7,
      lastPosition: 5,
      messageCount: 2,
    });
    const events = await database.db.selectFrom("session_event").selectAll().where("session_id", "=", sessionId).orderBy("seq").execute();
    expect(events.map((e) => [Number(e.seq), e.kind])).toEqual([
      [1, "message_updated"],
      [2, "part_updated"],
      [3, "part_updated"],
      [4, "prompted"],
      [5, "message_updated"],
      [6, "part_updated"],
      [7, "prompted"],
    ]);
    // data_bytes is the byte length of the JSON text as written ({"seq":"N", then the rest): the
    // length of the event's own JSON with its seq.
    for (const [i, row] of events.entries()) {
      const written = toJsonb(SessionEventSchema, [...first, ...second][i]!.event);
      expect(row.data).toEqual(JSON.parse(written));
      expect(row.data_bytes).toBe(Buffer.byteLength(written));
      // The JSON the commit hint reuses for other replicas: the stored row, byte for byte.
      const reused = storedEventJson([...first, ...second][i]!.event)!;
      expect(JSON.parse(reused)).toEqual(row.data);
      expect(Buffer.byteLength(reused)).toBe(row.data_bytes);
    }
    expect(storedEventJson(event(sessionId, { case: "prompted", value: { messageId: "msg_x", noReply: true } }))).toBeUndefined();
    const parts = await database.db
      .selectFrom("part")
      .select(["position", "data"])
      .where("session_id", "=", sessionId)
      .orderBy("position")
      .execute();
    expect(parts.map((p) => [Number(p.position), (p.data as { text: { text: string } }).text.text])).toEqual([
      [2, "a"],
      [3, "b"],
      [5, "c"],
    ]);
    const message = await database.db.selectFrom("message").selectAll().where("session_id", "=", sessionId).orderBy("position").execute();
    expect(message.map((m) => [Number(m.position), m.request_hash])).toEqual([
      [1, "h"],
      [4, "h"],
    ]);
  });

  it("writes nothing when the row changed since the version it was planned against, or is missing", async () => {
    const sessionId = await newSession();
    const before = (await getVersionedSessionRow(database.db, sessionId))!;
    await writeSessionStatement(database.db, { sessionId, events: prompt(sessionId, ["x"]), now: new Date(), touch: true });
    const stale = await writeSessionStatement(database.db, {
      sessionId,
      expectVersion: before.version,
      events: prompt(sessionId, ["y"]),
      now: new Date(),
      touch: true,
    });
    expect(stale).toBe("stale");
    const after = (await getVersionedSessionRow(database.db, sessionId))!;
    expect(after.version).not.toBe(before.version);
    expect(Number(after.row.last_seq)).toBe(3);
    const ok = await writeSessionStatement(database.db, {
      sessionId,
      expectVersion: after.version,
      events: prompt(sessionId, ["z"]),
      now: new Date(),
      touch: true,
    });
    expect(ok).toMatchObject({ lastSeq: 6, messageCount: 2 });
    expect(
      await writeSessionStatement(database.db, {
        sessionId: "ses_missing",
        events: prompt("ses_missing", ["q"]),
        now: new Date(),
        touch: true,
      }),
    ).toBe("missing");
  });

  it("is all or nothing: a duplicate part id fails the statement and leaves the session as it was", async () => {
    const sessionId = await newSession();
    const events = prompt(sessionId, ["a"]);
    await writeSessionStatement(database.db, { sessionId, events, now: new Date(), touch: true });
    const again = prompt(sessionId, ["b"]);
    const duplicate = events[1]!.event.kind.value as { part: { id: string } };
    (again[1]!.event.kind.value as { part: { id: string } }).part.id = duplicate.part.id;
    await expect(writeSessionStatement(database.db, { sessionId, events: again, now: new Date(), touch: true })).rejects.toMatchObject({
      code: "23505",
    });
    const row = (await getVersionedSessionRow(database.db, sessionId))!.row;
    expect([Number(row.last_seq), Number(row.last_position), Number(row.message_count)]).toEqual([3, 2, 1]);
    expect(await database.db.selectFrom("message").select("id").where("session_id", "=", sessionId).execute()).toHaveLength(1);
  });

  it("a session_updated event marked saveSession becomes the row's data, without times and message count", async () => {
    const sessionId = await newSession();
    const session = rowToSession((await getVersionedSessionRow(database.db, sessionId))!.row);
    session.title = "renamed";
    session.messageCount = 7;
    await writeSessionStatement(database.db, {
      sessionId,
      events: [{ event: event(sessionId, { case: "sessionUpdated", value: { session } }), row: { kind: "saveSession" } }],
      now: new Date(),
      touch: true,
    });
    const row = (await getVersionedSessionRow(database.db, sessionId))!.row;
    expect(row.data).toEqual(
      JSON.parse(
        toJsonb(SessionSchema, create(SessionSchema, { ...session, timeCreated: undefined, timeUpdated: undefined, messageCount: 0 })),
      ),
    );
    expect(Number(row.message_count)).toBe(0);
  });

  it("the message-count migration fills the column from the session's messages", async () => {
    const migrator = new Migrator({ db: database.db, provider: { getMigrations: async () => migrations } });
    // Down to the migration before it (every later one goes down, newest first).
    const down = await migrator.migrateTo("2026-12-05T0900-permission-request");
    expect(down.error).toBeUndefined();
    expect(down.results?.map((r) => r.migrationName)).toEqual(migrationsAfter("2026-12-05T0900-permission-request"));
    expect(down.results?.at(-1)?.migrationName).toBe("2026-12-05T0900-session-message-count");
    const sessionId = await newSession();
    for (let i = 1; i <= 3; i++) {
      const message = create(MessageSchema, { kind: { case: "user", value: { id: newId("msg"), sessionId } } });
      await sql`insert into message (id, session_id, position, role, data) values (${message.kind.value!.id}, ${sessionId}, ${i}, 'user', ${toJsonb(MessageSchema, message)}::jsonb)`.execute(
        database.db,
      );
    }
    await migrate(database.db);
    const row = (await getVersionedSessionRow(database.db, sessionId))!.row;
    expect(Number(row.message_count)).toBe(3);
    expect(rowToSession(row).messageCount).toBe(3);
  });
});

describe.skipIf(TEST_ENGINE !== "postgres")("the write statement stays prepared on Postgres", () => {
  it("runs as one named prepared statement per connection: parsed and planned once, not on every prompt", async () => {
    const one = await openDatabase({ kind: "postgres", url: test.url!, poolSize: 1 });
    try {
      const sessionId = await newSession();
      for (const texts of [["a"], ["b", "c"], ["d"]]) {
        await writeSessionStatement(one.db, { sessionId, events: prompt(sessionId, texts), now: new Date(), touch: true });
      }
      // pg_prepared_statements lists the statements of the current connection: the pool's only one.
      const prepared = await sql<{ name: string; statement: string }>`select name, statement from pg_prepared_statements`.execute(one.db);
      expect(
        prepared.rows.map((r) => [
          r.name.replace(/[0-9a-f]{16}$/, "<hash>"),
          r.statement.startsWith(PREPARED),
          r.statement.includes("insert into session_event"),
        ]),
      ).toEqual([["ledger_<hash>", true, true]]);
    } finally {
      await one.close();
    }
  });
});
