import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { sql, type Kysely, type Transaction } from "kysely";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { toJsonb } from "./jsonb.js";
import { protoCaseName } from "./proto-names.js";
import type { DB, SessionEventRow } from "./schema.js";

/** Event rows have 5 columns; stay under Postgres's 65,535 bind parameters. */
const EVENT_ROWS_PER_INSERT = Math.floor(65535 / 5);

/**
 * Appends events (each with its `seq` already assigned under the session row lock) in one or
 * more multi-row inserts. `(session_id, seq)` is the primary key, so a seq reused by mistake
 * fails the transaction instead of forking the log. Each event's strings are made storable in
 * place (`makeStorable`), so the events published after commit equal the stored ones.
 */
export async function appendEvents(trx: Transaction<DB>, events: SessionEvent[]): Promise<void> {
  for (let i = 0; i < events.length; i += EVENT_ROWS_PER_INSERT) {
    await trx
      .insertInto("session_event")
      .values(
        events.slice(i, i + EVENT_ROWS_PER_INSERT).map((event) => ({
          session_id: event.sessionId,
          seq: Number(event.seq),
          kind: protoCaseName(SessionEventSchema, event.kind.case ?? ""),
          data: toJsonb(SessionEventSchema, event),
          time: event.time ? timestampDate(event.time) : new Date(),
        })),
      )
      .execute();
  }
}

/** Reads a session's events with `seq > afterSeq`, in seq order, at most `limit`. */
export async function listEvents(db: Kysely<DB>, sessionId: string, afterSeq: number, limit = 1000): Promise<SessionEvent[]> {
  const rows = await db
    .selectFrom("session_event")
    .selectAll()
    .where("session_id", "=", sessionId)
    .where("seq", ">", afterSeq)
    .orderBy("seq", "asc")
    .limit(limit)
    .execute();
  return rows.map(rowToEvent);
}

/** Maps an event row to `ledger.v1.SessionEvent`. */
export function rowToEvent(row: SessionEventRow): SessionEvent {
  return fromJson(SessionEventSchema, row.data as JsonObject, { ignoreUnknownFields: true });
}

/**
 * Retention: deletes events older than `cutoff` and raises each affected session's
 * `pruned_seq` to the highest seq deleted, in one statement. Returns the number of events deleted.
 */
export async function pruneEvents(db: Kysely<DB>, cutoff: Date): Promise<number> {
  const result = await sql<{ deleted: string }>`
    with deleted as (
      delete from session_event where time < ${cutoff} returning session_id, seq
    ), per_session as (
      select session_id, max(seq) as max_seq, count(*) as n from deleted group by session_id
    ), bumped as (
      update session set pruned_seq = greatest(session.pruned_seq, per_session.max_seq)
      from per_session where session.id = per_session.session_id
      returning per_session.n
    )
    select coalesce(sum(n), 0)::text as deleted from bumped`.execute(db);
  return Number(result.rows[0]?.deleted ?? 0);
}

/**
 * The last `session_status` event of each session (or only of `sessionId`), in session id order.
 * A session that never ran a loop has none.
 */
export async function lastStatusEvents(db: Kysely<DB>, sessionId?: string): Promise<SessionEvent[]> {
  const filter = sessionId ? sql`and session_id = ${sessionId}` : sql``;
  const rows = await sql<SessionEventRow>`
    select distinct on (session_id) session_id, seq, kind, data, time from session_event
    where kind = 'session_status' ${filter} order by session_id, seq desc`.execute(db);
  return rows.rows.map(rowToEvent);
}
