import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { PreconditionError, SessionNotFoundError } from "../errors.js";
import { getLastPromptId } from "../storage/message-store.js";
import { listPartRows, rowToPart } from "../storage/part-store.js";
import { getSessionRow, rowToSession, sessionExists } from "../storage/session-store.js";
import { checkSessionStillAllowed } from "./access.js";
import { finalAnswer, requireReplier, untilAnswered } from "./answer.js";
import type { LedgerDeps } from "./deps.js";
import { rejectPendingPermissions } from "./permissions.js";
import { SHELL_USER_TEXT } from "./shell-text.js";

/**
 * The `ResumeSession` RPC: reruns the loop for the session's last user message (not
 * `no_reply`) whose answer was interrupted (crash, shutdown), aborted, or never started, and
 * streams the run like `promptStream` (from the session's current seq). Throws
 * `SessionNotFoundError`, `PreconditionError` (FAILED_PRECONDITION) NOTHING_TO_RESUME when that
 * message is answered or is a `Shell` call's (whose turn asks the model nothing, even when the
 * command was aborted or interrupted), SESSION_REVERTED while the session has a revert point (`Revert`),
 * NO_MODEL_PROVIDER like `prompt`, and `PathNotAllowedError` (PERMISSION_DENIED, field
 * `session_id`) for a session outside `session_directories`, and `PreconditionError` SESSION_DIRECTORY_MISSING
 * (FAILED_PRECONDITION) when its directory no longer exists (`checkSessionStillAllowed`).
 */
export async function* resumeSession(deps: LedgerDeps, sessionId: string, signal?: AbortSignal): AsyncGenerator<SessionEvent> {
  const row = await getSessionRow(deps.db, sessionId);
  if (!row) throw new SessionNotFoundError(sessionId);
  await checkSessionStillAllowed(deps, { id: row.id, directory: row.directory });
  const revert = rowToSession(row).revert;
  if (revert) {
    // Resuming would answer a prompt the client has rolled back; the next Prompt applies the
    // revert first (OpenCode `SessionRevert.cleanup`), Unrevert restores the conversation.
    throw new PreconditionError(
      "SESSION_REVERTED",
      `session ${sessionId} has a revert point at message ${revert.messageId}; send a new prompt (which applies it) or Unrevert before ResumeSession`,
      {
        session_id: sessionId,
        message_id: revert.messageId,
      },
    );
  }
  const userId = await getLastPromptId(deps.db, sessionId);
  if (!userId) throw new PreconditionError("NOTHING_TO_RESUME", `session ${sessionId} has no prompt to answer`, { session_id: sessionId });
  // A Shell's turn (aborted or interrupted ones included) asks the model nothing: resuming it
  // would have the model answer "The following tool was executed by the user".
  const turn = await promptKind(deps, sessionId, userId);
  if (turn === "shell") {
    throw new PreconditionError(
      "NOTHING_TO_RESUME",
      `the last turn of session ${sessionId} is a Shell command (message ${userId}), which has no answer to resume; send a new prompt`,
      { session_id: sessionId, message_id: userId },
    );
  }
  // Nothing to answer: its parts were deleted, or a Shell was interrupted before its part was stored.
  if (turn === "empty") {
    throw new PreconditionError(
      "NOTHING_TO_RESUME",
      `the last prompt of session ${sessionId} (message ${userId}) has no parts, so there is nothing to answer; send a new prompt`,
      { session_id: sessionId, message_id: userId },
    );
  }
  const answer = (await finalAnswer(deps, sessionId, userId))?.message?.kind;
  const last = answer?.case === "assistant" ? answer.value : undefined;
  const resumable =
    !last ||
    !last.time?.completed ||
    last.error?.kind.case === "interrupted" ||
    last.error?.kind.case === "aborted" ||
    last.finish === "tool-calls";
  if (!resumable)
    throw new PreconditionError("NOTHING_TO_RESUME", `the last prompt (${userId}) of session ${sessionId} is already answered`, {
      session_id: sessionId,
      message_id: userId,
    });
  const replier = requireReplier(deps, { id: userId, sessionId });
  // An answer left open by a process that stopped is first closed as `interrupted` by the run
  // (recovery): that close-out is not the answer the client resumes for (a trial, 2026-12-04:
  // the stream ended OK with it, and the rerun went on unseen).
  const stale = last && !last.time?.completed ? last.id : undefined;
  yield* untilAnswered(deps, sessionId, userId, BigInt(row.last_seq), replier.run(sessionId, { resume: userId }), signal, { stale });
}

/**
 * What user message `userId` is: "shell" for a `Shell` call's (its one part is the synthetic
 * {@link SHELL_USER_TEXT}), "empty" when it has no part, "prompt" otherwise.
 */
async function promptKind(deps: Pick<LedgerDeps, "db">, sessionId: string, userId: string): Promise<"shell" | "empty" | "prompt"> {
  const parts = (await listPartRows(deps.db, sessionId, [userId])).map(rowToPart);
  if (parts.length === 0) return "empty";
  const only = parts.length === 1 ? parts[0]!.kind : undefined;
  return only?.case === "text" && only.value.synthetic && only.value.text === SHELL_USER_TEXT ? "shell" : "prompt";
}

/**
 * The `Abort` RPC: cancels the session's running loop (or Shell), then rejects the session's
 * pending permission requests ("the session was aborted"; OpenCode rejects them on cancel), so
 * none is left pending even when the loop runs on another replica. False when no loop ran.
 * Throws `SessionNotFoundError`.
 */
export async function abortSession(deps: LedgerDeps, sessionId: string): Promise<boolean> {
  if (!(await sessionExists(deps.db, sessionId))) throw new SessionNotFoundError(sessionId);
  const aborted = (await deps.replier?.abort(sessionId)) ?? false;
  await rejectPendingPermissions(deps, sessionId, "the session was aborted");
  return aborted;
}
