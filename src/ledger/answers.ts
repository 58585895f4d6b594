import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { getMessageRow, listMessageRows } from "../storage/message-store.js";
import type { LedgerDeps } from "./deps.js";
import { withParts } from "./messages.js";

/**
 * The last assistant message answering `userMessageId` (its `parent_id`), with its parts, or
 * undefined when the loop has not answered it. With several steps, this is the final one.
 */
export async function finalAnswer(
  deps: Pick<LedgerDeps, "db">,
  sessionId: string,
  userMessageId: string,
): Promise<MessageWithParts | undefined> {
  const user = await getMessageRow(deps.db, userMessageId);
  if (!user) return undefined;
  const rows = await listMessageRows(deps.db, sessionId, { afterPosition: Number(user.position) });
  const answers = rows.filter(
    (r) => r.role === "assistant" && (r.data as { assistant?: { parentId?: string } }).assistant?.parentId === userMessageId,
  );
  const last = answers.at(-1);
  return last ? (await withParts(deps.db, [last]))[0] : undefined;
}
