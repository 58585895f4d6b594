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

/**
 * Told when a session becomes watched (`watched` true: its first listener arrived) and when it
 * stops being watched (false: its last listener left). Must not throw.
 */
export type WatchListener = (sessionId: string, watched: boolean) => void;

/** True when `item` is a hint rather than an event. */
export function isHint(item: BusItem): item is Hint {
  return "hint" in item;
}

/**
 * In-process fan-out of session events. Writers publish only after their transaction commits
 * (see `writeSession`), so a rolled-back write is never seen; the relay (Postgres or NATS)
 * publishes hints and deltas from other replicas. Order across publishers is not guaranteed: readers sequence by
 * `seq` and fill gaps from the table (`followSession`).
 */
export class EventBus {
  readonly #listeners = new Map<string, Set<EventListener>>();
  readonly #watchers = new Set<WatchListener>();

  /**
   * Calls `listener` for every item of `sessionId` published from now on. Returns the
   * unsubscribe function (idempotent). The first listener of a session and the departure of its
   * last one are reported to the `onWatch` listeners.
   */
  subscribe(sessionId: string, listener: EventListener): () => void {
    let set = this.#listeners.get(sessionId);
    const first = !set;
    if (!set) {
      set = new Set();
      this.#listeners.set(sessionId, set);
    }
    const mine = set;
    // A listener added twice counts once; wrap it so each subscription leaves on its own.
    const entry: EventListener = (item) => listener(item);
    mine.add(entry);
    if (first) this.#tell(sessionId, true);
    return () => {
      if (!mine.delete(entry) || mine.size > 0 || this.#listeners.get(sessionId) !== mine) return;
      this.#listeners.delete(sessionId);
      this.#tell(sessionId, false);
    };
  }

  /**
   * Calls `listener` whenever a session becomes watched here (its first listener) or stops
   * being watched (its last listener left): the NATS relay subscribes to a session's subjects
   * only while it is watched. Sessions watched already are not reported. Returns the function
   * that removes `listener`.
   */
  onWatch(listener: WatchListener): () => void {
    this.#watchers.add(listener);
    return () => this.#watchers.delete(listener);
  }

  #tell(sessionId: string, watched: boolean): void {
    for (const watcher of this.#watchers) {
      try {
        watcher(sessionId, watched);
      } catch (error) {
        process.stderr.write(`watch listener failed: ${String(error)}\n`);
      }
    }
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

  /**
   * Sessions that have at least one listener: feeds (`WatchSession`, `PromptStream`) and agent
   * loops (a run listens for its session's deletion). The relay resyncs these after a reconnect
   * and at every catch-up check.
   */
  watchedSessions(): string[] {
    return [...this.#listeners.keys()];
  }
}
