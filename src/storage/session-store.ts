import { create, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { sql, type Kysely, type Transaction } from "kysely";
import { SessionSchema, type Session } from "../../gen/ledger/v1/session_pb.js";
import { makeStorable, toJsonb } from "./jsonb.js";
import type { DB, SessionRow } from "./schema.js";

/** A session row; its message count is the `message_count` column (kept by the writes, never counted on read). */
export type SessionRowWithCount = SessionRow;

/**
 * A session row and its version: the row's `xmin` (the id of the transaction that wrote this
 * version of the row), as text. Any update of the row changes it, so a write planned against
 * this row can check, in the statement that carries it out, that nothing changed meanwhile.
 */
export interface VersionedSessionRow {
  row: SessionRow;
  version: string;
}

/** Keyset cursor for ListSessions: the last row's `time_updated` and `id`. */
export interface SessionCursor {
  timeUpdated: Date;
  id: string;
}

/**
 * Inserts a new session with `last_seq` = `last_position` = 0. `session.id`, `directory` and
 * `parentId` become columns, and `ownership` (default: none) the `owner`/`tenant` columns; the
 * rest is stored as the proto JSON in `data`. Every string of
 * `session` is made storable in place first (`makeStorable`: NUL and lone surrogates → U+FFFD).
 */
export async function insertSession(db: Kysely<DB>, session: Session, now: Date, ownership: SessionOwnership = NO_OWNER): Promise<void> {
  const data = sessionData(session);
  await db
    .insertInto("session")
    .values({
      id: session.id,
      directory: session.directory,
      parent_id: session.parentId || null,
      // Named only when set: a session without an owner leaves the columns to their default (null).
      ...(ownership.owner !== null ? { owner: ownership.owner, tenant: ownership.tenant } : {}),
      data,
      time_created: now,
      time_updated: now,
    })
    .execute();
}

/**
 * Locks the session row for the rest of `trx` (`select ... for update`) and returns it, or
 * undefined when it does not exist. Every writer of a session's messages, parts and events
 * takes this lock first, which serializes them and makes `seq`/`position` gap-free.
 */
export async function lockSession(trx: Transaction<DB>, id: string): Promise<SessionRowWithCount | undefined> {
  return trx.selectFrom("session").selectAll("session").where("id", "=", id).forUpdate().executeTakeFirst();
}

/** Reads one session row (its message count is a column: cheap at any session size), or undefined. */
export async function getSessionRow(db: Kysely<DB>, id: string): Promise<SessionRow | undefined> {
  return db.selectFrom("session").selectAll("session").where("id", "=", id).executeTakeFirst();
}

/** Reads one session row with its version (`xmin`, see `VersionedSessionRow`), or undefined. */
export async function getVersionedSessionRow(db: Kysely<DB>, id: string): Promise<VersionedSessionRow | undefined> {
  const row = await db
    .selectFrom("session")
    .selectAll("session")
    .select(sql<string>`xmin::text`.as("row_version"))
    .where("id", "=", id)
    .executeTakeFirst();
  if (!row) return undefined;
  const { row_version, ...rest } = row;
  return { row: rest, version: row_version };
}

/** Reads one session row with its message count, or undefined (the same as `getSessionRow` since the count is a column). */
export async function getSessionRowWithCount(db: Kysely<DB>, id: string): Promise<SessionRowWithCount | undefined> {
  return getSessionRow(db, id);
}

/**
 * Lists sessions newest-updated first (ties by id, descending), starting after `cursor`,
 * at most `limit` rows, optionally only those of `directory` and only those `visibleTo` allows
 * (see {@link SessionVisibility}).
 */
export async function listSessionRows(
  db: Kysely<DB>,
  options: { limit: number; cursor?: SessionCursor; directory?: string; visibleTo?: SessionVisibility },
): Promise<SessionRowWithCount[]> {
  let query = db.selectFrom("session").selectAll("session");
  if (options.directory) query = query.where("directory", "=", options.directory);
  const visible = options.visibleTo;
  if (visible) {
    query = visible.tenant === null ? query.where("tenant", "is", null) : query.where("tenant", "=", visible.tenant);
    if (visible.owner !== undefined) query = query.where("owner", "=", visible.owner);
    else query = query.where("owner", "is not", null);
  }
  if (options.cursor) {
    const { timeUpdated, id } = options.cursor;
    query = query.where((eb) =>
      eb.or([eb("time_updated", "<", timeUpdated), eb.and([eb("time_updated", "=", timeUpdated), eb("id", "<", id)])]),
    );
  }
  return query.orderBy("time_updated", "desc").orderBy("id", "desc").limit(options.limit).execute();
}

/**
 * Writes back a locked session: its proto data, counters (`last_seq`, `last_position`, and
 * `message_count` from `session.messageCount`) and `time_updated`. Call only inside the
 * transaction that called `lockSession`. Strings are made storable in place (`makeStorable`).
 */
export async function updateSessionRow(
  trx: Transaction<DB>,
  session: Session,
  counters: { lastSeq: number; lastPosition: number },
  now: Date,
): Promise<void> {
  await trx
    .updateTable("session")
    .set({
      data: sessionData(session),
      last_seq: counters.lastSeq,
      last_position: counters.lastPosition,
      message_count: session.messageCount,
      time_updated: now,
    })
    .where("id", "=", session.id)
    .execute();
}

/**
 * Locks a session and all its descendants (children by `parent_id`, their children, and so on)
 * for the rest of `trx` (`select ... for update`, one level at a time, parents before children)
 * and returns their rows with message counts: the root first, then each level. Empty when the
 * root does not exist. Inserting a child takes a key-share lock on its parent row (the foreign
 * key check), which waits for ours: once a level is locked no new child can appear under it, so
 * the rows returned are exactly those a delete of the root cascades to.
 */
export async function lockSessionTree(trx: Transaction<DB>, rootId: string): Promise<SessionRowWithCount[]> {
  const rows: SessionRowWithCount[] = [];
  const seen = new Set<string>();
  let level = [rootId];
  while (level.length > 0) {
    const locked = await trx.selectFrom("session").selectAll("session").where("id", "in", level).orderBy("id").forUpdate().execute();
    const fresh = locked.filter((r) => !seen.has(r.id));
    for (const row of fresh) seen.add(row.id);
    rows.push(...fresh);
    if (fresh.length === 0) break;
    const children = await trx
      .selectFrom("session")
      .select("id")
      .where(
        "parent_id",
        "in",
        fresh.map((r) => r.id),
      )
      .execute();
    level = children.map((c) => c.id).filter((id) => !seen.has(id));
  }
  return rows;
}

/** Deletes a session; messages, parts, events and child sessions cascade. Returns whether it existed. */
export async function deleteSessionRow(db: Kysely<DB>, id: string): Promise<boolean> {
  const result = await db.deleteFrom("session").where("id", "=", id).executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/** Maps a row to `ledger.v1.Session` (times and message count from columns). */
export function rowToSession(row: SessionRow): Session {
  const session = fromJson(SessionSchema, row.data as JsonObject, { ignoreUnknownFields: true });
  session.id = row.id;
  session.directory = row.directory;
  session.parentId = row.parent_id ?? "";
  session.timeCreated = timestampFromDate(row.time_created);
  session.timeUpdated = timestampFromDate(row.time_updated);
  session.messageCount = Number(row.message_count);
  return session;
}

/** `session` made storable in place, as JSONB text without the fields that live in columns. */
function sessionData(session: Session): string {
  makeStorable(session);
  return toJsonb(SessionSchema, create(SessionSchema, { ...session, timeCreated: undefined, timeUpdated: undefined, messageCount: 0 }));
}

/** Lists the sessions whose parent is `parentId`, newest created first (ties by id, descending). */
export async function listChildSessionRows(db: Kysely<DB>, parentId: string): Promise<SessionRowWithCount[]> {
  return db
    .selectFrom("session")
    .selectAll("session")
    .where("parent_id", "=", parentId)
    .orderBy("time_created", "desc")
    .orderBy("id", "desc")
    .execute();
}

/** Whether a session row with this id exists (a primary-key lookup). */
export async function sessionExists(db: Kysely<DB>, id: string): Promise<boolean> {
  return (await db.selectFrom("session").select("id").where("id", "=", id).executeTakeFirst()) !== undefined;
}

/** The bounds of a session's event log: the highest seq retention removed and the last seq written. */
export interface LogBounds {
  /** `pruned_seq`: the highest seq retention deleted (0: none); a reader behind it lost events. */
  prunedSeq: bigint;
  /** `last_seq`: the seq of the session's latest event (0: none yet). */
  lastSeq: bigint;
}

/** Reads a session's `pruned_seq` and `last_seq`, or undefined when it does not exist. */
export async function getLogBounds(db: Kysely<DB>, id: string): Promise<LogBounds | undefined> {
  const row = await db.selectFrom("session").select(["pruned_seq", "last_seq"]).where("id", "=", id).executeTakeFirst();
  return row ? { prunedSeq: BigInt(row.pruned_seq), lastSeq: BigInt(row.last_seq) } : undefined;
}

/** The `last_seq` of each of the given sessions that exists (in no particular order); a missing one is left out. */
export async function listLastSeqs(db: Kysely<DB>, ids: string[]): Promise<Array<{ id: string; lastSeq: bigint }>> {
  if (ids.length === 0) return [];
  const rows = await db.selectFrom("session").select(["id", "last_seq"]).where("id", "in", ids).execute();
  return rows.map((r) => ({ id: r.id, lastSeq: BigInt(r.last_seq) }));
}

/**
 * Sets a session's `last_seq` (a new session's first events were appended with seqs up to it).
 * Call only in the transaction that inserted the session or holds its row lock. Returns the
 * row's new version (`xmin` as text, see `VersionedSessionRow`), or undefined when the row is missing.
 */
export async function setLastSeq(trx: Transaction<DB>, id: string, lastSeq: number): Promise<string | undefined> {
  const row = await trx
    .updateTable("session")
    .set({ last_seq: lastSeq })
    .where("id", "=", id)
    .returning(sql<string>`xmin::text`.as("row_version"))
    .executeTakeFirst();
  return row?.row_version;
}

/** Who owns a session: the `owner` and `tenant` columns (null: none). */
export interface SessionOwnership {
  owner: string | null;
  tenant: string | null;
}

/** No per-user owner: sessions created without authentication or with the static token. */
export const NO_OWNER: SessionOwnership = Object.freeze({ owner: null, tenant: null });

/**
 * A filter of the sessions a caller may see: those of `tenant` (null: of no tenant) and, when
 * `owner` is given, of that owner only; else of any owner (sessions without an owner excluded).
 */
export interface SessionVisibility {
  tenant: string | null;
  owner?: string;
}

/** The owner and tenant of session `id`, or undefined when it does not exist. One indexed read. */
export async function getSessionOwnership(db: Kysely<DB>, id: string): Promise<SessionOwnership | undefined> {
  return db.selectFrom("session").select(["owner", "tenant"]).where("id", "=", id).executeTakeFirst();
}

/** The owner and tenant of each existing session of `ids`, by id (missing ids are absent). */
export async function listSessionOwnerships(db: Kysely<DB>, ids: string[]): Promise<Map<string, SessionOwnership>> {
  if (ids.length === 0) return new Map();
  const rows = await db.selectFrom("session").select(["id", "owner", "tenant"]).where("id", "in", ids).execute();
  return new Map(rows.map((r) => [r.id, { owner: r.owner, tenant: r.tenant }]));
}
