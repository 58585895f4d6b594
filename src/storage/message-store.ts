import { create, fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import { sql, type Kysely, type SelectQueryBuilder, type Transaction } from "kysely";
import { AssistantMessageSchema, AssistantTimeSchema, MessageSchema, type Message } from "../../gen/ledger/v1/message_pb.js";
import { toJsonb } from "./jsonb.js";
import type { RemovedPart } from "./part-store.js";
import { protoJsonName } from "./proto-names.js";
import type { DB, MessageRow } from "./schema.js";

/** A message to insert, with its server-assigned position. */
export interface NewMessage {
  message: Message;
  position: number;
  /** Hash of the prompt request that made a user message (idempotency check), else undefined. */
  requestHash?: string;
}

/**
 * Inserts one message row; its strings are made storable in place first (`makeStorable`), so
 * `entry.message` is what was stored. An assistant message's `parent_id` also goes to its column
 * (`getLastAnswerRow` reads it). Throws the driver's unique-violation error (23505,
 * `message_pkey`) on a duplicate id.
 */
export async function insertMessage(trx: Transaction<DB>, entry: NewMessage): Promise<void> {
  const { id, sessionId } = messageIds(entry.message);
  const data = toJsonb(MessageSchema, entry.message);
  await trx
    .insertInto("message")
    .values({
      id,
      session_id: sessionId,
      position: entry.position,
      role: entry.message.kind.case ?? "user",
      parent_id: parentId(entry.message),
      data,
      data_bytes: Buffer.byteLength(data),
      request_hash: entry.requestHash ?? null,
    })
    .execute();
}

/**
 * Replaces a stored message's data and `parent_id` (the position never changes); strings made
 * storable in place. Scoped by the message's own `session_id` (docs/scaling.md): a message of
 * another session is left alone.
 */
export async function updateMessageRow(trx: Transaction<DB>, message: Message): Promise<void> {
  const { id, sessionId } = messageIds(message);
  const data = toJsonb(MessageSchema, message);
  await trx
    .updateTable("message")
    .set({ data, data_bytes: Buffer.byteLength(data), parent_id: parentId(message) })
    .where("id", "=", id)
    .where("session_id", "=", sessionId)
    .execute();
}

/**
 * Reads message `id` of session `sessionId`, or undefined when there is none or it belongs to
 * another session (scoped by session: docs/scaling.md).
 */
export async function getMessageRow(db: Kysely<DB>, sessionId: string, id: string): Promise<MessageRow | undefined> {
  return db.selectFrom("message").selectAll().where("id", "=", id).where("session_id", "=", sessionId).executeTakeFirst();
}

/**
 * One page of `listMessageRows` (same options), each row with `bytes`: the UTF-8 bytes of the
 * message's JSON and of its parts' JSON as written (`data_bytes`), computed in the same
 * statement, so a caller can cut the page by size before reading any part. Cheap: no row's data
 * is read, except those stored before `data_bytes` existed, whose JSON text is measured
 * (`octet_length(data::text)`). Not the stored size (`pg_column_size`), which compression makes
 * up to about 90 times smaller than what a client receives for repetitive text.
 */
export async function listMessageRowsWithBytes(
  db: Kysely<DB>,
  sessionId: string,
  options: MessagePage,
): Promise<Array<MessageRow & { bytes: number }>> {
  const query = db
    .selectFrom("message")
    .selectAll("message")
    .select((eb) =>
      eb
        .selectFrom("part")
        .select(
          sql<string>`coalesce(sum(coalesce(part.data_bytes, octet_length(part.data::text))), 0) + coalesce(message.data_bytes, octet_length(message.data::text))`.as(
            "bytes",
          ),
        )
        .whereRef("part.message_id", "=", "message.id")
        .where("part.session_id", "=", sessionId)
        .as("bytes"),
    );
  const rows = await inPage(query, sessionId, options).execute();
  return rows.map((row) => ({ ...row, bytes: Number(row.bytes ?? 0) }));
}

/**
 * Lists a session's message rows in position order (descending with `newestFirst`), strictly
 * between `afterPosition` and `beforePosition` when given, at most `limit` rows. Served by the
 * `(session_id, position)` key, so the newest rows of a long session cost no more than the oldest.
 */
export async function listMessageRows(db: Kysely<DB>, sessionId: string, options: MessagePage): Promise<MessageRow[]> {
  return inPage(db.selectFrom("message").selectAll("message"), sessionId, options).execute();
}

/** Which of a session's messages a listing reads: positions strictly between the bounds, in order, at most `limit`. */
type MessagePage = { afterPosition?: number; beforePosition?: number; limit?: number; newestFirst?: boolean };

/** `query` on session `sessionId`'s messages, narrowed and ordered to `page`. */
function inPage<O>(
  query: SelectQueryBuilder<DB, "message", O>,
  sessionId: string,
  page: MessagePage,
): SelectQueryBuilder<DB, "message", O> {
  let q = query.where("message.session_id", "=", sessionId);
  if (page.afterPosition !== undefined) q = q.where("message.position", ">", page.afterPosition);
  if (page.beforePosition !== undefined) q = q.where("message.position", "<", page.beforePosition);
  q = q.orderBy("message.position", page.newestFirst ? "desc" : "asc");
  return page.limit === undefined ? q : q.limit(page.limit);
}

/**
 * The last (highest position) assistant message of `sessionId` answering `userMessageId` (its
 * `parent_id`) and stored after it, or undefined when there is none or the user message does not
 * exist. With several steps, this is the final one. One query, served by
 * `message_parent_id_position_idx` (read backwards from the newest answer) and the primary key:
 *
 * ```sql
 * select answer.* from message as answer join message as prompt on prompt.id = answer.parent_id
 * where answer.parent_id = $1 and answer.session_id = $2 and answer.role = 'assistant'
 *   and answer.position > prompt.position
 * order by answer.position desc limit 1
 * ```
 */
export async function getLastAnswerRow(db: Kysely<DB>, sessionId: string, userMessageId: string): Promise<MessageRow | undefined> {
  return db
    .selectFrom("message as answer")
    .innerJoin("message as prompt", "prompt.id", "answer.parent_id")
    .selectAll("answer")
    .where("answer.parent_id", "=", userMessageId)
    .where("answer.session_id", "=", sessionId)
    .where("answer.role", "=", "assistant")
    .whereRef("answer.position", ">", "prompt.position")
    .orderBy("answer.position", "desc")
    .limit(1)
    .executeTakeFirst();
}

/**
 * The id of the session's last user message that asks for an answer (`no_reply` not set, and not
 * a compaction: one holding a `compaction` part, answered by its summary), or undefined.
 */
export async function getLastPromptId(db: Kysely<DB>, sessionId: string): Promise<string | undefined> {
  const row = await db
    .selectFrom("message")
    .select("id")
    .where("session_id", "=", sessionId)
    .where("role", "=", "user")
    .where(sql<boolean>`not (data @> ${NO_REPLY_JSON}::jsonb)`)
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom("part")
            .select("part.id")
            .whereRef("part.session_id", "=", "message.session_id")
            .whereRef("part.message_id", "=", "message.id")
            .where("part.kind", "=", "compaction"),
        ),
      ),
    )
    .orderBy("position", "desc")
    .limit(1)
    .executeTakeFirst();
  return row?.id;
}

/** The sessions (each once) that hold an assistant message without `time.completed` (an answer left open). */
export async function listSessionsWithOpenAnswers(db: Kysely<DB>): Promise<string[]> {
  const rows = await db.selectFrom("message").select("session_id").distinct().where("role", "=", "assistant").where(OPEN_ANSWER).execute();
  return rows.map((r) => r.session_id);
}

/**
 * The number of sessions, other than `exceptSessionId`, with a running answer (an assistant
 * message without `time.completed`) owned by `owner` in `tenant` (`owner` undefined: every
 * session of `tenant`; `tenant` null: sessions without a tenant). Read from the database, so it
 * counts the loops of every replica (docs/security.md, "Quotas": `concurrent_loops`); served by
 * `message_open_answer_idx`.
 */
export async function countOpenAnswerSessions(
  db: Kysely<DB>,
  scope: { tenant: string | null; owner?: string },
  exceptSessionId: string,
): Promise<number> {
  const { owner, tenant } = scope;
  const row = await db
    .selectFrom("message")
    .innerJoin("session", "session.id", "message.session_id")
    .select(sql<number>`count(distinct message.session_id)::integer`.as("n"))
    // Literals, not parameters: the partial index's predicate must be provable from the query.
    .where("message.role", "=", sql.lit("assistant"))
    .where(openAnswer("message.data"))
    .where("message.session_id", "<>", exceptSessionId)
    .where((eb) => (tenant === null ? eb("session.tenant", "is", null) : eb("session.tenant", "=", tenant)))
    .$if(owner !== undefined, (q) => q.where("session.owner", "=", owner!))
    .executeTakeFirstOrThrow();
  return row.n;
}

/**
 * The bytes stored in the sessions of `scope` (of `tenant`, or of no tenant when null; of `owner`
 * when given): the messages' and parts' JSON as Postgres stores it (`pg_column_size`, after
 * compression). One aggregate over the scope's rows (joined through `session_owner_idx`).
 */
export async function sumStoredBytes(db: Kysely<DB>, scope: { tenant: string | null; owner?: string }): Promise<number> {
  const { owner, tenant } = scope;
  const sessions = db
    .selectFrom("session")
    .select("session.id")
    .where((eb) => (tenant === null ? eb("session.tenant", "is", null) : eb("session.tenant", "=", tenant)))
    .$if(owner !== undefined, (q) => q.where("session.owner", "=", owner!));
  const row = await db
    .selectNoFrom((eb) => [
      eb
        .selectFrom("message")
        .select(sql<string>`coalesce(sum(pg_column_size(message.data)), 0)::bigint`.as("b"))
        .where("message.session_id", "in", sessions)
        .as("messages"),
      eb
        .selectFrom("part")
        .select(sql<string>`coalesce(sum(pg_column_size(part.data)), 0)::bigint`.as("b"))
        .where("part.session_id", "in", sessions)
        .as("parts"),
    ])
    .executeTakeFirstOrThrow();
  return Number(row.messages ?? 0) + Number(row.parts ?? 0);
}

/** A session's assistant message rows without `time.completed`, in position order. */
export async function listOpenAnswerRows(db: Kysely<DB>, sessionId: string): Promise<MessageRow[]> {
  return db
    .selectFrom("message")
    .selectAll()
    .where("session_id", "=", sessionId)
    .where("role", "=", "assistant")
    .where(OPEN_ANSWER)
    .orderBy("position")
    .execute();
}

/**
 * Deletes the given messages of session `sessionId` and their parts (ids of other sessions are
 * left alone: scoped by session, docs/scaling.md); returns the removed messages' ids and the
 * removed parts (each in position order) so the caller can emit `message_removed`/`part_removed`.
 */
export async function deleteMessages(
  trx: Transaction<DB>,
  sessionId: string,
  messageIds: string[],
): Promise<{ messages: string[]; parts: RemovedPart[] }> {
  if (messageIds.length === 0) return { messages: [], parts: [] };
  const parts = await trx
    .deleteFrom("part")
    .where("session_id", "=", sessionId)
    .where("message_id", "in", messageIds)
    .returning(["id", "message_id", "position"])
    .execute();
  const messages = await trx
    .deleteFrom("message")
    .where("session_id", "=", sessionId)
    .where("id", "in", messageIds)
    .returning(["id", "position"])
    .execute();
  return {
    messages: messages.sort((a, b) => Number(a.position) - Number(b.position)).map((m) => m.id),
    parts: parts.sort((a, b) => Number(a.position) - Number(b.position)).map(({ id, message_id }) => ({ id, message_id })),
  };
}

/** Maps a message row to `ledger.v1.Message`: the one decoder of the `message.data` column. */
export function rowToMessage(row: Pick<MessageRow, "data">): Message {
  return fromJson(MessageSchema, row.data as JsonObject, { ignoreUnknownFields: true });
}

/** The id and session id of either message kind. */
export function messageIds(message: Message): { id: string; sessionId: string } {
  const inner = message.kind.value;
  if (!inner) throw new Error("message has no kind");
  return { id: inner.id, sessionId: inner.sessionId };
}

/** An assistant message's `parent_id` for its column (null when empty, and for user messages). */
function parentId(message: Message): string | null {
  return message.kind.case === "assistant" ? message.kind.value.parentId || null : null;
}

/** `data` of a user message with `no_reply` set contains this: the proto JSON of `{user: {no_reply: true}}`. */
const NO_REPLY_JSON = JSON.stringify(toJson(MessageSchema, create(MessageSchema, { kind: { case: "user", value: { noReply: true } } })));

/** An assistant message whose stored `assistant.time` has no `completed` (keys from the proto, checked at load). */
const OPEN_ANSWER = openAnswer("data");

/** {@link OPEN_ANSWER} on the `data` column named `column` (e.g. `message.data` in a join). */
function openAnswer(column: string) {
  return sql<boolean>`not (${sql.ref(column)} -> ${sql.lit(protoJsonName(MessageSchema, "assistant"))} -> ${sql.lit(protoJsonName(AssistantMessageSchema, "time"))} ? ${sql.lit(protoJsonName(AssistantTimeSchema, "completed"))})`;
}
