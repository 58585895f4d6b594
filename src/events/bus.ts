import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";

/**
 * A hint that a session's log has grown to `seq` somewhere else (another replica), without the
 * events themselves: readers fetch `seq > last seen` from `session_event`.
 */
export interface Hint {
  hint: true;
  sessionId: string;
  seq: bigint;
}

/** What a bus listener receives: a full event (committed here, or a live delta) or a hint. */
export type BusItem = SessionEvent | Hint;

/** Receives the items of one session. Must not throw. */
export type EventListener = (item: BusItem) => void;

/** True when `item` is a hint rather than an event. */
export function isHint(item: BusItem): item is Hint {
  return "hint" in item;
}

/**
 * In-process fan-out of session events. Writers publish only after their transaction commits
 * (see `writeSession`), so a rolled-back write is never seen; the Postgres relay publishes hints
 * and deltas from other replicas. Order across publishers is not guaranteed: readers sequence by
 * `seq` and fill gaps from the table (`followSession`).
 */
export class EventBus {
  readonly #listeners = new Map<string, Set<EventListener>>();

  /** Calls `listener` for every item of `sessionId` published from now on. Returns the unsubscribe function. */
  subscribe(sessionId: string, listener: EventListener): () => void {
    let set = this.#listeners.get(sessionId);
    if (!set) {
      set = new Set();
      this.#listeners.set(sessionId, set);
    }
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0) this.#listeners.delete(sessionId);
    };
  }

  /** Delivers items (in order) to the listeners of each item's session. */
  publish(items: readonly BusItem[]): void {
    for (const item of items) {
      for (const listener of this.#listeners.get(item.sessionId) ?? []) {
        try {
          listener(item);
        } catch (error) {
          process.stderr.write(`event listener failed: ${String(error)}\n`);
        }
      }
    }
  }

  /** Sessions that have at least one listener (the relay resyncs these after a reconnect). */
  watchedSessions(): string[] {
    return [...this.#listeners.keys()];
  }
}
