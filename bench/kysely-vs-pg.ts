/**
 * The storage layer through Kysely (the app's `openDatabase`, `writeSession` and the store
 * functions) vs the very same SQL statements, with the same parameters and the same JavaScript
 * around them (proto ↔ JSON, event objects), issued directly through a `pg.Pool` of the same
 * size. The statement texts are captured from Kysely at start and checked to be identical.
 *
 * Two workloads: the prompt write transaction (5 text parts: lock, message, parts, events,
 * session update) and a page read (50 messages after a position, then their parts).
 */
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Kysely, PostgresDialect } from "kysely";
import pg from "pg";
import { SessionEventSchema, type SessionEvent } from "../gen/ledger/v1/event_pb.js";
import { MessageSchema, type Message } from "../gen/ledger/v1/message_pb.js";
import { PartSchema, type Part } from "../gen/ledger/v1/part_pb.js";
import { EventBus } from "../src/events/bus.js";
import { newId } from "../src/ids.js";
import { writeSession, type EventKind } from "../src/ledger/writer.js";
import { openDatabase } from "../src/storage/db.js";
import { toJsonb } from "../src/storage/jsonb.js";
import { insertMessage, listMessageRows } from "../src/storage/message-store.js";
import { insertParts, listPartRows, type NewPart } from "../src/storage/part-store.js";
import { protoCaseName } from "../src/storage/proto-names.js";
import type { DB, MessageRow, PartRow } from "../src/storage/schema.js";
import { insertSession, rowToSession, type SessionRowWithCount } from "../src/storage/session-store.js";
import { SessionSchema } from "../gen/ledger/v1/session_pb.js";
import { atMost, createBenchDatabase, log, paired, percentileRows, prose, scaled, type Row } from "./common.js";

const PARTS = 5;
const PAGE = 50;

/** One prompt's worth of rows, built before timing. */
interface Input {
  message: Message;
  parts: Part[];
}

function input(sessionId: string, i: number): Input {
  const messageId = newId("msg");
  const message = create(MessageSchema, {
    kind: { case: "user", value: { id: messageId, sessionId, timeCreated: timestampFromDate(new Date()), agent: "build", noReply: true } },
  });
  const parts = Array.from({ length: PARTS }, (_, p) =>
    create(PartSchema, { id: newId("prt"), sessionId, messageId, kind: { case: "text", value: { text: prose(200, i + p) } } }),
  );
  return { message, parts };
}

/** The events `storePrompt` emits for a plain text prompt. */
function promptEvents(emit: (kind: EventKind) => SessionEvent, input: Input, session: () => ReturnType<typeof rowToSession>): void {
  emit({ case: "messageUpdated", value: { message: input.message } });
  for (const part of input.parts) emit({ case: "partUpdated", value: { part } });
  emit({ case: "prompted", value: { messageId: input.message.kind.value!.id, noReply: true } });
  emit({ case: "sessionUpdated", value: { session: session() } });
}

/** The Kysely path: exactly what `storePrompt` runs inside its transaction. */
async function kyselyWrite(deps: { db: Kysely<DB>; bus: EventBus }, sessionId: string, data: Input): Promise<void> {
  await writeSession(deps, sessionId, async (w) => {
    await insertMessage(w.trx, { message: data.message, position: w.nextPosition(), requestHash: "bench" });
    w.session.messageCount += 1;
    await insertParts(
      w.trx,
      data.parts.map((part): NewPart => ({ part, position: w.nextPosition() })),
    );
    promptEvents(w.emit, data, () => w.session);
  });
}

/**
 * The statements of the raw path, as Kysely compiles them. The lock statement (one parameter,
 * the session id) is taken from Kysely's own query log at start, so it follows `lockSession`.
 */
const SQL = {
  lock: "",
  message:
    'insert into "message" ("id", "session_id", "position", "role", "parent_id", "data", "request_hash") values ($1, $2, $3, $4, $5, $6, $7)',
  part: (rows: number) =>
    `insert into "part" ("id", "session_id", "message_id", "position", "kind", "data") values ${placeholders(rows, 6)}`,
  event: (rows: number) =>
    `insert into "session_event" ("session_id", "seq", "kind", "data", "data_bytes", "time") values ${placeholders(rows, 6)}`,
  update:
    'update "session" set "data" = $1, "last_seq" = $2, "last_position" = $3, "message_count" = $4, "time_updated" = $5 where "id" = $6',
  messages: 'select * from "message" where "session_id" = $1 and "position" > $2 order by "position" asc limit $3',
  parts: (ids: number) =>
    `select * from "part" where "session_id" = $1 and "message_id" in (${Array.from({ length: ids }, (_, i) => `$${i + 2}`).join(", ")}) order by "position" asc`,
};

function placeholders(rows: number, columns: number): string {
  return Array.from(
    { length: rows },
    (_, r) => `(${Array.from({ length: columns }, (_, c) => `$${r * columns + c + 1}`).join(", ")})`,
  ).join(", ");
}

/** The raw path: the same statements and parameters through one pooled `pg` client. */
async function rawWrite(pool: pg.Pool, bus: EventBus, sessionId: string, data: Input, trace?: string[]): Promise<void> {
  const client = await pool.connect();
  const query = <R extends pg.QueryResultRow>(text: string, values?: unknown[]) => {
    trace?.push(text);
    return client.query<R>(text, values);
  };
  let events: SessionEvent[] = [];
  try {
    await query("begin");
    const locked = (await query<SessionRowWithCount>(SQL.lock, [sessionId])).rows[0]!;
    const session = rowToSession(locked);
    const now = new Date();
    let lastSeq = Number(locked.last_seq);
    let lastPosition = Number(locked.last_position);
    events = [];
    const emit = (kind: EventKind) => {
      const event = create(SessionEventSchema, { sessionId, seq: BigInt(++lastSeq), time: timestampFromDate(now), kind });
      events.push(event);
      return event;
    };
    const user = data.message.kind.value!;
    await query(SQL.message, [
      user.id,
      user.sessionId,
      ++lastPosition,
      data.message.kind.case,
      null,
      toJsonb(MessageSchema, data.message),
      "bench",
    ]);
    session.messageCount += 1;
    const partParams = data.parts.flatMap((part) => [
      part.id,
      part.sessionId,
      part.messageId,
      ++lastPosition,
      protoCaseName(PartSchema, part.kind.case ?? ""),
      toJsonb(PartSchema, part),
    ]);
    await query(SQL.part(data.parts.length), partParams);
    promptEvents(emit, data, () => session);
    const eventParams = events.flatMap((event) => {
      const json = toJsonb(SessionEventSchema, event);
      return [
        event.sessionId,
        Number(event.seq),
        protoCaseName(SessionEventSchema, event.kind.case ?? ""),
        json,
        Buffer.byteLength(json),
        now,
      ];
    });
    await query(SQL.event(events.length), eventParams);
    const sessionData = toJsonb(
      SessionSchema,
      create(SessionSchema, { ...session, timeCreated: undefined, timeUpdated: undefined, messageCount: 0 }),
    );
    await query(SQL.update, [sessionData, lastSeq, lastPosition, session.messageCount, now, sessionId]);
    await query("commit");
  } catch (error) {
    await client.query("rollback").catch(() => {});
    throw error;
  } finally {
    client.release();
  }
  bus.publish(events);
}

async function kyselyRead(db: Kysely<DB>, sessionId: string, after: number): Promise<PartRow[]> {
  const messages = await listMessageRows(db, sessionId, { afterPosition: after, limit: PAGE });
  return listPartRows(
    db,
    sessionId,
    messages.map((m) => m.id),
  );
}

async function rawRead(pool: pg.Pool, sessionId: string, after: number, trace?: string[]): Promise<PartRow[]> {
  trace?.push(SQL.messages);
  const messages = (await pool.query<MessageRow>(SQL.messages, [sessionId, after, PAGE])).rows;
  const ids = messages.map((m) => m.id);
  trace?.push(SQL.parts(ids.length));
  return (await pool.query<PartRow>(SQL.parts(ids.length), [sessionId, ...ids])).rows;
}

export async function kyselyVsPg(): Promise<Row[]> {
  const database = await createBenchDatabase("kysely");
  const opened = await openDatabase({ kind: "postgres", url: database.url, poolSize: 10 });
  const pool = new pg.Pool({ connectionString: database.url, max: 10 });
  const bus = new EventBus();
  const deps = { db: opened.db, bus };
  try {
    const sessions = { kysely: newId("ses"), raw: newId("ses"), read: newId("ses") };
    for (const id of Object.values(sessions)) {
      await insertSession(opened.db, create(SessionSchema, { id, directory: "/tmp", title: "bench", agent: "build" }), new Date());
    }

    // The statements Kysely sends, captured through its query log, must be the raw path's.
    const kyselyTrace: string[] = [];
    const logged = new Kysely<DB>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: database.url, max: 2 }) }),
      log: (event) => void kyselyTrace.push(event.query.sql),
    });
    const rawTrace: string[] = [];
    await kyselyWrite({ db: logged, bus }, sessions.read, input(sessions.read, 0));
    const lock = kyselyTrace.find((statement) => /^select .* for update$/s.test(statement));
    if (!lock || !lock.includes("$1") || lock.includes("$2"))
      throw new Error(`no one-parameter lock statement in Kysely's log: ${JSON.stringify(kyselyTrace)}`);
    SQL.lock = lock;
    await rawWrite(pool, bus, sessions.read, input(sessions.read, 0), rawTrace);
    // Seed the read session: 200 prompts of 5 parts.
    for (let i = 0; i < 200; i++) await kyselyWrite(deps, sessions.read, input(sessions.read, i));
    await kyselyRead(logged, sessions.read, 100);
    await rawRead(pool, sessions.read, 100, rawTrace);
    await logged.destroy();
    const strip = (trace: string[]) => trace.filter((s) => s !== "begin" && s !== "commit");
    if (JSON.stringify(strip(kyselyTrace)) !== JSON.stringify(strip(rawTrace))) {
      throw new Error(
        `the raw path does not send Kysely's statements:\nkysely: ${JSON.stringify(kyselyTrace, null, 1)}\nraw: ${JSON.stringify(rawTrace, null, 1)}`,
      );
    }

    const iterations = scaled(500, 20);
    const warmup = scaled(50, 5);
    log(`kysely vs pg: ${iterations} write transactions and ${iterations} page reads each`);
    const inputs = {
      kysely: Array.from({ length: iterations + warmup }, (_, i) => input(sessions.kysely, i)),
      raw: Array.from({ length: iterations + warmup }, (_, i) => input(sessions.raw, i)),
    };
    const writes = await paired(
      iterations,
      warmup,
      (i) => kyselyWrite(deps, sessions.kysely, inputs.kysely[i]!),
      (i) => rawWrite(pool, bus, sessions.raw, inputs.raw[i]!),
    );
    // Pages start at varying positions of the 200-prompt session (6 positions per prompt).
    const after = (i: number) => ((i * 37) % 140) * (PARTS + 1);
    const reads = await paired(
      iterations,
      warmup,
      (i) => kyselyRead(opened.db, sessions.read, after(i)),
      (i) => rawRead(pool, sessions.read, after(i)),
    );
    const writeNote =
      "ours: writeSession + insertMessage/insertParts + 8 events (what storePrompt runs in its transaction) on the app's Kysely (PostgresDialect, pg.Pool max 10); " +
      "baseline: the identical SQL texts (checked against Kysely's query log) and parameters, with the same proto/JSON work, on a bare pg.Pool max 10";
    const readNote =
      "ours: listMessageRows(after, limit 50) + listPartRows(ids) on Kysely; baseline: the identical two statements on a bare pg.Pool";
    return [
      ...percentileRows(
        `Kysely vs raw pg: prompt write txn (${PARTS} parts)`,
        writes.a,
        writes.b,
        { 50: atMost(1.2), 99: undefined },
        writeNote,
      ),
      ...percentileRows(`Kysely vs raw pg: read ${PAGE} messages + parts`, reads.a, reads.b, { 50: atMost(1.2), 99: undefined }, readNote),
    ];
  } finally {
    await opened.close();
    await pool.end();
    await database.drop();
  }
}
