import type { BusItem, EventBus } from "./bus.js";

/** A live feed of one session's events, buffered from the moment it was opened. */
export interface Subscription extends AsyncIterable<BusItem> {
  /** Stops the feed: pending and later reads end. Idempotent. */
  close(): void;
}

/**
 * Subscribes to `sessionId` on the bus and buffers every item until it is read, so items
 * published between opening and the first read are not lost. The feed ends when `close()` is
 * called or `signal` aborts (e.g. the client went away). Memory grows with unread events; a
 * stream reader consumes them as fast as the client does.
 */
export function subscribe(bus: EventBus, sessionId: string, signal?: AbortSignal): Subscription {
  const buffer: BusItem[] = [];
  let wake: (() => void) | undefined;
  let closed = false;
  const unsubscribe = bus.subscribe(sessionId, (event) => {
    buffer.push(event);
    wake?.();
  });
  const close = () => {
    if (closed) return;
    closed = true;
    unsubscribe();
    signal?.removeEventListener("abort", close);
    wake?.();
  };
  signal?.addEventListener("abort", close, { once: true });
  if (signal?.aborted) close();
  return {
    close,
    async *[Symbol.asyncIterator]() {
      try {
        while (true) {
          const next = buffer.shift();
          if (next) {
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
