import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { PromptRequest } from "../../gen/ledger/v1/service_pb.js";
import { PreconditionError, SessionNotFoundError } from "../errors.js";
import { answerEvents, finalAnswer, requireReplier, startAnswer, untilAnswered } from "./answer.js";
import type { LedgerDeps } from "./deps.js";
import { storePrompt, type StorePromptOptions } from "./store-prompt.js";

/**
 * The `Prompt` RPC: stores the prompt (`storePrompt`); with `no_reply` returns the user message,
 * otherwise has the session's agent loop answer it (on this replica or the one running the
 * session) and returns the final assistant message (`finalAnswer`). Without a configured model
 * provider it throws `PreconditionError` (FAILED_PRECONDITION, reason `NO_MODEL_PROVIDER`) whose
 * metadata names the stored `message_id`. `SessionNotFoundError` (NOT_FOUND) when the session is
 * deleted before the answer is complete. `StoppedWaitingError` NOT_STORED when `signal` fires
 * before the prompt is written (nothing stored); `StoppedWaitingError` (RUN_CONTINUES;
 * DEADLINE_EXCEEDED on a client deadline) when it fires after, before the answer: the prompt
 * stays stored and its run goes on.
 * Same errors as `storePrompt` otherwise. `options` go to `storePrompt` (the `Command` RPC adds
 * its `command` event).
 */
export async function prompt(
  deps: LedgerDeps,
  request: PromptRequest,
  signal?: AbortSignal,
  options: StorePromptOptions = {},
): Promise<MessageWithParts> {
  const stored = await storePrompt(deps, request, { ...options, signal });
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
 * assistant message answering it and the `idle` status, or before the first event of the loop's
 * next work when prompts are queued behind it (see `untilAnswered`). A client that goes away (`signal`)
 * stops only its stream, never the run; it re-attaches with `WatchSession(after_seq)`. On a
 * replayed `message_id` it yields the original events and ends if the message was answered.
 * Ends after a `session_deleted` event when the session is deleted before the answer is complete.
 * When `signal` fires (the client's deadline, a cancel) before the answer and the `idle` after
 * it, ends with `StoppedWaitingError` (DEADLINE_EXCEEDED on a deadline, never a success).
 */
export async function* promptStream(deps: LedgerDeps, request: PromptRequest, signal?: AbortSignal): AsyncGenerator<SessionEvent> {
  const stored = await storePrompt(deps, request, { signal });
  // Start the run before the first yield: a client gone by then must not leave it unanswered.
  const answer = request.noReply ? undefined : await startAnswer(deps, stored);
  yield* stored.events;
  if (!answer) return;
  if ("error" in answer) throw answer.error;
  if (answer.ran) yield* untilAnswered(deps, request.sessionId, answer.userId, answer.after, answer.ran, signal);
}

/**
 * The `PromptAsync` RPC: answers with the user message once it is committed (durable); the loop
 * runs in the background (unless `no_reply`). `signal`: the call's (see `StorePromptOptions.signal`).
 * Throws like `storePrompt`, and
 * `NO_MODEL_PROVIDER` when a reply is wanted but no provider is configured (the message stays stored).
 */
export async function promptAsync(deps: LedgerDeps, request: PromptRequest, signal?: AbortSignal): Promise<MessageWithParts> {
  const stored = await storePrompt(deps, request, { signal });
  // A loop that cannot start (no session-lock connection free) is logged by the runner; this
  // call has answered already, and ResumeSession answers the stored prompt later.
  if (!request.noReply)
    void requireReplier(deps, stored)
      .run(request.sessionId)
      .catch(() => {});
  return stored.message;
}
