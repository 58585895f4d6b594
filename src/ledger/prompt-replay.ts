import { create } from "@bufbuild/protobuf";
import type { Kysely } from "kysely";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { MessageWithPartsSchema, type MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { readPromptEvents } from "../storage/event-store.js";
import { getMessageRow, rowToMessage } from "../storage/message-store.js";
import { listPartRows, rowToPart } from "../storage/part-store.js";
import type { DB } from "../storage/schema.js";
import { AlreadyExistsError } from "../errors.js";

/** A stored user message, the events its write appended, and whether it was a replay. */
export interface StoredPrompt {
  message: MessageWithParts;
  /** The events of the write that stored it, in seq order (a replay returns the same list: `readPromptEvents`). */
  events: SessionEvent[];
  /** True when `message_id` was already stored with the same content and nothing was written. */
  replayed: boolean;
}

/**
 * Looks up a prompt by its idempotency key in session `sessionId` (the read is scoped by session:
 * docs/scaling.md). Undefined when `messageId` is new in the session; an id stored in another
 * session then fails the insert (`message_pkey`), which `storePrompt` answers with
 * `AlreadyExistsError` too. Throws `AlreadyExistsError` (ALREADY_EXISTS) when the id is stored
 * in this session with a different request fingerprint. On a match returns the stored message
 * with its parts and every event of its original write, exactly as the original call returned
 * them (`readPromptEvents`: agent/model switches and a revert's removals included, through its
 * `session_updated`).
 */
export async function findStoredPrompt(
  db: Kysely<DB>,
  sessionId: string,
  messageId: string,
  fingerprint: string,
): Promise<StoredPrompt | undefined> {
  const row = await getMessageRow(db, sessionId, messageId);
  if (!row) return undefined;
  if (row.request_hash !== fingerprint) {
    throw new AlreadyExistsError("message_id", messageId, "was already used for a different prompt");
  }
  const parts = (await listPartRows(db, sessionId, [messageId])).map(rowToPart);
  const message = create(MessageWithPartsSchema, { message: rowToMessage(row), parts });
  return { message, events: await readPromptEvents(db, sessionId, messageId), replayed: true };
}
