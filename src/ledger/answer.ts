import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import type { AssistantMessage, MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { LockPoolExhaustedError, PreconditionError, ShuttingDownError, StoppedWaitingError, WatcherTooSlowError } from "../errors.js";
import { bufferCaps, followSession } from "../events/feed.js";
import type { BufferCaps } from "../events/subscription.js";
import { getLastAnswerRow } from "../storage/message-store.js";
import type { LedgerDeps, Replier } from "./deps.js";
import { withParts } from "./messages.js";
import type { StoredPrompt } from "./prompt-replay.js";

/**
 * The answer to a prompt so far: the last assistant message answering `userMessageId` (its
 * `parent_id`), with its parts, or undefined when the loop has not started answering it. With
 * several steps, this is the latest one, which may still be running or may be followed by more
 * ({@link endsAnswer} says whether it is the final one). One indexed query (`getLastAnswerRow`)
 * plus its parts.
 */
export async function finalAnswer(
  deps: Pick<LedgerDeps, "db">,
  sessionId: string,
  userMessageId: string,
): Promise<MessageWithParts | undefined> {
  const row = await getLastAnswerRow(deps.db, sessionId, userMessageId);
  return row ? (await withParts(deps.db, [row]))[0] : undefined;
}

/**
 * Whether assistant message `answer` ends the answer to its prompt: it is completed, and failed
 * or finished for a reason other than `tool-calls` (a `tool-calls` step is followed by another).
 */
export function endsAnswer(answer: AssistantMessage | undefined): boolean {
  return answer?.time?.completed !== undefined && (answer.error !== undefined || answer.finish !== "tool-calls");
}

/** Whether the prompt `userMessageId` has its final answer stored ({@link finalAnswer}, {@link endsAnswer}). */
export async function isAnswered(deps: Pick<LedgerDeps, "db">, sessionId: string, userMessageId: string): Promise<boolean> {
  const answer = (await finalAnswer(deps, sessionId, userMessageId))?.message?.kind;
  return answer?.case === "assistant" && endsAnswer(answer.value);
}

/**
 * True for the first event of the loop's work on another prompt after the answer to `userId`:
 * the `message_updated` of an assistant message answering another user message (the first step
 * of a prompt queued behind it). A compaction the turn set off (its summary, `summary` set) is
 * still this prompt's work, as is the summary written on its user message.
 */
function beginsOtherWork(event: SessionEvent, userId: string): boolean {
  if (event.kind.case !== "messageUpdated") return false;
  const message = event.kind.value.message?.kind;
  return message?.case === "assistant" && message.value.parentId !== userId && !message.value.summary;
}

/**
 * Whether `event` closes the answer `stale` as `interrupted`: the close-out of an answer whose
 * process stopped, not a final answer. The same answer finished by a live loop (a resume that
 * joined a running loop) is final.
 */
function closesStale(event: SessionEvent, stale: string | undefined): boolean {
  if (stale === undefined || event.kind.case !== "messageUpdated") return false;
  const message = event.kind.value.message?.kind;
  return message?.case === "assistant" && message.value.id === stale && message.value.error?.kind.case === "interrupted";
}

/** True for the `message_updated` of a completed assistant message that ends the answer to `userId`. */
export function isFinalAnswer(event: SessionEvent, userId: string): boolean {
  if (event.kind.case !== "messageUpdated") return false;
  const message = event.kind.value.message?.kind;
  return message?.case === "assistant" && message.value.parentId === userId && endsAnswer(message.value);
}

/**
 * Starts (or joins) the loop for a stored prompt and yields the session's events after it until
 * the final answer to it and the next `idle`, to a reader in this process (the unary `Prompt`
 * waiting for its answer), which takes each event as it comes: no buffer cap applies (a burst is
 * at most one write). Ends at once for a replayed, already answered prompt. Throws like
 * `startAnswer` and `untilAnswered`.
 */
export async function* answerEvents(deps: LedgerDeps, stored: StoredPrompt, signal?: AbortSignal): AsyncGenerator<SessionEvent> {
  const answer = await startAnswer(deps, stored);
  if ("error" in answer) throw answer.error;
  const sessionId = stored.message.message!.kind.value!.sessionId;
  if (answer.ran) yield* untilAnswered(deps, sessionId, answer.userId, answer.after, answer.ran, signal, { caps: UNCAPPED });
}

/** No buffer cap: for readers in this process that never stall. */
const UNCAPPED: BufferCaps = { events: Infinity, bytes: Infinity };

/**
 * Starts (or joins) the loop for a stored prompt. `after` is the seq of the prompt's last event;
 * `ran` is undefined for a replayed prompt whose final answer is stored (one still being
 * answered joins its run, so a retry waits for the same answer as the original); `error` is
 * NO_MODEL_PROVIDER when nothing can answer.
 */
export async function startAnswer(
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
  if (stored.replayed && (await isAnswered(deps, user.sessionId, user.id))) return { userId: user.id, after };
  return { userId: user.id, after, ran: replier.run(user.sessionId) };
}

/**
 * Follows the session from `after` until the final answer to `userId` and the next `idle`, or,
 * when the loop goes on to answer a prompt queued behind it, until the first event of that answer
 * (not yielded): the caller waits for its own answer (and a compaction it set off), not for the
 * prompts queued after it.
 * `ran` resolves when this process's loop run ended: if the message is still unanswered then
 * (e.g. aborted before its first step), nothing will answer it and this throws
 * `PreconditionError` NOT_ANSWERED. When `signal` fires first (deadline, client gone), throws
 * `StoppedWaitingError` (RUN_CONTINUES) naming the message and the last seq yielded: the run goes on.
 * When the run could not start (every session-lock connection taken, or the server is shutting
 * down), throws its `LockPoolExhaustedError` (RESOURCE_EXHAUSTED) or `ShuttingDownError`
 * (UNAVAILABLE DRAINING), metadata `message_id`: the prompt stays stored.
 * `stale` names an answer left open when the call began: its close-out as `interrupted` (the
 * open answer of a process that stopped, which the resumed run first closes) is not the final
 * answer; its normal end (a live loop finishing it) is (ResumeSession).
 * When the caller reads too slowly (`caps`, default `limits.watch_buffer_events`/`watch_buffer_bytes`), throws
 * `WatcherTooSlowError` (RESOURCE_EXHAUSTED, metadata `last_seq` and `message_id`): the run goes
 * on too, and `WatchSession(after_seq = last_seq)` follows it from there.
 */
export async function* untilAnswered(
  deps: LedgerDeps,
  sessionId: string,
  userId: string,
  after: bigint,
  ran: Promise<void>,
  signal?: AbortSignal,
  { caps = bufferCaps(deps.config.limits), stale }: { caps?: BufferCaps; stale?: string } = {},
): AsyncGenerator<SessionEvent> {
  const stop = new AbortController();
  let answered = false;
  let grace: NodeJS.Timeout | undefined;
  /** Why the run could not start (no session-lock connection free, the server shutting down): told to the caller as is. */
  let notStarted: LockPoolExhaustedError | ShuttingDownError | undefined;
  void ran
    .then(async () => {
      await new Promise((resolve) => (grace = setTimeout(resolve, RUN_END_GRACE_MS)));
      if (!answered && !(await isAnswered(deps, sessionId, userId))) stop.abort();
    })
    .catch((error: unknown) => {
      if (error instanceof LockPoolExhaustedError || error instanceof ShuttingDownError) notStarted = error;
      stop.abort();
    });
  const feedSignal = signal ? AbortSignal.any([signal, stop.signal]) : stop.signal;
  let last = after;
  try {
    for await (const event of followSession(deps, sessionId, after, feedSignal, { caps })) {
      if (answered && beginsOtherWork(event, userId)) return;
      yield event;
      // A live part_delta carries the seq of the snapshot it extends: never a cursor of its own.
      if (event.kind.case !== "partDelta" && event.seq > last) last = event.seq;
      if (isFinalAnswer(event, userId) && !closesStale(event, stale)) answered = true;
      if (answered && event.kind.case === "sessionStatus" && event.kind.value.status.case === "idle") return;
    }
  } catch (error) {
    if (error instanceof WatcherTooSlowError) error.metadata.message_id = userId;
    throw error;
  } finally {
    clearTimeout(grace);
  }
  if (signal?.aborted) throw runContinues(sessionId, userId, last, signal.reason);
  if (!answered && stop.signal.aborted) {
    if (notStarted) {
      // The run's error is shared by every prompt waiting on it: each gets its own, naming its message.
      const own =
        notStarted instanceof LockPoolExhaustedError
          ? new LockPoolExhaustedError(sessionId, notStarted.max)
          : new ShuttingDownError(sessionId);
      own.metadata.message_id = userId;
      throw own;
    }
    throw new PreconditionError("NOT_ANSWERED", `the agent loop stopped before answering message ${userId}`, { message_id: userId });
  }
}

/**
 * The replier that answers `stored` (a stored prompt, or the id and session of a user message
 * ResumeSession would answer). Throws `PreconditionError` (FAILED_PRECONDITION, reason
 * NO_MODEL_PROVIDER, naming the message; for a stored prompt, on field `no_reply`, saying it was
 * stored) when no model provider is configured.
 */
export function requireReplier(deps: LedgerDeps, stored: StoredPrompt | { id: string; sessionId: string }): Replier {
  if (deps.replier?.available) return deps.replier;
  if (!("message" in stored)) {
    // ResumeSession: nothing was stored by this call, and it has no no_reply to send.
    throw new PreconditionError(
      "NO_MODEL_PROVIDER",
      `no model provider is configured to answer message ${stored.id}; add a provider to ledger.json`,
      { message_id: stored.id, session_id: stored.sessionId },
    );
  }
  const user = stored.message.message?.kind.value;
  throw new PreconditionError(
    "NO_MODEL_PROVIDER",
    `no_reply: the message ${user?.id} was stored, but no model provider is configured to answer it; add a provider to ledger.json or send no_reply`,
    { message_id: user?.id ?? "", session_id: user?.sessionId ?? "" },
  );
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

/**
 * Whether the work `untilDone` waits for has begun. `enter()` is called by the work once it holds
 * the session's lock (after the lock's recovery, which may close a stopped process's open answer),
 * before it stores anything of its own: it throws `StoppedWaitingError` NOT_STORED when `signal`
 * already fired (the call's deadline passed while the work waited to start), so a call that ended
 * before its work began runs nothing, stores nothing of its own and is never told "it goes on".
 */
export interface StartGate {
  readonly started: boolean;
  enter(): void;
}

/** A `StartGate` for the work `what.name` of `what.sessionId` on a call with `signal`. */
export function startGate(signal: AbortSignal | undefined, what: { sessionId: string; name: string }): StartGate {
  let started = false;
  return {
    get started() {
      return started;
    },
    enter() {
      if (signal?.aborted)
        throw new StoppedWaitingError(
          "NOT_STORED",
          `the call ended before the ${what.name} started (its deadline passed or it was cancelled); nothing was run or stored: send it again`,
          { session_id: what.sessionId },
          { cause: signal.reason },
        );
      started = true;
    },
  };
}

/**
 * Waits for `work` (a Shell command, a Summarize run) for a call that can stop waiting: when
 * `signal` fires first (the client's deadline, a cancel), throws `StoppedWaitingError`
 * RUN_CONTINUES (DEADLINE_EXCEEDED on a deadline, as for a prompt) saying `what` goes on and how
 * to follow it: `WatchSession(session_id, after_seq = afterSeq)`, metadata `session_id` and
 * `after_seq`. The work itself is not stopped (`Abort` does that), and its later failure is not
 * reported to anyone but its own events. When `gate` says the work has not started yet, the call
 * waits for it to settle instead: it cannot start any more (`StartGate.enter` throws NOT_STORED),
 * or it fails on its own first (SESSION_BUSY).
 *
 * @param afterSeq - the session's last seq before the work started: its events come after it.
 * @returns what `work` resolved to; throws what `work` threw when it settles first.
 */
export async function untilDone<T>(
  work: Promise<T>,
  signal: AbortSignal | undefined,
  what: { sessionId: string; afterSeq: bigint; name: string },
  gate?: StartGate,
): Promise<T> {
  if (!signal) return work;
  work.catch(() => {});
  let stop!: () => void;
  const stopped = new Promise<never>((_, reject) => {
    stop = () => {
      if (gate && !gate.started) return;
      reject(
        new StoppedWaitingError(
          "RUN_CONTINUES",
          `the call ended before the ${what.name} finished (its deadline passed or it was cancelled); it goes on (Abort stops it): follow it with WatchSession(session_id=${what.sessionId}, after_seq=${what.afterSeq}) or read the result later with ListMessages`,
          { session_id: what.sessionId, after_seq: String(what.afterSeq) },
          { cause: signal.reason },
        ),
      );
    };
    if (signal.aborted) stop();
    else signal.addEventListener("abort", stop, { once: true });
  });
  try {
    return await Promise.race([work, stopped]);
  } finally {
    signal.removeEventListener("abort", stop);
  }
}
