import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { PromptRequest } from "../../gen/ledger/v1/service_pb.js";
import { PreconditionError, SessionNotFoundError, StoppedWaitingError } from "../errors.js";
import { followSession } from "../events/feed.js";
import { getLastPromptId } from "../storage/message-store.js";
import { getSessionRow, rowToSession, sessionExists } from "../storage/session-store.js";
import { finalAnswer } from "./answers.js";
import type { LedgerDeps, Replier } from "./deps.js";
import { storePrompt, type StoredPrompt, type StorePromptOptions } from "./prompt.js";

/**
 * The `Prompt` RPC: stores the prompt; with `no_reply` returns the user message, otherwise has
 * the session's agent loop answer it (on this replica or the one running the session) and
 * returns the final assistant message. Without a configured model provider it throws
 * `PreconditionError` (FAILED_PRECONDITION, reason `NO_MODEL_PROVIDER`) whose metadata names the
 * stored `message_id`. `SessionNotFoundError` (NOT_FOUND) when the session is deleted before
 * the answer is complete. `StoppedWaitingError` (RUN_CONTINUES; DEADLINE_EXCEEDED on a client
 * deadline) when `signal` fires first: the prompt stays stored and its run goes on.
 * Same errors as `storePrompt` otherwise.
 */
export async function prompt(
  deps: LedgerDeps,
  request: PromptRequest,
  signal?: AbortSignal,
  options: StorePromptOptions = {},
): Promise<MessageWithParts> {
  const stored = await storePrompt(deps, request, options);
  if (request.noReply) return stored.message;
  for await (const event of answerEvents(deps, stored, signal)) {
    // Wait for the answer; the events themselves go to PromptStream/WatchSession readers.
    if (event.kind.case === "sessionDeleted") throw new SessionNotFoundError(request.sessionId);
  }
  const userId = stored.message.message!.kind.value!.id;
  const answer = await finalAnswer(deps, request.sessionId, userId);
  if (!answer)
    throw new PreconditionError("NOT_ANSWERED", `the agent loop stopped before answering message ${userId}`, { message_id: userId });
  return answer;
}

/**
 * The `PromptStream` RPC: stores the prompt and yields the events of its transaction (the user
 * message and each part, with their `seq`) first, then every event of the run as it happens
 * (`session_status`, `message_updated`, `part_updated`, `part_delta`...), ending after the final
 * assistant message answering it and the `idle` status. A client that goes away (`signal`)
 * stops only its stream, never the run; it re-attaches with `WatchSession(after_seq)`. On a
 * replayed `message_id` it yields the original events and ends if the message was answered.
 * Ends after a `session_deleted` event when the session is deleted before the answer is complete.
 * When `signal` fires (the client's deadline, a cancel) before the answer and the `idle` after
 * it, ends with `StoppedWaitingError` (DEADLINE_EXCEEDED on a deadline, never a success).
 */
export async function* promptStream(deps: LedgerDeps, request: PromptRequest, signal?: AbortSignal): AsyncGenerator<SessionEvent> {
  const stored = await storePrompt(deps, request);
  // Start the run before the first yield: a client gone by then must not leave it unanswered.
  const answer = request.noReply ? undefined : await startAnswer(deps, stored);
  yield* stored.events;
  if (!answer) return;
  if ("error" in answer) throw answer.error;
  if (answer.ran) yield* untilAnswered(deps, request.sessionId, answer.userId, answer.after, answer.ran, signal);
}

/**
 * The `PromptAsync` RPC: answers with the user message once it is committed (durable); the loop
 * runs in the background (unless `no_reply`). Throws like `storePrompt`, and
 * `NO_MODEL_PROVIDER` when a reply is wanted but no provider is configured (the message stays stored).
 */
export async function promptAsync(deps: LedgerDeps, request: PromptRequest): Promise<MessageWithParts> {
  const stored = await storePrompt(deps, request);
  if (!request.noReply) void requireReplier(deps, stored).run(request.sessionId);
  return stored.message;
}

/**
 * The `ResumeSession` RPC: reruns the loop for the session's last user message (not
 * `no_reply`) whose answer was interrupted (crash, shutdown), aborted, or never started, and
 * streams the run like `promptStream` (from the session's current seq). Throws
 * `SessionNotFoundError`, `PreconditionError` (FAILED_PRECONDITION) NOTHING_TO_RESUME when that
 * message is answered, SESSION_REVERTED while the session has a revert point (`Revert`), and
 * NO_MODEL_PROVIDER like `prompt`.
 */
export async function* resumeSession(deps: LedgerDeps, sessionId: string, signal?: AbortSignal): AsyncGenerator<SessionEvent> {
  const row = await getSessionRow(deps.db, sessionId);
  if (!row) throw new SessionNotFoundError(sessionId);
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
  yield* untilAnswered(deps, sessionId, userId, BigInt(row.last_seq), replier.run(sessionId, { resume: userId }), signal);
}

/** The `Abort` RPC: cancels the session's running loop; false when none ran. Throws `SessionNotFoundError`. */
export async function abortSession(deps: LedgerDeps, sessionId: string): Promise<boolean> {
  if (!(await sessionExists(deps.db, sessionId))) throw new SessionNotFoundError(sessionId);
  return (await deps.replier?.abort(sessionId)) ?? false;
}

/**
 * Starts (or joins) the loop for a stored prompt and yields the session's events after it until
 * the final answer to it and the next `idle`. Ends at once for a replayed, already answered prompt.
 */
async function* answerEvents(deps: LedgerDeps, stored: StoredPrompt, signal?: AbortSignal): AsyncGenerator<SessionEvent> {
  const answer = await startAnswer(deps, stored);
  if ("error" in answer) throw answer.error;
  if (answer.ran)
    yield* untilAnswered(deps, stored.message.message!.kind.value!.sessionId, answer.userId, answer.after, answer.ran, signal);
}

/**
 * Starts (or joins) the loop for a stored prompt. `ran` is undefined for a replayed prompt that
 * is already answered; `error` is NO_MODEL_PROVIDER when nothing can answer.
 */
async function startAnswer(
  deps: LedgerDeps,
  stored: StoredPrompt,
): Promise<{ userId: string; after: bigint; ran?: Promise<void> } | { error: PreconditionError }> {
  const user = stored.message.message!.kind.value!;
  let replier: Replier;
  try {
    replier = requireReplier(deps, stored);
  } catch (error) {
    return { error: error as PreconditionError };
  }
  const after = stored.events.at(-1)?.seq ?? 0n;
  if (stored.replayed && (await finalAnswer(deps, user.sessionId, user.id))) return { userId: user.id, after };
  return { userId: user.id, after, ran: replier.run(user.sessionId) };
}

/**
 * Follows the session from `after` until the final answer to `userId` and the next `idle`.
 * `ran` resolves when this process's loop run ended: if the message is still unanswered then
 * (e.g. aborted before its first step), nothing will answer it and this throws
 * `PreconditionError` NOT_ANSWERED. When `signal` fires first (deadline, client gone), throws
 * `StoppedWaitingError` (RUN_CONTINUES) naming the message and the last seq yielded: the run goes on.
 */
async function* untilAnswered(
  deps: LedgerDeps,
  sessionId: string,
  userId: string,
  after: bigint,
  ran: Promise<void>,
  signal?: AbortSignal,
): AsyncGenerator<SessionEvent> {
  const stop = new AbortController();
  let answered = false;
  let grace: NodeJS.Timeout | undefined;
  void ran
    .then(async () => {
      await new Promise((resolve) => (grace = setTimeout(resolve, RUN_END_GRACE_MS)));
      if (!answered && !(await finalAnswer(deps, sessionId, userId))) stop.abort();
    })
    .catch(() => stop.abort());
  const feedSignal = signal ? AbortSignal.any([signal, stop.signal]) : stop.signal;
  let last = after;
  try {
    for await (const event of followSession(deps, sessionId, after, feedSignal)) {
      yield event;
      last = event.seq;
      if (isFinalAnswer(event, userId)) answered = true;
      if (answered && event.kind.case === "sessionStatus" && event.kind.value.status.case === "idle") return;
    }
  } finally {
    clearTimeout(grace);
  }
  if (signal?.aborted) throw runContinues(sessionId, userId, last, signal.reason);
  if (!answered && stop.signal.aborted) {
    throw new PreconditionError("NOT_ANSWERED", `the agent loop stopped before answering message ${userId}`, { message_id: userId });
  }
}

/** The call stopped waiting for the answer to `userId` (`reason`: the signal's reason); the run goes on. */
function runContinues(sessionId: string, userId: string, lastSeq: bigint, reason: unknown): StoppedWaitingError {
  return new StoppedWaitingError(
    "RUN_CONTINUES",
    `the call ended before message ${userId} was answered (its deadline passed or it was cancelled); the prompt is stored and its run goes on: follow it with WatchSession(session_id=${sessionId}, after_seq=${lastSeq}) or read the answer later with ListMessages`,
    { message_id: userId, session_id: sessionId, after_seq: String(lastSeq) },
    { cause: reason },
  );
}

/** After this process's run ends, how long (ms) its last events get to reach a reader. */
const RUN_END_GRACE_MS = 200;

/** True for the `message_updated` of a completed assistant message that ends the answer to `userId`. */
export function isFinalAnswer(event: SessionEvent, userId: string): boolean {
  if (event.kind.case !== "messageUpdated") return false;
  const message = event.kind.value.message?.kind;
  if (message?.case !== "assistant" || message.value.parentId !== userId || !message.value.time?.completed) return false;
  return message.value.error !== undefined || message.value.finish !== "tool-calls";
}

function requireReplier(deps: LedgerDeps, stored: StoredPrompt | { id: string; sessionId: string }): Replier {
  if (deps.replier?.available) return deps.replier;
  const user = "message" in stored ? stored.message.message?.kind.value : stored;
  throw new PreconditionError(
    "NO_MODEL_PROVIDER",
    `no_reply: the message ${user?.id} was stored, but no model provider is configured to answer it; add a provider to ledger.json or send no_reply`,
    { message_id: user?.id ?? "", session_id: user?.sessionId ?? "" },
  );
}
