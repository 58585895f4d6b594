import type { JsonObject } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import type { AssistantMessage, MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import type { SessionService } from "../../gen/ledger/v1/service_pb.js";
import type { DB } from "../../src/storage/schema.js";

/**
 * A compact view of a stored assistant-side part: its kind, and for text/reasoning the text and
 * provider metadata, for tools the call id, tool, state and metadata. Other kinds: the kind only.
 */
export type PartView =
  | { kind: "text" | "reasoning"; text: string; metadata?: JsonObject }
  | { kind: "tool"; callId: string; tool: string; status?: string; metadata?: JsonObject }
  | { kind: string };

/** See {@link PartView}. */
export function partView(part: Part): PartView {
  switch (part.kind.case) {
    case "text":
    case "reasoning":
      return { kind: part.kind.case, text: part.kind.value.text, metadata: part.kind.value.metadata };
    case "tool":
      return {
        kind: "tool",
        callId: part.kind.value.callId,
        tool: part.kind.value.tool,
        status: part.kind.value.state?.status.case,
        metadata: part.kind.value.metadata,
      };
    default:
      return { kind: part.kind.case ?? "" };
  }
}

/** The id of an entry's message (user or assistant); throws when the entry has no message. */
export function idOf(entry: MessageWithParts): string {
  const id = entry.message?.kind.value?.id;
  if (id === undefined) throw new Error("the entry has no message");
  return id;
}

/** The assistant message of an entry, or undefined for a user message. */
export function assistantOf(entry: MessageWithParts | undefined): AssistantMessage | undefined {
  return entry?.message?.kind.case === "assistant" ? entry.message.kind.value : undefined;
}

/** Every message of a session (oldest first), with ids checked to ascend in stored order. */
export async function storedMessages(client: Client<typeof SessionService>, sessionId: string): Promise<MessageWithParts[]> {
  const { messages } = await client.listMessages({ sessionId });
  const ids = messages.map((m) => m.message!.kind.value!.id);
  const parts = messages.flatMap((m) => m.parts.map((p) => p.id));
  if (ids.join() !== [...ids].sort().join() || parts.join() !== [...parts].sort().join())
    throw new Error(`ids do not ascend in stored order: ${ids.join()} / ${parts.join()}`);
  return messages;
}

// Straight from the tables (a test's check of what was written, not what an RPC answers).

/** A `session_event` row: its seq, kind ("part_updated", ...) and the event in its proto JSON form. */
export interface StoredEvent {
  seq: number;
  kind: string;
  data: Record<string, unknown>;
}

/** The session's `session_event` rows in seq order; only those of `kind`, and after `afterSeq`, when given. */
export async function storedEvents(
  db: Kysely<DB>,
  sessionId: string,
  only: { kind?: string; afterSeq?: number } = {},
): Promise<StoredEvent[]> {
  let query = db.selectFrom("session_event").select(["seq", "kind", "data"]).where("session_id", "=", sessionId);
  if (only.kind !== undefined) query = query.where("kind", "=", only.kind);
  if (only.afterSeq !== undefined) query = query.where("seq", ">", only.afterSeq);
  const rows = await query.orderBy("seq").execute();
  return rows.map((row) => ({ seq: Number(row.seq), kind: row.kind, data: row.data }));
}

/** A stored event as `[kind]`, plus the removed message id (message_removed) or message and part ids (part_removed). */
export function removalOf(event: StoredEvent): unknown[] {
  const data = event.data as { messageRemoved?: { messageId: string }; partRemoved?: { messageId: string; partId: string } };
  if (data.messageRemoved) return [event.kind, data.messageRemoved.messageId];
  if (data.partRemoved) return [event.kind, data.partRemoved.messageId, data.partRemoved.partId];
  return [event.kind];
}

/** The session row's `last_seq`: the seq of its latest event. */
export async function lastSeq(db: Kysely<DB>, sessionId: string): Promise<number> {
  const row = await db.selectFrom("session").select("last_seq").where("id", "=", sessionId).executeTakeFirstOrThrow();
  return Number(row.last_seq);
}

/** The session's message and part rows: `[message id, [[part id, kind], ...]]`, both in position order. */
export async function storedRows(db: Kysely<DB>, sessionId: string): Promise<Array<[string, Array<[string, string]>]>> {
  const messages = await db.selectFrom("message").select(["id"]).where("session_id", "=", sessionId).orderBy("position").execute();
  const parts = await db
    .selectFrom("part")
    .select(["id", "message_id", "kind"])
    .where("session_id", "=", sessionId)
    .orderBy("position")
    .execute();
  return messages.map((m) => [m.id, parts.filter((p) => p.message_id === m.id).map((p): [string, string] => [p.id, p.kind])]);
}

/**
 * Every page ListMessages answers for `request`, following `next_page_token` (at most 20 pages),
 * each page as `view` maps its messages (e.g. their ids or first texts).
 */
export async function listPages<T>(
  client: Client<typeof SessionService>,
  request: { sessionId: string; pageSize: number; newestFirst?: boolean; includeReverted?: boolean },
  view: (message: MessageWithParts) => T,
): Promise<T[][]> {
  const out: T[][] = [];
  let pageToken = "";
  do {
    const res = await client.listMessages({ ...request, pageToken });
    out.push(res.messages.map(view));
    pageToken = res.nextPageToken;
  } while (pageToken && out.length < 20);
  return out;
}
