import { create } from "@bufbuild/protobuf";
import { MessageWithPartsSchema, type MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import type { Kysely } from "kysely";
import { getMessageRow, listMessageRowsWithBytes, rowToMessage } from "../storage/message-store.js";
import { listPartRows, rowToPart } from "../storage/part-store.js";
import type { DB, MessageRow } from "../storage/schema.js";
import { getSessionRow, rowToSession } from "../storage/session-store.js";
import type { LedgerDeps } from "./deps.js";
import { InvalidArgumentError, MessageNotFoundError, SessionNotFoundError } from "../errors.js";
import { decodePageToken, encodePageToken } from "./page-token.js";

/** Default and maximum `page_size` of ListMessages. */
export const MESSAGE_PAGE = { default: 100, max: 1000 } as const;

/**
 * One page of a session's messages with their parts, oldest first (by server position), or
 * newest first with `newestFirst` (OpenCode's `messages({limit})` reads the newest `limit`;
 * here `pageSize` does, and the token pages on to older ones). `pageToken` continues after the
 * previous page; `nextPageToken` is empty on the last page. Tokens carry their direction: an
 * oldest-first token given with `newestFirst` (or the reverse) is refused. A page holds at most
 * `pageSize` messages and `limits.page_bytes` of JSON (bytes of UTF-8, the messages' and parts'
 * JSON as written, uncompressed; at least one message), so a client reads a large session in
 * several pages whatever `pageSize` asks, and no page passes a grpc-js client's default 4 MiB
 * unless one message alone does.
 * Unless `includeReverted`, what lies past the session's revert point is left out: later
 * messages, and the revert message itself, or only its parts from the revert part on.
 * Throws `SessionNotFoundError` (NOT_FOUND) and `InvalidArgumentError` (bad `page_token`).
 */
export async function listMessages(
  deps: LedgerDeps,
  sessionId: string,
  page: { pageSize: number; pageToken: string; includeReverted?: boolean; newestFirst?: boolean },
): Promise<{ messages: MessageWithParts[]; nextPageToken: string }> {
  const session = await getSessionRow(deps.db, sessionId);
  if (!session) throw new SessionNotFoundError(sessionId);
  const limit = Math.min(page.pageSize || MESSAGE_PAGE.default, MESSAGE_PAGE.max);
  const token = page.pageToken ? messageCursor(page.pageToken, page.newestFirst ?? false, sessionId) : undefined;
  const revert = page.includeReverted ? undefined : rowToSession(session).revert;
  const revertRow = revert ? await getMessageRow(deps.db, sessionId, revert.messageId) : undefined;
  const cut =
    revert && revertRow ? { position: Number(revertRow.position), messageId: revert.messageId, partId: revert.partId } : undefined;
  const cutBefore = cut ? cut.position + (cut.partId ? 1 : 0) : undefined;
  const after = page.newestFirst ? undefined : token;
  const before = page.newestFirst && token !== undefined ? Math.min(token, cutBefore ?? Infinity) : cutBefore;
  const rows = await listMessageRowsWithBytes(deps.db, sessionId, {
    afterPosition: after,
    beforePosition: before,
    limit: limit + 1,
    newestFirst: page.newestFirst,
  });
  const pageRows = fitPage(rows.slice(0, limit), deps.config.limits.page_bytes);
  const more = rows.length > pageRows.length;
  const last = pageRows.at(-1);
  const messages = await withParts(deps.db, pageRows);
  if (cut?.partId) {
    for (const message of messages) {
      if (message.message?.kind.value?.id !== cut.messageId) continue;
      const from = message.parts.findIndex((p) => p.id === cut.partId);
      if (from >= 0) message.parts = message.parts.slice(0, from);
    }
  }
  return {
    messages,
    nextPageToken:
      more && last
        ? encodePageToken(page.newestFirst ? { b: Number(last.position), s: sessionId } : { p: Number(last.position), s: sessionId })
        : "",
  };
}

/** One message with its parts. Throws `SessionNotFoundError` or `MessageNotFoundError` (NOT_FOUND). */
export async function getMessage(deps: LedgerDeps, sessionId: string, messageId: string): Promise<MessageWithParts> {
  const row = await getMessageRow(deps.db, sessionId, messageId);
  if (!row) {
    if (!(await getSessionRow(deps.db, sessionId))) throw new SessionNotFoundError(sessionId);
    throw new MessageNotFoundError(messageId);
  }
  const [message] = await withParts(deps.db, [row]);
  return message!;
}

/**
 * Attaches each message's parts (one query per session among the rows: one for a page of a
 * session), keeping position order.
 */
export async function withParts(db: Kysely<DB>, rows: MessageRow[]): Promise<MessageWithParts[]> {
  const byMessage = new Map<string, Part[]>(rows.map((r) => [r.id, []]));
  const bySession = new Map<string, string[]>();
  for (const row of rows) bySession.set(row.session_id, [...(bySession.get(row.session_id) ?? []), row.id]);
  for (const [sessionId, ids] of bySession) {
    for (const row of await listPartRows(db, sessionId, ids)) byMessage.get(row.message_id)?.push(rowToPart(row));
  }
  return rows.map((row) => create(MessageWithPartsSchema, { message: rowToMessage(row), parts: byMessage.get(row.id) }));
}

/**
 * The first of `rows` (each with `bytes`, as `listMessageRowsWithBytes` gives them) whose bytes
 * add up to at most `pageBytes` (bytes of JSON), and always the first row: one page of messages.
 */
export function fitPage<R extends { bytes: number }>(rows: R[], pageBytes: number): R[] {
  let bytes = 0;
  const over = rows.findIndex((row, i) => (bytes += row.bytes) > pageBytes && i > 0);
  return over > 0 ? rows.slice(0, over) : rows;
}

/**
 * The position a ListMessages page token continues from. Oldest-first tokens are `{p: last
 * position, s: session id}`, newest-first ones `{b: last position, s: session id}` (tokens issued
 * before `s` existed are taken without it). Throws `InvalidArgumentError` on `page_token`
 * (INVALID_ARGUMENT) for a token that is not ours, one issued for the other order, or one issued
 * for another session (positions are per session: it would skip this one's first messages).
 */
function messageCursor(token: string, newestFirst: boolean, sessionId: string): number {
  let cursor: Record<string, string | number>;
  try {
    cursor = newestFirst ? decodePageToken("page_token", token, { b: "int" }) : decodePageToken("page_token", token, { p: "int" });
  } catch (error) {
    try {
      if (newestFirst) decodePageToken("page_token", token, { p: "int" });
      else decodePageToken("page_token", token, { b: "int" });
    } catch {
      throw error;
    }
    throw new InvalidArgumentError(
      "page_token",
      `continues a listing with newest_first = ${!newestFirst}; send the same newest_first as the call that returned it, or no page_token to start over`,
    );
  }
  if (cursor.s !== undefined && cursor.s !== sessionId)
    throw new InvalidArgumentError(
      "page_token",
      "continues the listing of another session; send it with the session_id of the call that returned it, or no page_token to start over",
    );
  return Number(newestFirst ? cursor.b : cursor.p);
}
