/**
 * Reading a session's event stream (WatchSession, PromptStream, ResumeSession) the way tests do:
 * in the background while the test acts ({@link collectEvents}), or until an event of interest
 * ({@link watchUntil}).
 */
import type { Client } from "@connectrpc/connect";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import type { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { sleep, waitFor } from "./wait.js";

/** A server stream of session events read in the background; see {@link collectEvents}. */
export interface EventCollector {
  /** The events so far, in arrival order. */
  events: SessionEvent[];
  /** Resolves once reading stopped: the stream ended, failed or was cancelled (never rejects). */
  done: Promise<void>;
  /** True once reading stopped. */
  ended(): boolean;
  /** What the stream failed with, unless the test cancelled it; undefined so far. */
  failure(): unknown;
  /** Waits (up to `timeoutMs`) until an event with `seq >= seq` (stored or delta) arrived; throws the stream's failure if it failed first. */
  reach(seq: bigint, timeoutMs?: number): Promise<void>;
  /** Waits up to `ms` for the stream to end by itself, then cancels it; true when it ended by itself. */
  settle(ms?: number): Promise<boolean>;
  /** Cancels the stream and waits until reading stopped (a failure before stays in `failure()`). */
  cancel(): Promise<void>;
  /** Cancels the stream, waits until reading stopped, and throws its failure, if any. */
  stop(): Promise<void>;
}

/**
 * Opens a stream with `open(signal)` (pass the signal to the call) and reads it in the
 * background, keeping every event; an error the stream ends with is its `failure()` unless the
 * test cancelled it first.
 *
 * ```ts
 * const watcher = collectEvents((signal) => client.watchSession({ sessionId, afterSeq: 0n }, { signal }));
 * await watcher.reach(5n);
 * await watcher.stop();
 * ```
 */
export function collectEvents(open: (signal: AbortSignal) => AsyncIterable<{ event?: SessionEvent }>): EventCollector {
  const controller = new AbortController();
  const events: SessionEvent[] = [];
  let failure: unknown;
  let ended = false;
  const done = (async () => {
    try {
      for await (const res of open(controller.signal)) events.push(res.event!);
    } catch (error) {
      if (!controller.signal.aborted) failure = error;
    } finally {
      ended = true;
    }
  })();
  const cancel = async () => {
    controller.abort();
    await done;
  };
  return {
    events,
    done,
    ended: () => ended,
    failure: () => failure,
    async reach(seq, timeoutMs = 10_000) {
      await waitFor(`the watcher to reach seq ${seq}`, () => failure !== undefined || events.some((e) => e.seq >= seq), timeoutMs, 5);
      if (failure) throw failure;
    },
    async settle(ms = 10_000) {
      await Promise.race([done, sleep(ms)]);
      const byItself = ended;
      await cancel();
      return byItself;
    },
    cancel,
    async stop() {
      await cancel();
      if (failure) throw failure;
    },
  };
}

/**
 * Watches the session through `client` from `afterSeq` until `until` matches an event; returns
 * every event read, the matching one last. After 20 s without a match the stream is cancelled
 * and the call rejects.
 */
export async function watchUntil(
  client: Client<typeof SessionService>,
  sessionId: string,
  until: (e: SessionEvent) => boolean,
  afterSeq = 0n,
): Promise<SessionEvent[]> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 20_000);
  const events: SessionEvent[] = [];
  try {
    for await (const res of client.watchSession({ sessionId, afterSeq }, { signal: controller.signal })) {
      events.push(res.event!);
      if (until(res.event!)) break;
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  return events;
}
