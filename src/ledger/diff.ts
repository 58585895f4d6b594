import { create } from "@bufbuild/protobuf";
import { FileDiffSchema, type FileDiff, type MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { MessageNotFoundError } from "../errors.js";
import { listMessageRows } from "../storage/message-store.js";
import type { LedgerDeps } from "./deps.js";
import { withParts } from "./messages.js";
import { getSession } from "./sessions.js";

/**
 * The snapshots that bound the steps of a turn (the answers to the user message `userId`) or,
 * without `userId`, of the whole session: the first non-empty `step_start.snapshot` and the last
 * non-empty `step_finish.snapshot` or `snapshot` part (the one a step cut short before its finish
 * records), in position order. Undefined when there are none.
 */
export function snapshotRange(messages: readonly MessageWithParts[], userId?: string): { from: string; to: string } | undefined {
  let from = "";
  let to = "";
  for (const entry of messages) {
    const message = entry.message?.kind;
    if (message?.case !== "assistant" || (userId !== undefined && message.value.parentId !== userId)) continue;
    for (const part of entry.parts) {
      if (part.kind.case === "stepStart" && part.kind.value.snapshot && !from) from = part.kind.value.snapshot;
      if ((part.kind.case === "stepFinish" || part.kind.case === "snapshot") && part.kind.value.snapshot) to = part.kind.value.snapshot;
    }
  }
  return from && to ? { from, to } : undefined;
}

/**
 * The files changed between the bounds of {@link snapshotRange} in `directory`, as `FileDiff`s
 * sorted by path (OpenCode `SessionSummary.computeDiff`). Empty without snapshots.
 */
export async function diffRange(deps: LedgerDeps, directory: string, range: { from: string; to: string } | undefined): Promise<FileDiff[]> {
  if (!range || !deps.snapshots) return [];
  return (await deps.snapshots.diff(directory, range.from, range.to)).map((change) => create(FileDiffSchema, change));
}

/**
 * The `GetDiff` RPC: the files changed by the turn of the user message `messageId` (an
 * assistant message stands for the turn it answers), or, when empty, by the whole session: from
 * the snapshot before the first step to the one after the last, with contents and line counts.
 * A reverted session's diff leaves out what the revert hides (its files were put back); a hidden
 * turn named by `messageId` still shows its own changes.
 * Steps without snapshots (an agent that may not change files, a tree over the snapshot limits)
 * add nothing.
 * @throws SessionNotFoundError (NOT_FOUND), MessageNotFoundError (NOT_FOUND, `message_id`) for a
 *   message not in the session.
 */
export async function getDiff(deps: LedgerDeps, sessionId: string, messageId: string): Promise<FileDiff[]> {
  const session = await getSession(deps, sessionId);
  const messages = await withParts(deps.db, await listMessageRows(deps.db, sessionId, {}));
  if (messageId) {
    const message = messages.find((m) => m.message?.kind.value?.id === messageId)?.message?.kind;
    if (!message) throw new MessageNotFoundError(messageId);
    const userId = message.case === "assistant" ? message.value.parentId : messageId;
    return diffRange(deps, session.directory, snapshotRange(messages, userId));
  }
  return diffRange(deps, session.directory, snapshotRange(visible(messages, session.revert)));
}

/**
 * The messages a reverted session still shows (as `ListMessages` does): those before the revert
 * message, and that message's parts before the revert part when one is set. All of them when the
 * session is not reverted.
 */
function visible(messages: MessageWithParts[], revert: { messageId: string; partId: string } | undefined): MessageWithParts[] {
  if (!revert) return messages;
  const at = messages.findIndex((m) => m.message?.kind.value?.id === revert.messageId);
  if (at < 0) return messages;
  const kept = messages.slice(0, at);
  const cut = messages[at]!;
  if (!revert.partId) return kept;
  // As ListMessages: the message stays with its parts before the revert part (all of them when
  // that part is not found).
  const from = cut.parts.findIndex((p) => p.id === revert.partId);
  return [...kept, from < 0 ? cut : { ...cut, parts: cut.parts.slice(0, from) }];
}
