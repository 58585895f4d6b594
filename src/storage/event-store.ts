import { create, fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { sql, type Kysely, type Transaction } from "kysely";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { toJsonb } from "./jsonb.js";
import { protoCaseName } from "./proto-names.js";
import type { DB, SessionEventRow } from "./schema.js";

/** Event rows have 6 columns; stay under Postgres's 65,535 bind parameters. */
const EVENT_ROWS_PER_INSERT = Math.floor(65535 / 6);

/**
 * Appends events (each with its `seq` already assigned under the session row lock) in one or
 * more multi-row inserts, each with the byte length of its JSON text (`data_bytes`, which sizes
 * replay pages). `(session_id, seq)` is the primary key, so a seq reused by mistake fails the
 * transaction instead of forking the log. Each event's strings are made storable in place
 * (`makeStorable`), so the events published after commit equal the stored ones.
 */
export async function appendEvents(trx: Transaction<DB>, events: SessionEvent[]): Promise<void> {
  for (let i = 0; i < events.length; i += EVENT_ROWS_PER_INSERT) {
    await trx
      .insertInto("session_event")
      .values(
        events.slice(i, i + EVENT_ROWS_PER_INSERT).map((event) => {
          const data = toJsonb(SessionEventSchema, event);
          return {
            session_id: event.sessionId,
            seq: Number(event.seq),
            kind: protoCaseName(SessionEventSchema, event.kind.case ?? ""),
            data,
            data_bytes: Buffer.byteLength(data),
            time: event.time ? timestampDate(event.time) : new Date(),
          };
        }),
      )
      .execute();
  }
}

/** How much one page of events may hold. */
export interface PageLimits {
  /** At most this many events (> 0). */
  rows: number;
  /** No further event once those read reach this many bytes of JSON text (UTF-8). */
  bytes: number;
}

/** One page of a session's log. */
export interface EventPage {
  /** Events in `seq` order. */
  events: SessionEvent[];
  /** The stored size of each event (bytes of JSON text, same order as `events`). */
  sizes: number[];
  /** The page stopped at a limit: more events may follow its last one. False: the log ended. */
  more: boolean;
}

/**
 * Reads one page of a session's events with `seq > afterSeq`, in seq order: at most
 * `limits.rows` events, and no further event once the JSON text of those read reaches
 * `limits.bytes`; the first event comes whatever its size. A page thus holds less than
 * `limits.bytes` plus one event, sized in SQL from `data_bytes` without reading the rows'
 * data. Events stored before `data_bytes` existed count their stored size when it is
 * uncompressed, and a whole page when compressed (TOAST compression can hide a 100× larger
 * text), so such an event is read alone. `known`: events the caller already holds, by seq (a
 * stored event never changes): their rows come without their data, and the page holds these
 * objects; sizes and limits are as without it. Throws what the database throws.
 *
 * ```ts
 * for (let after = 0, more = true; more; ) {
 *   const page = await readEventPage(db, sessionId, after, { rows: 500, bytes: 1 << 20 });
 *   // ... use page.events ...
 *   after = Number(page.events.at(-1)?.seq ?? after);
 *   more = page.more;
 * }
 * ```
 */
export async function readEventPage(
  db: Kysely<DB>,
  sessionId: string,
  afterSeq: number,
  limits: PageLimits,
  known: ReadonlyMap<bigint, SessionEvent> = NONE_KNOWN,
): Promise<EventPage> {
  const result = await sql<PageRow>`${pageQuery(sessionId, afterSeq, limits, known)}`.execute(db);
  const sizes = result.rows.map((row) => Number(row.bytes));
  const bytes = sizes.reduce((sum, size) => sum + size, 0);
  return {
    events: result.rows.map((row) => pageEvent(row, known)),
    sizes,
    more: result.rows.length === limits.rows || bytes >= limits.bytes,
  };
}

const NONE_KNOWN: ReadonlyMap<bigint, SessionEvent> = new Map();

/** A row of `pageQuery`: `data` is null for the seqs the caller already holds. */
interface PageRow {
  seq: string | number;
  data: SessionEventRow["data"] | null;
  bytes: number;
}

/** The event of a page row: decoded from its data, or the caller's copy when the row came without it. */
function pageEvent(row: PageRow, known: ReadonlyMap<bigint, SessionEvent>): SessionEvent {
  if (row.data !== null) return rowToEvent({ data: row.data });
  const event = known.get(BigInt(row.seq));
  if (!event) throw new Error(`session_event ${row.seq} came without its data, and the caller does not hold it`);
  return event;
}

/** A page of a session's log and the log's bounds, read in one statement. */
export interface BoundedEventPage extends EventPage {
  /** `pruned_seq` and `last_seq` of the session as of the same read. */
  bounds: { prunedSeq: bigint; lastSeq: bigint };
}

/**
 * `readEventPage` and the session's log bounds (`pruned_seq`, `last_seq`) in ONE statement (one
 * round trip: what a `WatchSession` needs before it follows the log), `known` as there. Undefined
 * when the session does not exist.
 */
export async function readEventPageWithBounds(
  db: Kysely<DB>,
  sessionId: string,
  afterSeq: number,
  limits: PageLimits,
  known: ReadonlyMap<bigint, SessionEvent> = NONE_KNOWN,
): Promise<BoundedEventPage | undefined> {
  const result = await sql<{
    pruned_seq: string | number;
    last_seq: string | number;
    seq: string | number | null;
    data: SessionEventRow["data"] | null;
    bytes: number | null;
  }>`
    select s.pruned_seq, s.last_seq, page.seq, page.data, page.bytes
    from session as s left join lateral (${pageQuery(sessionId, afterSeq, limits, known)}) as page on true
    where s.id = ${sessionId}
    order by page.seq`.execute(db);
  const first = result.rows[0];
  if (!first) return undefined;
  // No event row: the left join's one row of nulls.
  const rows = result.rows.filter((row): row is typeof row & PageRow => row.seq !== null);
  const sizes = rows.map((row) => Number(row.bytes));
  const bytes = sizes.reduce((sum, size) => sum + size, 0);
  return {
    events: rows.map((row) => pageEvent(row, known)),
    sizes,
    more: rows.length === limits.rows || bytes >= limits.bytes,
    bounds: { prunedSeq: BigInt(first.pruned_seq), lastSeq: BigInt(first.last_seq) },
  };
}

/**
 * The page query of `readEventPage`: rows `seq`, `data` and `bytes`, in seq order; `data` is
 * null for the seqs in `known` (Postgres then never reads, detoasts or sends their data).
 */
function pageQuery(sessionId: string, afterSeq: number, limits: PageLimits, known: ReadonlyMap<bigint, SessionEvent>) {
  const skipped = known.size > 0 ? sql`seq in (${sql.join([...known.keys()].map(Number))})` : sql`false`;
  // Neither pg_column_compression nor pg_column_size reads a TOASTed value; coalesce evaluates them only for old rows.
  const size = sql`coalesce(data_bytes, case when pg_column_compression(data) is null then pg_column_size(data) else ${limits.bytes}::int end)`;
  // The page ends at the last row whose predecessors (within the next `rows`) hold less than `bytes`.
  return sql`
    with ahead as (
      select seq, sum(${size}) over (order by seq rows unbounded preceding) - ${size} as before
      from (select seq, data, data_bytes from session_event where session_id = ${sessionId} and seq > ${afterSeq} order by seq limit ${limits.rows}) as next
    )
    select seq, case when ${skipped} then null else data end as data, ${size} as bytes from session_event
    where session_id = ${sessionId} and seq > ${afterSeq} and seq <= (select max(seq) from ahead where before < ${limits.bytes})
    order by seq`;
}

/** Maps an event row to `ledger.v1.SessionEvent`: the one decoder of the `session_event.data` column. */
export function rowToEvent(row: Pick<SessionEventRow, "data">): SessionEvent {
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

/** The kinds a prompt's write emits before its `message_updated`, in this order: switches, then a revert's removals. */
const BEFORE_PROMPT = {
  agent: protoCaseName(SessionEventSchema, "agentSwitched"),
  model: protoCaseName(SessionEventSchema, "modelSwitched"),
  removals: [protoCaseName(SessionEventSchema, "messageRemoved"), protoCaseName(SessionEventSchema, "partRemoved")],
};
const SESSION_UPDATED = protoCaseName(SessionEventSchema, "sessionUpdated");

/**
 * The events of the write that stored the user message `messageId` (a prompt), in seq order,
 * exactly as that write appended them: its `agent_switched` and `model_switched`, the
 * `message_removed`/`part_removed` of the revert it carried out, its `message_updated` …
 * `prompted` (parts, `session_error`, `synthetic`, `command`), and the `session_updated` that
 * ends it. Empty when the `message_updated` or `prompted` is missing (e.g. removed by retention).
 *
 * The write's events are told apart by what every write stores: one commit time (`time`, the
 * same for all its events) and a fixed order. The `message_updated` and `prompted` are found by
 * JSON containment (the stored JSON is made from the proto, so it follows a rename of any
 * field); before the `message_updated`, the contiguous events of the same `time` that a prompt
 * writes there (removals, preceded by at most a `model_switched`, preceded by at most an
 * `agent_switched`, which only prompts emit); after the `prompted`, the `session_updated` of
 * the same `time`. Two queries. The one case it cannot tell apart: a DeleteMessage/DeletePart
 * committed in the same millisecond just before a prompt without switches, whose removals
 * would be counted as the prompt's.
 */
export async function readPromptEvents(db: Kysely<DB>, sessionId: string, messageId: string): Promise<SessionEvent[]> {
  const stored = create(SessionEventSchema, {
    kind: { case: "messageUpdated", value: { message: { kind: { case: "user", value: { id: messageId } } } } },
  });
  const prompted = create(SessionEventSchema, { kind: { case: "prompted", value: { messageId } } });
  const seqOf = (event: SessionEvent) =>
    sql<number>`(select min(seq) from session_event where session_id = ${sessionId}
      and kind = ${protoCaseName(SessionEventSchema, event.kind.case ?? "")}
      and data @> ${JSON.stringify(toJson(SessionEventSchema, event))}::jsonb)`;
  const candidates = [BEFORE_PROMPT.agent, BEFORE_PROMPT.model, ...BEFORE_PROMPT.removals];
  // The write starts after the last event before its message_updated that it cannot have emitted.
  const rows = await sql<{ seq: string | number; kind: string; data: SessionEventRow["data"]; same_time: boolean; at: string }>`
    with m as (select seq, time from session_event where session_id = ${sessionId} and seq = ${seqOf(stored)}),
    p as (select ${seqOf(prompted)} as seq),
    b as (
      select coalesce(max(e.seq), 0) as seq from session_event e, m
      where e.session_id = ${sessionId} and e.seq < m.seq and (e.time <> m.time or e.kind not in (${sql.join(candidates)}))
    )
    select e.seq, e.kind, e.data, e.time = m.time as same_time, case when e.seq < m.seq then 'before' when e.seq > p.seq then 'after' else 'in' end as at
    from session_event e, m, p, b
    where e.session_id = ${sessionId} and e.seq > b.seq and e.seq <= p.seq + 1 and p.seq >= m.seq
    order by e.seq`.execute(db);
  const before = rows.rows.filter((row) => row.at === "before");
  // Walking back from the message_updated: removals, then at most a model switch, then at most an agent switch.
  let start = before.length;
  while (start > 0 && BEFORE_PROMPT.removals.includes(before[start - 1]!.kind)) start--;
  if (start > 0 && before[start - 1]!.kind === BEFORE_PROMPT.model) start--;
  if (start > 0 && before[start - 1]!.kind === BEFORE_PROMPT.agent) start--;
  const after = rows.rows.filter((row) => row.at === "after" && row.kind === SESSION_UPDATED && row.same_time);
  return [...before.slice(start), ...rows.rows.filter((row) => row.at === "in"), ...after].map(rowToEvent);
}
