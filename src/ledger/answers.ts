import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { getLastAnswerRow } from "../storage/message-store.js";
import type { LedgerDeps } from "./deps.js";
import { withParts } from "./messages.js";

/**
 * The answer to a prompt: the last assistant message answering `userMessageId` (its
 * `parent_id`), with its parts, or undefined when the loop has not answered it. With several
 * steps, this is the final one. One indexed query (`getLastAnswerRow`) plus its parts.
 */
export async function finalAnswer(
  deps: Pick<LedgerDeps, "db">,
  sessionId: string,
  userMessageId: string,
): Promise<MessageWithParts | undefined> {
  const row = await getLastAnswerRow(deps.db, sessionId, userMessageId);
  return row ? (await withParts(deps.db, [row]))[0] : undefined;
}
