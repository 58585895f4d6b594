import { clone, create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { Kysely, Transaction } from "kysely";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { SessionSchema, type Session } from "../../gen/ledger/v1/session_pb.js";
import type { EventBus } from "../events/bus.js";
import type { Relay } from "../events/relay.js";
import { appendEvents } from "../storage/event-store.js";
import { writeSessionStatement, type RowChange } from "../storage/session-write.js";
import type { DB } from "../storage/schema.js";
import { lockSession, rowToSession, updateSessionRow } from "../storage/session-store.js";
import { SessionNotFoundError } from "../errors.js";
import { logger } from "../observe/log.js";
import { sessionCache, type KnownSession } from "../storage/session-cache.js";

/** The `kind` of a new `SessionEvent`, as an init shape (`{ case: "partUpdated", value: { part } }`). */
export type EventKind = MessageInitShape<typeof SessionEventSchema>["kind"];

/**
 * An open transaction and what waits for its commit: the one after-commit path of every write
 * that publishes events (bsky `db.ts` `onCommit`). Hooks run only once `.execute()` resolved, so
 * a rolled-back write publishes nothing.
 */
export interface Tx {
  /** The open transaction: pass it to the storage functions. */
  readonly trx: Transaction<DB>;
  /**
   * Runs `fn` after the transaction committed (never on rollback), in registration order, before
   * `inTransaction` returns. `fn` must not throw (one that does is logged and the rest still run).
   */
  onCommit(fn: () => void): void;
  /** Publishes `events` on the bus once the transaction committed (`onCommit`). */
  publish(events: readonly SessionEvent[]): void;
}

/** What a write to one session can do inside its transaction. */
export interface SessionWrite extends Tx {
  /** The session as locked; change it in place and it is saved at commit. */
  readonly session: Session;
  /** The commit time used for events and `time_updated`. */
  readonly now: Date;
  /** The next per-session position for a message or part (1, 2, 3, ... without gaps). */
  nextPosition(): number;
  /** Appends an event with the next gap-free `seq`; returns it. It is published after commit. */
  emit(kind: EventKind): SessionEvent;
  /**
   * Stores the events emitted so far now and forgets them: they are not published at commit. For
   * events nobody can be following yet (a fork's copies, written before its id is returned), so
   * a long write holds one page of them at a time, not all.
   */
  storeUnpublished(): Promise<void>;
}

/** Where writes go: the database, the in-process event bus and (on Postgres) the relay to other replicas. */
export interface WriterDeps {
  db: Kysely<DB>;
  bus: EventBus;
  relay?: Relay;
}

/**
 * Runs `fn` in one transaction and then, only if it committed, the hooks `fn` registered with
 * `tx.onCommit` / `tx.publish`. `options.isolation` "repeatable read": every read of `fn` sees
 * the database as of its first one (a long read of another session, as ForkSession's pages). Returns what `fn` returned; throws what `fn` or the commit threw
 * (then no hook runs). Use it for writes that are not to one existing session (creating or
 * deleting sessions); `writeSession` is built on it.
 *
 * ```ts
 * await inTransaction(deps, async (tx) => {
 *   await insertSession(tx.trx, session, now);
 *   tx.publish([event]);
 * });
 * ```
 */
export async function inTransaction<T>(
  deps: WriterDeps,
  fn: (tx: Tx) => Promise<T>,
  options: { isolation?: "repeatable read" } = {},
): Promise<T> {
  const hooks: Array<() => void> = [];
  const begin = deps.db.transaction();
  const result = await (options.isolation ? begin.setIsolationLevel(options.isolation) : begin).execute((trx) =>
    fn({
      trx,
      onCommit: (hook) => void hooks.push(hook),
      publish: (events) => void hooks.push(() => deps.bus.publish(events)),
    }),
  );
  for (const hook of hooks) {
    try {
      hook();
    } catch (error) {
      logger.error("after-commit hook failed", { error });
    }
  }
  return result;
}

/**
 * Runs `fn` in ONE transaction holding the session row lock, then saves the session (data,
 * `last_seq`, `last_position`, `message_count` from `session.messageCount`, `time_updated`) and
 * the emitted events, commits, and only then publishes the events on the bus and sends the
 * commit hint to other replicas (`onCommit`). If `fn` or any write throws, everything rolls
 * back and nothing is published. The writes that need no reads inside the transaction use
 * `writeSessionOnce` instead (one statement instead of five or more round trips).
 *
 * Throws `SessionNotFoundError` (NOT_FOUND) when the session does not exist, plus whatever `fn` throws.
 *
 * ```ts
 * const { result, events } = await writeSession(deps, sessionId, async (w) => {
 *   await insertMessage(w.trx, { message, position: w.nextPosition() });
 *   w.emit({ case: "messageUpdated", value: { message } });
 * });
 * ```
 */
export async function writeSession<T>(
  deps: WriterDeps,
  sessionId: string,
  fn: (write: SessionWrite) => Promise<T>,
  options: { touch?: boolean } = {},
): Promise<{ result: T; events: SessionEvent[] }> {
  return inTransaction(deps, (tx) => writeSessionIn(deps, tx, sessionId, fn, options));
}

/**
 * `writeSession` inside a transaction the caller holds (`inTransaction`): for a write that must
 * commit together with another one (ForkSession stores the new session and its copied messages
 * at once). Same locking, events and hooks; throws what `writeSession` throws.
 */
export async function writeSessionIn<T>(
  deps: WriterDeps,
  tx: Tx,
  sessionId: string,
  fn: (write: SessionWrite) => Promise<T>,
  options: { touch?: boolean } = {},
): Promise<{ result: T; events: SessionEvent[] }> {
  const row = await lockSession(tx.trx, sessionId);
  if (!row) throw new SessionNotFoundError(sessionId);
  const session = rowToSession(row);
  const now = new Date();
  // Set before `fn` runs, so a `session_updated` it emits carries the time this write stores.
  if (options.touch ?? true) session.timeUpdated = timestampFromDate(now);
  let lastSeq = Number(row.last_seq);
  let lastPosition = Number(row.last_position);
  let events: SessionEvent[] = [];
  const write: SessionWrite = {
    ...tx,
    session,
    now,
    nextPosition: () => ++lastPosition,
    emit(kind) {
      const event = create(SessionEventSchema, { sessionId, seq: BigInt(++lastSeq), time: timestampFromDate(now), kind });
      events.push(event);
      return event;
    },
    async storeUnpublished() {
      const stored = events;
      events = [];
      await appendEvents(tx.trx, stored);
    },
  };
  const result = await fn(write);
  await appendEvents(tx.trx, events);
  const touched = options.touch ?? true;
  await updateSessionRow(tx.trx, session, { lastSeq, lastPosition }, touched ? now : row.time_updated);
  // The row changed in ways the one-statement writes cannot follow: they read it again.
  tx.onCommit(() => sessionCache(deps.db).evict(sessionId));
  tx.publish(events);
  if (events.length > 0) tx.onCommit(() => deps.relay?.hint(sessionId, BigInt(lastSeq), events));
  return { result, events };
}

/** One event of a `writeSessionOnce` write: its kind and the row it inserts or updates, if any. */
export interface OnceEvent {
  kind: EventKind;
  row?: RowChange;
}

/**
 * Runs a write to one session as ONE statement (`writeSessionStatement`: the session row lock,
 * the events with gap-free `seq`, the messages and parts they carry, the session row's counters,
 * and with a `session_updated` event marked `saveSession` its data) — one database round trip —
 * then publishes the events on the bus and sends the commit hint to other replicas
 * (`relay.hint`, after the commit, never inside it). The events are made at `now` with their
 * `seq` assigned by the statement.
 *
 * With `expect` (a state of the session from `knownSession`), the write was planned against that
 * state: it is carried out only if the row is still that version, and afterwards
 * `expect.session` as changed by the caller (its message count set from the row) becomes the
 * cached state; otherwise it answers `"stale"` and writes nothing. Without `expect` the write
 * depends only on the counters, which the statement reads under the lock.
 *
 * Throws `SessionNotFoundError` (NOT_FOUND) when the session does not exist, and the driver's
 * unique-violation error on a duplicate message or part id (nothing is written then).
 */
export async function writeSessionOnce(
  deps: WriterDeps,
  sessionId: string,
  kinds: readonly OnceEvent[],
  options: { now?: Date; touch: boolean; expect?: KnownSession },
): Promise<SessionEvent[] | "stale"> {
  const now = options.now ?? new Date();
  const time = timestampFromDate(now);
  const planned = kinds.map(({ kind, row }) => ({
    event: create(SessionEventSchema, { sessionId, time, kind: options.touch ? withTimeUpdated(kind, time) : kind }),
    row,
  }));
  const cache = sessionCache(deps.db);
  const outcome = await writeSessionStatement(deps.db, {
    sessionId,
    expectVersion: options.expect?.version,
    events: planned,
    now,
    touch: options.touch,
  });
  if (outcome === "missing") {
    cache.evict(sessionId);
    throw new SessionNotFoundError(sessionId);
  }
  if (outcome === "stale") {
    cache.evict(sessionId);
    return "stale";
  }
  const events = planned.map((p) => p.event);
  if (options.expect) {
    // A copy: the events may hold the session object as it was written.
    const session = clone(SessionSchema, options.expect.session);
    session.messageCount = outcome.messageCount;
    if (options.touch) session.timeUpdated = time;
    cache.put({ session, version: outcome.version, lastSeq: outcome.lastSeq });
  } else cache.advance(sessionId, outcome.lastSeq - events.length, outcome);
  deps.bus.publish(events);
  if (events.length > 0) deps.relay?.hint(sessionId, BigInt(outcome.lastSeq), events);
  return events;
}

/**
 * A `session_updated` kind carrying a copy of its session with `time_updated` = `time` (the
 * time the write stores), so the event says what the session is after the write; other kinds
 * as they are. The caller's session object is not changed (it may be the cached state).
 */
function withTimeUpdated(kind: EventKind, time: Timestamp): EventKind {
  if (kind?.case !== "sessionUpdated" || !kind.value.session) return kind;
  const session = clone(SessionSchema, create(SessionSchema, kind.value.session));
  session.timeUpdated = time;
  return { case: "sessionUpdated", value: { ...kind.value, session } };
}

/**
 * Publishes a live event that is never stored (a `part_delta`: streamed text between two stored
 * snapshots) at once, on the bus and, on Postgres, through the relay to the other replicas. The
 * one path that publishes without a commit; everything stored is published by `onCommit`.
 */
export function publishLive(deps: WriterDeps, event: SessionEvent): void {
  deps.bus.publish([event]);
  deps.relay?.delta(event);
}
