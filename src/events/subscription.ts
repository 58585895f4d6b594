import { toBinary } from "@bufbuild/protobuf";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { isHint, type BusItem, type EventBus } from "./bus.js";

/** How much one subscription may hold unread before it is ended (`limits.watch_buffer_*`). */
export interface BufferCaps {
  /** Most unread items (events and hints). */
  events: number;
  /** Most unread bytes: the events' protobuf binary size (hints count 0). */
  bytes: number;
}

/** Which cap a subscription passed, with the cap and how much it held then. */
export interface Overflow {
  /** The limit's name in ledger.json: `watch_buffer_events` or `watch_buffer_bytes`. */
  limit: "watch_buffer_events" | "watch_buffer_bytes";
  /** The cap (events or bytes). */
  max: number;
  /** What the buffer held when it passed the cap (events or bytes). */
  actual: number;
}

/** A live feed of one session's events, buffered from the moment it was opened. */
export interface Subscription extends AsyncIterable<BusItem> {
  /** Stops the feed: pending and later reads end. Idempotent. */
  close(): void;
  /**
   * Set once the unread buffer passed a cap: the feed then stopped listening, dropped what it
   * held, and its reads end (after nothing more). The reader ends its stream with an error naming
   * the last event it delivered, so its client resumes from there (`WatcherTooSlowError`).
   */
  overflow(): Overflow | undefined;
}

/**
 * Subscribes to `sessionId` on the bus and buffers every item until it is read, so items
 * published between opening and the first read are not lost. The feed ends when `close()` is
 * called or `signal` aborts (e.g. the client went away). The buffer is bounded by `caps`: a
 * reader that falls so far behind that its unread items pass either cap (a stalled client,
 * held back by HTTP/2 flow control, stops its reader) loses the feed (`overflow()`), never
 * buffering without bound. A single write that publishes more than the caps at once ends even a
 * reader that keeps up, so the caps must exceed the largest write (docs/operations.md).
 */
export function subscribe(bus: EventBus, sessionId: string, signal: AbortSignal | undefined, caps: BufferCaps): Subscription {
  const buffer: BusItem[] = [];
  let bytes = 0;
  let wake: (() => void) | undefined;
  let closed = false;
  let overflow: Overflow | undefined;
  const unsubscribe = bus.subscribe(sessionId, (item) => {
    if (closed) return;
    buffer.push(item);
    bytes += sizeOf(item);
    if (buffer.length > caps.events) overflow = { limit: "watch_buffer_events", max: caps.events, actual: buffer.length };
    else if (bytes > caps.bytes) overflow = { limit: "watch_buffer_bytes", max: caps.bytes, actual: bytes };
    if (overflow) {
      // What it held is dropped at once: the reader resumes from the table (after_seq).
      buffer.length = 0;
      bytes = 0;
      close();
    }
    wake?.();
  });
  function close() {
    if (closed) return;
    closed = true;
    unsubscribe();
    signal?.removeEventListener("abort", close);
    wake?.();
  }
  signal?.addEventListener("abort", close, { once: true });
  if (signal?.aborted) close();
  return {
    close,
    overflow: () => overflow,
    async *[Symbol.asyncIterator]() {
      try {
        while (true) {
          const next = buffer.shift();
          if (next) {
            bytes -= sizeOf(next);
            yield next;
            continue;
          }
          if (closed) return;
          await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
        }
      } finally {
        close();
      }
    },
  };
}

/** Each event's binary size, computed once per event object (the bus hands the same object to every subscriber). */
const sizes = new WeakMap<SessionEvent, number>();

/** The bytes `item` counts against `BufferCaps.bytes`: an event's protobuf binary size; 0 for a hint. */
function sizeOf(item: BusItem): number {
  if (isHint(item)) return 0;
  let size = sizes.get(item);
  if (size === undefined) {
    size = toBinary(SessionEventSchema, item).byteLength;
    sizes.set(item, size);
  }
  return size;
}
