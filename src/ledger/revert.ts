import { create } from "@bufbuild/protobuf";
import type { Session } from "../../gen/ledger/v1/session_pb.js";
import { SessionRevertSchema } from "../../gen/ledger/v1/session_pb.js";
import { MessageNotFoundError, PartNotFoundError } from "../errors.js";
import { deleteMessages, getMessageRow, listMessageRows, rowToMessage, updateMessageRow } from "../storage/message-store.js";
import { deleteParts, getPartRow, listPartRows, rowToPart } from "../storage/part-store.js";
import { checkSessionStillAllowed } from "./access.js";
import type { LedgerDeps } from "./deps.js";
import { getSession } from "./sessions.js";
import { assertIdle } from "./status.js";
import type { SessionWrite } from "./writer.js";
import { writeSession } from "./writer.js";

/**
 * Marks a revert point on the session (OpenCode `SessionRevert.revert`): `messageId` and every
 * later message, or, with `partId`, that message's parts from `partId` on and every later
 * message. Nothing is deleted until the next prompt (`applyRevert`); ListMessages hides them
 * meanwhile. Files changed from there on are put back as they were (`restoreFiles`), and the
 * snapshot to undo that is kept in `revert.snapshot`. Emits `session_updated`.
 * Throws `SessionNotFoundError`, `MessageNotFoundError` (not in the session),
 * `PartNotFoundError` (not in the message), `SessionBusyError` (the loop runs), and
 * `PathNotAllowedError` (PERMISSION_DENIED on `session_id`) for a session outside
 * `session_directories` (it would write files there; `checkSessionStillAllowed`).
 */
export async function revertSession(deps: LedgerDeps, sessionId: string, messageId: string, partId: string): Promise<Session> {
  await checkSessionStillAllowed(deps, await getSession(deps, sessionId));
  await writeSession(deps, sessionId, async (w) => {
    await assertIdle(deps, w.trx, sessionId);
    const message = await getMessageRow(w.trx, sessionId, messageId);
    if (!message) throw new MessageNotFoundError(messageId);
    if (partId) {
      const part = await getPartRow(w.trx, sessionId, partId);
      if (!part || part.message_id !== messageId) throw new PartNotFoundError(partId);
    }
    const snapshot = await restoreFiles(deps, w, messageId, partId);
    w.session.revert = create(SessionRevertSchema, { messageId, partId, snapshot });
    w.emit({ case: "sessionUpdated", value: { session: w.session } });
  });
  return getSession(deps, sessionId);
}

/**
 * Puts back every file changed from the revert point on (OpenCode `SessionRevert.revert`): the
 * `patch` parts of the messages from `messageId` (with `partId`: that message's parts from it)
 * name the files and the snapshot before each step; each file is checked out of the earliest
 * one (deleted when it did not exist then). Returns the snapshot of the files as they were
 * before (Unrevert restores it), or "" when nothing was restored. A session already reverted
 * first gets its files back from its snapshot, and keeps that snapshot.
 */
async function restoreFiles(deps: LedgerDeps, w: SessionWrite, messageId: string, partId: string): Promise<string> {
  const snapshots = deps.snapshots;
  if (!snapshots) return "";
  const rows = await listMessageRows(w.trx, w.session.id, {});
  const at = rows.findIndex((r) => r.id === messageId);
  const parts = (
    await listPartRows(
      w.trx,
      w.session.id,
      rows.slice(at).map((r) => r.id),
    )
  ).map(rowToPart);
  const from = partId ? parts.findIndex((p) => p.id === partId) : 0;
  const patches = parts
    .slice(Math.max(from, 0))
    .flatMap((p) => (p.kind.case === "patch" ? [{ hash: p.kind.value.hash, files: p.kind.value.files }] : []));
  const previous = w.session.revert?.snapshot ?? "";
  if (previous) await snapshots.restore(w.session.directory, previous);
  if (patches.length === 0) return previous;
  const snapshot = previous || ((await snapshots.track(w.session.directory)).hash ?? "");
  await snapshots.revert(w.session.directory, patches);
  return snapshot;
}

/**
 * Clears the session's revert point, first putting the files back as they were before Revert
 * (from `revert.snapshot`); emits `session_updated`. Without a revert point it changes
 * nothing (no event, `time_updated` kept). Throws `SessionNotFoundError` (NOT_FOUND),
 * `SessionBusyError` (FAILED_PRECONDITION, reason SESSION_BUSY), `PathNotAllowedError`
 * (PERMISSION_DENIED on `session_id`) for a session outside `session_directories`.
 */
export async function unrevertSession(deps: LedgerDeps, sessionId: string): Promise<Session> {
  const current = await getSession(deps, sessionId);
  await checkSessionStillAllowed(deps, current);
  if (!current.revert) {
    await assertIdle(deps, deps.db, sessionId);
    return current;
  }
  await writeSession(deps, sessionId, async (w) => {
    await assertIdle(deps, w.trx, sessionId);
    // The files as they were before Revert (OpenCode `SessionRevert.unrevert`: `Snapshot.restore`).
    if (w.session.revert?.snapshot) await deps.snapshots?.restore(w.session.directory, w.session.revert.snapshot);
    w.session.revert = undefined;
    w.emit({ case: "sessionUpdated", value: { session: w.session } });
  });
  return getSession(deps, sessionId);
}

/**
 * Inside a prompt's write: carries out the session's revert point, if any. Removes every
 * message after the revert message, and the revert message itself unless a part was named, in
 * which case that message keeps its parts before that part. Emits `message_removed` (then a
 * `part_removed` per part) for each removed message and `part_removed` for each removed part of
 * the kept message, then clears the mark. A revert message or part deleted since is ignored
 * (the message, or all its parts, stay).
 *
 * A kept user message that lost assistant messages this way (the revert point sat inside its
 * answer, or on one of its own parts) is marked `no_reply` (`message_updated`): what is left of
 * its answer ends there, and the loop, which answers the earliest unanswered user message, must
 * not take that turn up again before the new prompt (its answer cut after a step that called
 * tools, or with no step left, would otherwise count as unanswered). Its `summary` keeps its
 * title and loses its `body` and `diffs`, which told of the removed steps (GetDiff gives the
 * turn's diff from what is left). OpenCode's loop answers only
 * the last user message, so there too the cut turn stays as it is.
 */
export async function applyRevert(w: SessionWrite): Promise<void> {
  const revert = w.session.revert;
  if (!revert) return;
  w.session.revert = undefined;
  const rows = await listMessageRows(w.trx, w.session.id, {});
  const at = rows.findIndex((r) => r.id === revert.messageId);
  if (at < 0) return;
  const removeMessages = rows.slice(revert.partId ? at + 1 : at).map((r) => r.id);
  let removeParts: string[] = [];
  if (revert.partId) {
    const parts = await listPartRows(w.trx, w.session.id, [revert.messageId]);
    const from = parts.findIndex((p) => p.id === revert.partId);
    if (from >= 0) removeParts = parts.slice(from).map((p) => p.id);
  }
  for (const part of await deleteParts(w.trx, w.session.id, removeParts))
    w.emit({ case: "partRemoved", value: { messageId: part.message_id, partId: part.id } });
  const removed = await deleteMessages(w.trx, w.session.id, removeMessages);
  for (const messageId of removed.messages) {
    w.emit({ case: "messageRemoved", value: { messageId } });
    for (const part of removed.parts)
      if (part.message_id === messageId) w.emit({ case: "partRemoved", value: { messageId, partId: part.id } });
  }
  w.session.messageCount -= removed.messages.length;
  const gone = new Set(removed.messages);
  const cut = new Set(rows.flatMap((r) => (gone.has(r.id) && r.parent_id ? [r.parent_id] : [])));
  for (const row of rows) {
    if (gone.has(row.id) || !cut.has(row.id)) continue;
    const message = rowToMessage(row);
    if (message.kind.case !== "user" || message.kind.value.noReply) continue;
    message.kind.value.noReply = true;
    // Its summary spoke of the removed steps: the final answer and the files they changed.
    if (message.kind.value.summary) {
      message.kind.value.summary.body = "";
      message.kind.value.summary.diffs = [];
    }
    await updateMessageRow(w.trx, message);
    w.emit({ case: "messageUpdated", value: { message } });
  }
}

/**
 * Inside a DeleteMessage/DeletePart write, before the row goes: keeps the session's revert point
 * meaningful when it sits on what is being deleted, so the same later rows stay hidden and the
 * next prompt still removes them. A deleted revert message moves the point to the next message
 * (whole); a deleted revert part moves it to the next part of that message, else to the next
 * message; with no next message the point is cleared (nothing is left past it). Emits
 * `session_updated` when the point moves. Anything else leaves the point as it is.
 *
 * @param deleting - the message being deleted, or (`partId`) one part of it.
 */
export async function moveRevertPoint(w: SessionWrite, deleting: { messageId: string; partId?: string }): Promise<void> {
  const revert = w.session.revert;
  if (!revert || revert.messageId !== deleting.messageId) return;
  if (deleting.partId !== undefined) {
    if (revert.partId !== deleting.partId) return;
    const parts = await listPartRows(w.trx, w.session.id, [revert.messageId]);
    const next = parts[parts.findIndex((p) => p.id === deleting.partId) + 1];
    if (next) {
      w.session.revert = create(SessionRevertSchema, { messageId: revert.messageId, partId: next.id });
      w.emit({ case: "sessionUpdated", value: { session: w.session } });
      return;
    }
  }
  const row = await getMessageRow(w.trx, w.session.id, revert.messageId);
  const [next] = row ? await listMessageRows(w.trx, w.session.id, { afterPosition: Number(row.position), limit: 1 }) : [];
  w.session.revert = next ? create(SessionRevertSchema, { messageId: next.id, partId: "" }) : undefined;
  w.emit({ case: "sessionUpdated", value: { session: w.session } });
}
