import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import type { Kysely } from "kysely";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { DEFAULT_CATCH_UP_MS } from "../config/config.js";
import type { SessionCache } from "../storage/session-cache.js";
import type { DB } from "../storage/schema.js";
import { listLastSeqs } from "../storage/session-store.js";
import { storedEventJson } from "../storage/session-write.js";
import { logger } from "../observe/log.js";
import type { BusItem, EventBus } from "./bus.js";
import type { CatchUpStats, RelayStats } from "./relay-stats.js";

/**
 * Cross-process fan-out of a session's commit hints, live deltas and control messages between
 * the replicas of one Postgres database (docs/design.md §6, docs/streams-and-replicas.md). Two
 * implementations: `startPgRelay` (LISTEN/NOTIFY, the default) and `startNatsRelay` (NATS
 * subjects per session, `bus.nats` in ledger.json). Postgres stays the source of truth: what a
 * relay loses, the periodic catch-up check (`startCatchUp`) reads from the table.
 */
export interface Relay {
  /**
   * Tells the other replicas that `sessionId`'s log reached `seq`. Call it AFTER the write
   * committed, never inside the transaction (a NOTIFY queued in a transaction serializes every
   * commit of the Postgres instance). Returns at once: the hint is sent in the background, after
   * the session's pending deltas; one that is lost (this process died, the connection failed) is
   * made up for by the other replicas' periodic check of their watched sessions.
   * `events`, the committed events ending at `seq`, travel with the hint when their proto JSON
   * fits the relay's limit: the other replicas publish them as they are instead of a hint, so
   * their feeds need no read of `session_event`. Larger writes send the hint alone.
   */
  hint(sessionId: string, seq: bigint, events?: readonly SessionEvent[]): void;
  /** Sends a live delta to the other replicas (batched, at most every 15 ms). */
  delta(event: SessionEvent): void;
  /**
   * Sends, after the deleting transaction committed, one notice per deleted session carrying its
   * `session_deleted` event. The other replicas publish the events on their buses, which ends
   * their feeds of those sessions and stops their loops; a replica that misses the notice finds
   * the row gone at its next periodic check. Returns at once, like `hint`.
   */
  deleted(events: readonly SessionEvent[]): void;
  /** Asks every other replica to abort the session's loop if it runs there. */
  requestAbort(sessionId: string): Promise<void>;
  /** Handles abort requests from other replicas. */
  onAbort(handler: (sessionId: string) => void): void;
  /**
   * The relay's kind, connection state and counters (a fresh object each call), for `/metrics`
   * and health (`relayCondition`).
   */
  stats(): RelayStats;
  /** Stops listening and the periodic check, and sends what is pending. */
  close(): Promise<void>;
}

/**
 * The committed events of a hint as one JSON array text (`[event, ...]`, proto JSON, reusing
 * the JSON the write statement built: `storedEventJson`), or undefined when there are none,
 * they do not end at `seq`, or the array would be over `maxBytes` (UTF-8 bytes): the hint then
 * goes alone.
 */
export function hintEventsJson(events: readonly SessionEvent[] | undefined, seq: bigint, maxBytes: number): string | undefined {
  if (!events || events.length === 0 || events.at(-1)!.seq !== seq) return undefined;
  let size = 2;
  const items: string[] = [];
  for (const event of events) {
    const item = storedEventJson(event) ?? JSON.stringify(toJson(SessionEventSchema, event));
    size += Buffer.byteLength(item) + 1;
    if (size > maxBytes) return undefined;
    items.push(item);
  }
  return `[${items.join(",")}]`;
}

/**
 * What a relay does with a commit hint from another replica: drops the session from this
 * process's `SessionCache` (its row changed), then publishes on the bus the events that came
 * with it (`eventsJson`, a JSON array of proto JSON events; those of other sessions are
 * ignored), followed by a `Hint` at `seq` when they do not end there. Events that cannot be read
 * (another version, a damaged payload) are dropped and the hint goes alone: feeds then read the
 * rows from the table.
 */
export function publishCommitted(bus: EventBus, cache: SessionCache, sessionId: string, seq: bigint, eventsJson?: string): void {
  let events: SessionEvent[] = [];
  try {
    if (eventsJson) {
      events = (JSON.parse(eventsJson) as JsonValue[]).map((json) => fromJson(SessionEventSchema, json, { ignoreUnknownFields: true }));
    }
  } catch {
    events = [];
  }
  cache.evict(sessionId);
  // Feeds take the events as if written here (in order, gaps read from the table); a hint
  // covers what the events do not reach.
  const items: BusItem[] = events.filter((event) => event.sessionId === sessionId);
  if ((items.at(-1) as SessionEvent | undefined)?.seq !== seq) items.push({ hint: true, sessionId, seq });
  bus.publish(items);
}

/**
 * What a relay does with a deletion notice from another replica (`json`: the `session_deleted`
 * event as proto JSON): evicts the session from the cache and publishes the event on the bus.
 * Ignores any other event kind; throws on malformed JSON.
 */
export function publishDeleted(bus: EventBus, cache: SessionCache, json: string): void {
  const event = fromJson(SessionEventSchema, JSON.parse(json) as JsonValue, { ignoreUnknownFields: true });
  if (event.kind.case !== "sessionDeleted" || !event.sessionId) return;
  cache.evict(event.sessionId);
  bus.publish([event]);
}

/** A `session_deleted` event of `sessionId` that knows nothing else (seq 0: feeds renumber it). */
export function deletedEvent(sessionId: string): SessionEvent {
  return create(SessionEventSchema, {
    sessionId,
    seq: 0n,
    time: timestampNow(),
    kind: { case: "sessionDeleted", value: { session: { id: sessionId } } },
  });
}

/** The periodic catch-up check of a relay; see {@link startCatchUp}. */
export interface CatchUp {
  /**
   * Reads the `last_seq` of every session watched on the bus (one query; none when nothing is
   * watched) and publishes a `Hint` at it for each, so feeds read what they missed from the
   * table; a watched session whose row is gone gets a `session_deleted` with only its id.
   * Counted in `stats()` like a periodic check. Throws what the database throws.
   */
  resync(): Promise<void>;
  /** The checks' counters so far (a fresh object each call). */
  stats(): CatchUpStats;
  /** Stops the timer. */
  stop(): void;
}

/**
 * Starts the resync of the watched sessions every `catchUpMs` (default `DEFAULT_CATCH_UP_MS`,
 * `events.catch_up_ms` in ledger.json; 0 turns the timer off, `resync()` still works), skipped
 * while `active()` is false or the previous check still runs; failures are retried at the next
 * tick. Hints are sent after commit, so a writer that dies between its commit and its hint sends
 * none, and a relay may lose messages: a watcher then reads the missing events at the next check,
 * at most about one interval late. Each check is counted (`stats()`); the first failure after a
 * success is logged at warn (`relay: catch-up check failed`) and the next success at info.
 */
export function startCatchUp(options: { db: Kysely<DB>; bus: EventBus; catchUpMs?: number; active?: () => boolean }): CatchUp {
  const { db, bus } = options;
  const catchUpMs = options.catchUpMs ?? DEFAULT_CATCH_UP_MS;
  const stats: CatchUpStats = { intervalMs: catchUpMs, startedAt: Date.now(), checks: 0, failures: 0, hints: 0 };
  let failing = false;
  const resync = async () => {
    const watched = bus.watchedSessions();
    if (watched.length === 0) {
      stats.lastSuccessAt = Date.now();
      return;
    }
    stats.checks++;
    let rows: Array<{ id: string; lastSeq: bigint }>;
    try {
      rows = await listLastSeqs(db, watched);
    } catch (error) {
      stats.failures++;
      stats.lastFailureAt = Date.now();
      if (!failing) logger.warn("relay: catch-up check failed; retrying at the next check", { sessions: watched.length, error });
      failing = true;
      throw error;
    }
    stats.lastSuccessAt = Date.now();
    stats.hints += rows.length;
    if (failing) logger.info("relay: catch-up check succeeded again", { sessions: watched.length });
    failing = false;
    bus.publish(rows.map((r) => ({ hint: true as const, sessionId: r.id, seq: r.lastSeq })));
    // Deleted while we were not listening: the notice is lost, the missing row tells.
    const alive = new Set(rows.map((r) => r.id));
    bus.publish(watched.filter((id) => !alive.has(id)).map((id) => deletedEvent(id)));
  };
  let checking = false;
  const check = async () => {
    if (checking || (options.active && !options.active())) return;
    checking = true;
    try {
      await resync();
    } catch {
      // The next check tries again.
    } finally {
      checking = false;
    }
  };
  const timer = catchUpMs > 0 ? setInterval(() => void check(), catchUpMs) : undefined;
  timer?.unref();
  return { resync, stats: () => ({ ...stats }), stop: () => clearInterval(timer) };
}

/** Joins JSON items into arrays (`[a,b,...]`) of at most `maxBytes` each (an item larger than that goes alone). */
export function pack(items: readonly string[], maxBytes: number): string[] {
  const out: string[] = [];
  let current: string[] = [];
  let size = 2;
  for (const item of items) {
    const bytes = Buffer.byteLength(item) + 1;
    if (current.length > 0 && size + bytes > maxBytes) {
      out.push(`[${current.join(",")}]`);
      current = [];
      size = 2;
    }
    current.push(item);
    size += bytes;
  }
  if (current.length > 0) out.push(`[${current.join(",")}]`);
  return out;
}

/**
 * Splits a delta into pieces of at most `maxChars` code points whose JSON string text (escapes
 * included: a control character takes 6 bytes, `"\u0001"`) is at most `maxJsonBytes` bytes of
 * UTF-8, with their lengths in code points. A trial, 2026-12-04: 1,400 control characters made a
 * 8,400-byte NOTIFY payload, which Postgres refused, and the whole batch with it.
 */
export function split(text: string, maxChars: number, maxJsonBytes = maxChars * 6): Array<{ text: string; length: number }> {
  const pieces: Array<{ text: string; length: number }> = [];
  let current: string[] = [];
  let bytes = 0;
  for (const char of text) {
    const size = Buffer.byteLength(JSON.stringify(char)) - 2;
    if (current.length > 0 && (current.length === maxChars || bytes + size > maxJsonBytes)) {
      pieces.push({ text: current.join(""), length: current.length });
      current = [];
      bytes = 0;
    }
    current.push(char);
    bytes += size;
  }
  if (current.length > 0 || pieces.length === 0) pieces.push({ text: current.join(""), length: current.length });
  return pieces;
}
