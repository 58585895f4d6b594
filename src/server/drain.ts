import { setMaxListeners } from "node:events";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { ErrorInfoSchema, RetryInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { StoppedWaitingError } from "../errors.js";
import { ERROR_DOMAIN } from "./errors.js";

/** `google.rpc.ErrorInfo.reason` of every error a draining server answers with. */
export const DRAINING_REASON = "DRAINING";

/**
 * `google.rpc.RetryInfo.retry_delay` (ms) of a draining server's errors: long enough for a load
 * balancer to stop routing to this replica, short enough that a watcher's reconnect goes unnoticed.
 */
export const DRAIN_RETRY_DELAY_MS = 250;

/**
 * The drain state of one server (see docs/operations.md, "Running behind a load balancer").
 * Before `start()` it changes nothing. From `start()` on:
 * - `draining` is true (health `Check`/`Watch` then answer `NOT_SERVING`);
 * - `interceptor` refuses every new RPC but `grpc.health.v1.Health` with `UNAVAILABLE`
 *   ({@link drainingError}: ErrorInfo reason `DRAINING`, RetryInfo);
 * - `signal` aborts, and with it the signal of every open streaming RPC (the interceptor gives
 *   streaming handlers a signal linked to both the call's and `drain.signal`): `WatchSession`,
 *   `PromptStream` and `ResumeSession` stop where they are and end with `UNAVAILABLE` whose
 *   ErrorInfo metadata carries `after_seq` (the last seq delivered) and `session_id` (plus
 *   `message_id` for a prompt's stream), so the client resumes with
 *   `WatchSession(after_seq)` on another replica; a health `Watch` sends `NOT_SERVING`, then
 *   ends with `UNAVAILABLE`.
 *
 * Unary RPCs already running are left alone: they finish normally.
 */
export interface Drain {
  /** True once `start()` was called. */
  readonly draining: boolean;
  /** Aborts (reason: an `UNAVAILABLE` `ConnectError`) when draining starts. */
  readonly signal: AbortSignal;
  /** Starts draining; idempotent. */
  start(): void;
  /** The interceptor described above; put it inside `errorInterceptor` (it maps domain errors itself). */
  readonly interceptor: Interceptor;
}

/** A new {@link Drain}, not draining yet. */
export function createDrain(): Drain {
  const controller = new AbortController();
  const signal = controller.signal;
  // Every open stream listens to it (and stops listening when it ends).
  setMaxListeners(0, signal);
  const interceptor: Interceptor = (next) => async (req) => {
    const health = req.service.typeName === Health.typeName;
    if (signal.aborted && !health) throw drainingError();
    if (!req.stream) return next(req);
    const own = req.signal;
    const res = await next({ ...req, signal: linkedSignal(own, signal) });
    if (!res.stream) return res;
    const endsWithDrain = health && req.method.name === "Watch";
    return { ...res, message: endStream(res.message, () => signal.aborted && !own.aborted, endsWithDrain) };
  };
  return {
    get draining() {
      return signal.aborted;
    },
    signal,
    start() {
      if (signal.aborted) return;
      controller.abort(new ConnectError("the server is draining", Code.Unavailable));
    },
    interceptor,
  };
}

/**
 * The error of a draining server: `UNAVAILABLE` "the server is shutting down (draining): retry
 * on another replica" (plus `detail`), with a `google.rpc.ErrorInfo` {reason `DRAINING`, domain
 * `ledger.v1`, `metadata`} and a `google.rpc.RetryInfo` {retry_delay 250 ms}. For an interrupted
 * stream `metadata` holds its cursor: `session_id`, `after_seq` (and `message_id`).
 */
export function drainingError(metadata: Record<string, string> = {}, detail?: string): ConnectError {
  const message = `the server is shutting down (draining): retry on another replica${detail ? `; ${detail}` : ""}`;
  return new ConnectError(message, Code.Unavailable, undefined, [
    { desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason: DRAINING_REASON, domain: ERROR_DOMAIN, metadata }) },
    { desc: RetryInfoSchema, value: create(RetryInfoSchema, { retryDelay: durationFromMs(DRAIN_RETRY_DELAY_MS) }) },
  ]);
}

/**
 * The stream `messages`, except that when `drained()` holds as it ends: a `StoppedWaitingError`
 * (the domain's "stopped where it was", with its cursor) becomes {@link drainingError} with the
 * same metadata, and a normal end becomes one too when `endsWithDrain` (health `Watch`).
 */
async function* endStream<T>(messages: AsyncIterable<T>, drained: () => boolean, endsWithDrain: boolean): AsyncIterable<T> {
  try {
    yield* messages;
  } catch (error) {
    if (drained() && error instanceof StoppedWaitingError) throw drainingError(error.metadata, resumeHint(error.metadata));
    throw error;
  }
  if (endsWithDrain && drained()) throw drainingError();
}

/**
 * A signal that aborts with `own` or `drain` (taking its reason), and stops listening to both
 * once it has: connect-es aborts a call's own signal when its stream ends, so a long-lived
 * `drain` signal keeps no listener per finished stream (`AbortSignal.any` on Node 20 keeps a
 * reference per dependent signal in a long-lived source until it aborts: about 50 bytes a call).
 * The same linking as connect-es's `createLinkedAbortController`.
 */
function linkedSignal(own: AbortSignal, drain: AbortSignal): AbortSignal {
  const linked = new AbortController();
  const sources = [own, drain];
  function onAbort(this: AbortSignal) {
    if (!linked.signal.aborted) linked.abort(this.reason);
    for (const source of sources) source.removeEventListener("abort", onAbort);
  }
  for (const source of sources) {
    if (source.aborted) {
      onAbort.call(source);
      break;
    }
    source.addEventListener("abort", onAbort);
  }
  return linked.signal;
}

/** Where a stream stopped, as advice ("continue with WatchSession(session_id=…, after_seq=N)"), if known. */
function resumeHint(metadata: Record<string, string>): string | undefined {
  if (metadata.after_seq === undefined) return undefined;
  return `continue with WatchSession(session_id=${metadata.session_id ?? ""}, after_seq=${metadata.after_seq})`;
}
