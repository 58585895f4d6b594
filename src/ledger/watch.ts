import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { CursorOutOfRangeError, SessionNotFoundError, StoppedWaitingError } from "../errors.js";
import { bufferCaps, followSession } from "../events/feed.js";
import type { LogBounds } from "../storage/session-store.js";
import type { LedgerDeps } from "./deps.js";

/**
 * The `WatchSession` RPC: replays the session's stored events with `seq > afterSeq` in order,
 * then follows live ones (deltas included) with no gap or duplicate at the hand-over, from any
 * replica. Ends after a `session_deleted` event. When `signal` fires (the client's deadline or
 * cancel, shutdown) it throws `StoppedWaitingError` (WATCH_INTERRUPTED, `after_seq` = the last seq
 * yielded), so a deadline ends the stream with DEADLINE_EXCEEDED, never a success.
 * Throws `SessionNotFoundError` (NOT_FOUND), and `CursorOutOfRangeError` (OUT_OF_RANGE) when
 * `afterSeq` is below what retention kept (`CURSOR_EXPIRED`: reload with ListMessages) or
 * ahead of the log (`CURSOR_AHEAD`), and `WatcherTooSlowError` (RESOURCE_EXHAUSTED,
 * WATCHER_TOO_SLOW, metadata `last_seq`) when its client falls behind by more than
 * `limits.watch_buffer_events` or `limits.watch_buffer_bytes`: it resumes with
 * `WatchSession(after_seq = last_seq)`.
 */
export async function* watchSession(
  deps: LedgerDeps,
  sessionId: string,
  afterSeq: bigint,
  signal?: AbortSignal,
): AsyncGenerator<SessionEvent> {
  // One statement reads the bounds with the first page of the replay.
  const checkBounds = (bounds: LogBounds | undefined) => {
    if (!bounds) throw new SessionNotFoundError(sessionId);
    if (afterSeq < bounds.prunedSeq) throw new CursorOutOfRangeError("CURSOR_EXPIRED", afterSeq, bounds);
    if (afterSeq > bounds.lastSeq) throw new CursorOutOfRangeError("CURSOR_AHEAD", afterSeq, bounds);
  };
  let last = afterSeq;
  for await (const event of followSession(deps, sessionId, afterSeq, signal, { checkBounds, caps: bufferCaps(deps.config.limits) })) {
    yield event;
    if (event.kind.case === "sessionDeleted") return;
    // A live part_delta carries the seq of the snapshot it extends: never a cursor of its own.
    if (event.kind.case !== "partDelta" && event.seq > last) last = event.seq;
  }
  if (signal?.aborted) {
    throw new StoppedWaitingError(
      "WATCH_INTERRUPTED",
      `the watch of session ${sessionId} ended at seq ${last} (its deadline passed or it was cancelled); continue with WatchSession(after_seq=${last})`,
      { session_id: sessionId, after_seq: String(last) },
      { cause: signal.reason },
    );
  }
}
