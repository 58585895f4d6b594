import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";

/** Receives one committed (or live) event of a session. */
export type EventListener = (event: SessionEvent) => void;

/**
 * In-process fan-out of session events. Writers publish only after their transaction commits
 * (see `writeSession`), so a rolled-back write is never seen. Listeners run synchronously and
 * must not throw; a listener that throws is logged and dropped from nothing else.
 */
export class EventBus {
  readonly #listeners = new Map<string, Set<EventListener>>();

  /** Calls `listener` for every event of `sessionId` published from now on. Returns the unsubscribe function. */
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

  /** Delivers `events` (in order) to the listeners of each event's session. */
  publish(events: readonly SessionEvent[]): void {
    for (const event of events) {
      for (const listener of this.#listeners.get(event.sessionId) ?? []) {
        try {
          listener(event);
        } catch (error) {
          process.stderr.write(`event listener failed: ${String(error)}\n`);
        }
      }
    }
  }
}
