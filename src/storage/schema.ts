import type { ColumnType, Insertable, Selectable } from "kysely";

/** A JSONB column: written as a JSON string, read back parsed. */
export type Json<T = Record<string, unknown>> = ColumnType<T, string, string>;
/** A bigint column (read as a string by `pg`, a number by PGlite; we write numbers). */
export type BigIntColumn = ColumnType<string | number, number, number>;
/** A bigint counter that defaults to 0 on insert. */
export type CounterColumn = ColumnType<string | number, number | undefined, number>;

/**
 * `session`: one row per session. `last_seq` is the seq of the session's latest event and
 * `last_position` the latest message/part position; both only grow and are bumped inside the
 * transaction that holds the row lock (`select ... for update`), so they are gap-free.
 */
export interface SessionTable {
  id: string;
  directory: string;
  parent_id: string | null;
  /** The proto JSON form of `ledger.v1.Session` (without times and counts). */
  data: Json;
  last_seq: CounterColumn;
  last_position: CounterColumn;
  /** Highest event seq removed by retention (0: none); readers behind it must reload. */
  pruned_seq: CounterColumn;
  /**
   * How many messages the session holds; changed only by the statement that inserts or deletes
   * them, under the row lock (so no `count(*)` of the session's messages is ever needed).
   */
  message_count: CounterColumn;
  /** The subject (JWT `sub`) of the principal that created the session (or its parent's/source's); null: no per-user identity. */
  owner: ColumnType<string | null, string | null | undefined, never>;
  /** That principal's tenant; null: none. */
  tenant: ColumnType<string | null, string | null | undefined, never>;
  time_created: ColumnType<Date, Date | undefined, never>;
  time_updated: ColumnType<Date, Date | undefined, Date>;
}

/** `message`: one row per user or assistant message, ordered by `position` within a session. */
export interface MessageTable {
  id: string;
  session_id: string;
  position: BigIntColumn;
  /** "user" or "assistant". */
  role: string;
  /** An assistant message's `parent_id` (the user message it answers); null for user messages. */
  parent_id: string | null;
  /** The proto JSON form of `ledger.v1.Message`. */
  data: Json;
  /** sha256 of the canonical prompt request that created a user message (idempotency key check). */
  request_hash: string | null;
  /**
   * UTF-8 byte length of `data`'s JSON text as written (ListMessages pages are sized by it; a
   * one-statement write counts the JSON of the event that carried it, a few bytes more); null for
   * rows stored before it existed.
   */
  data_bytes: ColumnType<number | null, number | undefined, number | undefined>;
  time_created: ColumnType<Date, Date | undefined, never>;
}

/** `part`: one row per part, ordered by `position` within the session (and so within its message). */
export interface PartTable {
  id: string;
  session_id: string;
  message_id: string;
  position: BigIntColumn;
  /** The `Part.kind` case: "text", "file", "tool", ... */
  kind: string;
  /** The proto JSON form of `ledger.v1.Part`. */
  data: Json;
  /**
   * UTF-8 byte length of `data`'s JSON text as written (ListMessages pages are sized by it; a
   * one-statement write counts the JSON of the event that carried it, a few bytes more); null for
   * rows stored before it existed.
   */
  data_bytes: ColumnType<number | null, number | undefined, number | undefined>;
}

/** `session_event`: the per-session event log; `(session_id, seq)` is gap-free. */
export interface SessionEventTable {
  session_id: string;
  seq: BigIntColumn;
  /** The `SessionEvent.kind` case: "message_updated", "part_updated", ... */
  kind: string;
  /** The proto JSON form of `ledger.v1.SessionEvent`. */
  data: Json;
  /**
   * UTF-8 byte length of `data`'s JSON text as written (replay pages are sized by it); null
   * for events stored before it existed.
   */
  data_bytes: ColumnType<number | null, number | undefined, never>;
  time: ColumnType<Date, Date | undefined, never>;
}

/** `permission_request`: a tool call paused by an `ask` rule; `reply` is null while it is pending. */
export interface PermissionRequestTable {
  id: string;
  session_id: string;
  /** The proto JSON form of `ledger.v1.PermissionRequest`. */
  data: Json;
  /** "once", "always" or "reject"; null while pending. */
  reply: string | null;
  /** The feedback given with the reply (REJECT), or why the server rejected it. */
  reply_message: string | null;
  time_created: ColumnType<Date, Date | undefined, never>;
  time_replied: ColumnType<Date | null, Date | undefined, Date>;
}

/**
 * `session_todo`: a session's todo list, one row per session that has one (removed with the
 * session: `on delete cascade`). Replaced whole by each `todowrite`.
 */
export interface SessionTodoTable {
  session_id: string;
  /** The list as a JSON array of `ledger.v1.Todo` in proto JSON form, in the model's order. */
  data: Json<unknown[]>;
  time_updated: ColumnType<Date, Date | undefined, Date>;
}

/**
 * `quota_usage`: prompts counted against one quota key (`p:<tenant>/<sub>`, `t:<tenant>`) in the
 * fixed window starting at `window_start` (docs/security.md, "Quotas"); rows of ended windows are
 * deleted by `countPrompt`.
 */
export interface QuotaUsageTable {
  key: string;
  window_start: ColumnType<Date, Date | string, Date | string>;
  count: number;
}

/** The database as Kysely sees it. */
export interface DB {
  quota_usage: QuotaUsageTable;
  permission_request: PermissionRequestTable;
  session: SessionTable;
  message: MessageTable;
  part: PartTable;
  session_event: SessionEventTable;
  session_todo: SessionTodoTable;
}

/** A `session` row as read (`bigint` counters as string on Postgres, number on PGlite). */
export type SessionRow = Selectable<SessionTable>;
/** A `session` row to insert (counters default to 0, times to now). */
export type NewSessionRow = Insertable<SessionTable>;
/** A `message` row as read. */
export type MessageRow = Selectable<MessageTable>;
/** A `message` row to insert. */
export type NewMessageRow = Insertable<MessageTable>;
/** A `part` row as read. */
export type PartRow = Selectable<PartTable>;
/** A `part` row to insert. */
export type NewPartRow = Insertable<PartTable>;
/** A `session_event` row as read (`data_bytes` null for events stored before it existed). */
export type SessionEventRow = Selectable<SessionEventTable>;
/** A `session_event` row to insert. */
export type NewSessionEventRow = Insertable<SessionEventTable>;
/** A `permission_request` row as read (`reply` null while pending). */
export type PermissionRequestRow = Selectable<PermissionRequestTable>;
/** A `session_todo` row as read. */
export type SessionTodoRow = Selectable<SessionTodoTable>;
