import { toJson } from "@bufbuild/protobuf";
import { sql, type Kysely } from "kysely";
import {
  MessageUpdatedSchema,
  PartUpdatedSchema,
  SessionEventSchema,
  SessionUpdatedSchema,
  type SessionEvent,
} from "../../gen/ledger/v1/event_pb.js";
import type { Message } from "../../gen/ledger/v1/message_pb.js";
import { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { SessionSchema } from "../../gen/ledger/v1/session_pb.js";
import { makeStorable } from "./jsonb.js";
import { PREPARED } from "./prepared.js";
import { protoCaseName, protoJsonName } from "./proto-names.js";
import type { DB } from "./schema.js";

/**
 * What one event of a `writeSessionStatement` also does to a row. The row's JSON is taken, in
 * the statement, from the event's JSON (the message of a `message_updated`, the part of a
 * `part_updated`, the session of a `session_updated`), so each is built once.
 *
 * - `insertMessage`: inserts the event's message at the next position (`message_count` + 1);
 * - `updateMessage`: replaces the stored message's data and `parent_id`;
 * - `insertPart`: inserts the event's part at the next position;
 * - `updatePart`: replaces the stored part's data;
 * - `saveSession`: the event's session (without times and message count) becomes the row's `data`.
 */
export type RowChange =
  | { kind: "insertMessage"; requestHash?: string }
  | { kind: "updateMessage" }
  | { kind: "insertPart" }
  | { kind: "updatePart" }
  | { kind: "saveSession" };

/** One event of a statement and the row change it carries, if any. */
export interface StatementEvent {
  /** The event; its `seq` is assigned by the statement (the row's `last_seq` + its place, 1-based). */
  event: SessionEvent;
  row?: RowChange;
}

/** A write to one session carried out as ONE statement (see `writeSessionStatement`). */
export interface SessionStatement {
  sessionId: string;
  /**
   * The row version (`xmin` as text) the write was planned against: when the row has another
   * version by the time the statement holds its lock, nothing is written (`"stale"`).
   * Undefined: no check (the write depends only on counters, which the statement reads itself).
   */
  expectVersion?: string;
  /** The events in order; strings are made storable in place (`makeStorable`). */
  events: StatementEvent[];
  /** The events' `time`, and `time_updated` when `touch`. */
  now: Date;
  /** Sets `time_updated` to `now` (else it is kept). */
  touch: boolean;
}

/** The session row after a statement wrote it. */
export interface StatementResult {
  /** The row's new version (`xmin` as text). */
  version: string;
  lastSeq: number;
  lastPosition: number;
  messageCount: number;
}

/** JSON keys of the stored proto JSON the statement reads (from the protos, checked at load). */
const KEY = {
  messageUpdated: sql.lit(protoJsonName(SessionEventSchema, "messageUpdated")),
  partUpdated: sql.lit(protoJsonName(SessionEventSchema, "partUpdated")),
  sessionUpdated: sql.lit(protoJsonName(SessionEventSchema, "sessionUpdated")),
  message: sql.lit(protoJsonName(MessageUpdatedSchema, "message")),
  part: sql.lit(protoJsonName(PartUpdatedSchema, "part")),
  session: sql.lit(protoJsonName(SessionUpdatedSchema, "session")),
  timeCreated: sql.lit(protoJsonName(SessionSchema, "timeCreated")),
  timeUpdated: sql.lit(protoJsonName(SessionSchema, "timeUpdated")),
  messageCount: sql.lit(protoJsonName(SessionSchema, "messageCount")),
};
const ROW_CODE: Record<RowChange["kind"], string> = {
  insertMessage: "im",
  updateMessage: "um",
  insertPart: "ip",
  updatePart: "up",
  saveSession: "s",
};

/** Each event's stored proto JSON (without `seq`) as `writeSessionStatement` built it. */
const storedJson = new WeakMap<SessionEvent, string>();

/**
 * The proto JSON of an event written by {@link writeSessionStatement} (what `session_event.data`
 * holds, with its `seq`), without serializing it again: the commit hint that carries the events
 * to other replicas reuses it. Undefined for an event that statement did not write.
 */
export function storedEventJson(event: SessionEvent): string | undefined {
  const json = storedJson.get(event);
  if (json === undefined) return undefined;
  const seq = `"seq":"${event.seq}"`;
  return json === "{}" ? `{${seq}}` : `{${seq},${json.slice(1)}`;
}

/**
 * Carries out a write to one session in ONE statement (a data-modifying CTE; one database round
 * trip in autocommit, so it is also its own transaction): takes the session row lock
 * (`select ... for update`), checks the row version when `expectVersion` is given, appends the
 * events with gap-free seqs after the row's `last_seq`, inserts or updates the messages and parts
 * they carry at the next positions after `last_position`, and updates the session row
 * (`last_seq`, `last_position`, `message_count`, `data` from a `session_updated` event,
 * `time_updated`). Atomic: it writes everything or nothing.
 *
 * Each event's proto JSON is built once, here, without its `seq` (the statement adds it and
 * counts it in `data_bytes`); on success every event's `seq` is set in place.
 *
 * Returns the row's new version and counters; `"stale"` when the version check failed and
 * `"missing"` when the session does not exist (nothing written in either case). Throws the
 * driver's unique-violation error (23505, `message_pkey` / `part_pkey`) on a duplicate id, and
 * whatever else the database throws.
 */
export async function writeSessionStatement(db: Kysely<DB>, statement: SessionStatement): Promise<StatementResult | "stale" | "missing"> {
  let positions = 0;
  let messageDelta = 0;
  const items: string[] = [];
  for (const { event, row } of statement.events) {
    event.seq = 0n; // left out of the JSON: the statement adds it
    const json = JSON.stringify(toJson(SessionEventSchema, makeStorable(event)));
    storedJson.set(event, json);
    let item = `{"k":${JSON.stringify(protoCaseName(SessionEventSchema, event.kind.case ?? ""))},"b":${Buffer.byteLength(json)},"d":${json}`;
    if (row) {
      item += `,"r":"${ROW_CODE[row.kind]}"`;
      if (row.kind === "insertMessage" || row.kind === "updateMessage") {
        const message = event.kind.case === "messageUpdated" ? event.kind.value.message : undefined;
        if (!message?.kind.value) throw new Error(`${row.kind} needs a message_updated event with a message`);
        item += `,"id":${JSON.stringify(message.kind.value.id)},"parent":${JSON.stringify(parentId(message))}`;
        if (row.kind === "insertMessage") {
          item += `,"p":${++positions},"role":${JSON.stringify(message.kind.case)},"hash":${JSON.stringify(row.requestHash ?? null)}`;
          messageDelta += 1;
        }
      } else if (row.kind === "insertPart" || row.kind === "updatePart") {
        const part = event.kind.case === "partUpdated" ? event.kind.value.part : undefined;
        if (!part) throw new Error(`${row.kind} needs a part_updated event with a part`);
        item += `,"id":${JSON.stringify(part.id)}`;
        if (row.kind === "insertPart")
          item += `,"p":${++positions},"mid":${JSON.stringify(part.messageId)},"pk":${JSON.stringify(protoCaseName(PartSchema, part.kind.case ?? ""))}`;
      } else if (event.kind.case !== "sessionUpdated") throw new Error("saveSession needs a session_updated event");
    }
    items.push(`${item}}`);
  }
  const n = statement.events.length;
  const touch = statement.touch ? statement.now : null;
  const data = sql`x.e -> 'd'`;
  // A row's data_bytes: the JSON of the event that carries it (without its seq), a few bytes over the row's own.
  const bytes = sql`(x.e ->> 'b')::int`;
  const result = await sql<{
    version: string | null;
    last_seq: string | number | null;
    last_position: string | number;
    message_count: string | number;
  }>`${sql.raw(PREPARED)}
    with s as (
      select id, last_seq, last_position, message_count, xmin::text as version from session where id = ${statement.sessionId} for update
    ), ok as (
      select * from s where ${statement.expectVersion ?? null}::text is null or version = ${statement.expectVersion ?? null}::text
    ), x as (
      select x.ord, x.e from ok, jsonb_array_elements(${`[${items.join(",")}]`}::jsonb) with ordinality as x(e, ord)
    ), ev as (
      insert into session_event (session_id, seq, kind, data, data_bytes, time)
      select ok.id, ok.last_seq + x.ord, x.e ->> 'k', ${data} || jsonb_build_object('seq', (ok.last_seq + x.ord)::text),
        (x.e ->> 'b')::int + 9 + length((ok.last_seq + x.ord)::text), ${statement.now}::timestamptz
      from ok, x
    ), im as (
      insert into message (id, session_id, position, role, parent_id, data, data_bytes, request_hash)
      select x.e ->> 'id', ok.id, ok.last_position + (x.e ->> 'p')::int, x.e ->> 'role', x.e ->> 'parent',
        ${data} -> ${KEY.messageUpdated} -> ${KEY.message}, ${bytes}, x.e ->> 'hash'
      from ok, x where x.e ->> 'r' = 'im'
    ), um as (
      update message set data = ${data} -> ${KEY.messageUpdated} -> ${KEY.message}, data_bytes = ${bytes}, parent_id = x.e ->> 'parent'
      from x where x.e ->> 'r' = 'um' and message.id = x.e ->> 'id'
    ), ip as (
      insert into part (id, session_id, message_id, position, kind, data, data_bytes)
      select x.e ->> 'id', ok.id, x.e ->> 'mid', ok.last_position + (x.e ->> 'p')::int, x.e ->> 'pk', ${data} -> ${KEY.partUpdated} -> ${KEY.part}, ${bytes}
      from ok, x where x.e ->> 'r' = 'ip'
    ), up as (
      update part set data = ${data} -> ${KEY.partUpdated} -> ${KEY.part}, data_bytes = ${bytes}
      from x where x.e ->> 'r' = 'up' and part.id = x.e ->> 'id'
    ), u as (
      update session set
        last_seq = ok.last_seq + ${n}::int,
        last_position = ok.last_position + ${positions}::int,
        message_count = ok.message_count + ${messageDelta}::int,
        data = coalesce((
          select (${data} -> ${KEY.sessionUpdated} -> ${KEY.session}) - ${KEY.timeCreated}::text - ${KEY.timeUpdated}::text - ${KEY.messageCount}::text
          from x where x.e ->> 'r' = 's' order by x.ord desc limit 1
        ), session.data),
        time_updated = coalesce(${touch}::timestamptz, session.time_updated)
      from ok where session.id = ok.id
      returning session.xmin::text as version, session.last_seq, session.last_position, session.message_count
    )
    select u.version, u.last_seq, u.last_position, u.message_count from s left join u on true`.execute(db);
  const row = result.rows[0];
  if (!row) return "missing";
  if (row.version === null || row.last_seq === null) return "stale";
  const lastSeq = Number(row.last_seq);
  statement.events.forEach(({ event }, i) => (event.seq = BigInt(lastSeq - n + i + 1)));
  return { version: row.version, lastSeq, lastPosition: Number(row.last_position), messageCount: Number(row.message_count) };
}

/** An assistant message's `parent_id` for its column (null when empty, and for user messages). */
function parentId(message: Message): string | null {
  return message.kind.case === "assistant" ? message.kind.value.parentId || null : null;
}
