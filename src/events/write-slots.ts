import pLimit, { type LimitFunction } from "p-limit";

/** Gives back a write slot; calling it again does nothing. */
export type ReleaseSlot = () => void;

/**
 * Slots for writing large replayed events: at most `count` streams of the process write one at a
 * time (from the moment the feed yields the event until the stream asks for the next one, which
 * connect-node does once the write has drained), and none holds its slot longer than `holdMs`,
 * so a client that stops reading delays the others by `holdMs` once, never for good.
 *
 * Why (docs/streams-and-replicas.md "Replay with bounded memory"): a stream writing a 1 MB event
 * has, at that moment, protobuf-es's writer buffer (sized for 3 bytes per character: 4 MiB),
 * the serialized message and its gRPC frame, about 6 MB; 32 streams replaying at once took the
 * server's RSS up by 192 MB. (A stream in a binary codec now writes the event's shared serialized
 * bytes, src/server/shared-frames.ts; a JSON stream still costs that much.) Slots are handed out
 * first come, first served (p-limit's queue).
 */
export class WriteSlots {
  private readonly limit: LimitFunction;

  /** `count` > 0 slots; `holdMs` (ms) the longest one write keeps its slot. */
  constructor(
    count: number,
    private readonly holdMs: number,
  ) {
    this.limit = pLimit(count);
  }

  /**
   * Waits for a slot; resolves to its release, or to undefined when `signal` aborted first (a
   * slot granted after that is given back at once). Never rejects.
   */
  acquire(signal?: AbortSignal): Promise<ReleaseSlot | undefined> {
    if (signal?.aborted) return Promise.resolve(undefined);
    return new Promise((granted) => {
      const onAbort = () => granted(undefined);
      signal?.addEventListener("abort", onAbort, { once: true });
      void this.limit(
        () =>
          new Promise<void>((release) => {
            signal?.removeEventListener("abort", onAbort);
            if (signal?.aborted) return release();
            const timer = setTimeout(release, this.holdMs);
            timer.unref();
            granted(() => {
              clearTimeout(timer);
              release();
            });
          }),
      );
    });
  }

  /** Streams waiting for a slot now. */
  get waiting(): number {
    return this.limit.pendingCount;
  }
}
