/**
 * What a client of a draining server sees (docs/operations.md, "Running behind a load
 * balancer"): {@link drainDetails} reads the error's ErrorInfo and RetryInfo, and
 * {@link watchAcross} is the reconnect a production client does: watch through one replica and,
 * when it drains, go on through the next from the cursor in the error.
 */
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { expect } from "vitest";
import { ErrorInfoSchema, RetryInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import type { SessionService } from "../../gen/ledger/v1/service_pb.js";

/** A draining server's error as a test compares it: ErrorInfo reason and metadata, RetryInfo delay in ms (-1: none). */
export interface DrainDetails {
  reason: string;
  metadata: Record<string, string>;
  retryMs: number;
}

/** The ErrorInfo and RetryInfo of `error`, after checking it is an `UNAVAILABLE` ConnectError. */
export function drainDetails(error: unknown): DrainDetails {
  expect(error).toBeInstanceOf(ConnectError);
  const e = error as ConnectError;
  expect(Code[e.code], e.rawMessage).toBe("Unavailable");
  const [info] = e.findDetails(ErrorInfoSchema);
  const [retry] = e.findDetails(RetryInfoSchema);
  const delay = retry?.retryDelay;
  return {
    reason: info?.reason ?? "",
    metadata: { ...info?.metadata },
    retryMs: delay ? Number(delay.seconds) * 1000 + delay.nanos / 1e6 : -1,
  };
}

/** One stream of a {@link watchAcross}: the replica's index, the cursor it started from, what it delivered. */
export interface WatchSegment {
  replica: number;
  afterSeq: bigint;
  events: SessionEvent[];
}

/**
 * Watches `sessionId` from `afterSeq` through `replicas[0]`; when the stream ends with
 * `UNAVAILABLE` `DRAINING`, waits the RetryInfo delay and goes on through the next replica from
 * the error's `after_seq`. Stops (cancelling the stream) at the first event `until` matches;
 * `onEvent` sees each event as it arrives (e.g. to drain a replica mid-stream). Any other
 * failure, or a drain of the last replica, rejects. Gives up after `timeoutMs` (default 30 s).
 */
export async function watchAcross(
  replicas: Array<Client<typeof SessionService>>,
  sessionId: string,
  until: (e: SessionEvent) => boolean,
  options: { afterSeq?: bigint; onEvent?: (e: SessionEvent, segment: WatchSegment) => void; timeoutMs?: number } = {},
): Promise<WatchSegment[]> {
  const segments: WatchSegment[] = [];
  const deadline = AbortSignal.timeout(options.timeoutMs ?? 30_000);
  let afterSeq = options.afterSeq ?? 0n;
  for (let replica = 0; replica < replicas.length; replica++) {
    const segment: WatchSegment = { replica, afterSeq, events: [] };
    segments.push(segment);
    const controller = new AbortController();
    try {
      const stream = replicas[replica]!.watchSession({ sessionId, afterSeq }, { signal: AbortSignal.any([controller.signal, deadline]) });
      for await (const res of stream) {
        segment.events.push(res.event!);
        options.onEvent?.(res.event!, segment);
        if (until(res.event!)) return segments;
      }
      throw new Error(`the watch through replica ${replica} ended without an error before the awaited event`);
    } catch (error) {
      if (deadline.aborted || replica === replicas.length - 1) throw error;
      const details = drainDetails(error);
      expect(details.reason).toBe("DRAINING");
      afterSeq = BigInt(details.metadata.after_seq!);
      await new Promise((resolve) => setTimeout(resolve, details.retryMs));
    } finally {
      controller.abort();
    }
  }
  throw new Error("unreachable");
}
