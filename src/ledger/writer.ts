import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Kysely, Transaction } from "kysely";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import type { Session } from "../../gen/ledger/v1/session_pb.js";
import type { EventBus } from "../events/bus.js";
import type { Relay } from "../events/pg-relay.js";
import { appendEvents } from "../storage/event-store.js";
import type { DB } from "../storage/schema.js";
import { lockSession, rowToSession, updateSessionRow } from "../storage/session-store.js";
import { SessionNotFoundError } from "../errors.js";

/** The `kind` of a new `SessionEvent`, as an init shape (`{ case: "partUpdated", value: { part } }`). */
export type EventKind = MessageInitShape<typeof SessionEventSchema>["kind"];

/** What a write to one session can do inside its transaction. */
export interface SessionWrite {
  /** The open transaction; the session row is locked for its whole life. */
  readonly trx: Transaction<DB>;
  /** The session as locked; change it in place and it is saved at commit. */
  readonly session: Session;
  /** The commit time used for events and `time_updated`. */
  readonly now: Date;
  /** The next per-session position for a message or part (1, 2, 3, ... without gaps). */
  nextPosition(): number;
  /** Appends an event with the next gap-free `seq`; returns it. */
  emit(kind: EventKind): SessionEvent;
}

/** Where writes go: the database, the in-process event bus and (on Postgres) the relay to other replicas. */
export interface WriterDeps {
  db: Kysely<DB>;
  bus: EventBus;
  relay?: Relay;
}

/**
 * Runs `fn` in ONE transaction holding the session row lock, then saves the session (data,
 * `last_seq`, `last_position`, `time_updated`) and the emitted events, commits, and only then
 * publishes the events on the bus. If `fn` or any write throws, everything rolls back and
 * nothing is published.
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
  const outcome = await deps.db.transaction().execute(async (trx) => {
    const row = await lockSession(trx, sessionId);
    if (!row) throw new SessionNotFoundError(sessionId);
    const session = rowToSession(row);
    const now = new Date();
    let lastSeq = Number(row.last_seq);
    let lastPosition = Number(row.last_position);
    const events: SessionEvent[] = [];
    const write: SessionWrite = {
      trx,
      session,
      now,
      nextPosition: () => ++lastPosition,
      emit(kind) {
        const event = create(SessionEventSchema, { sessionId, seq: BigInt(++lastSeq), time: timestampFromDate(now), kind });
        events.push(event);
        return event;
      },
    };
    const result = await fn(write);
    await appendEvents(trx, events);
    if (events.length > 0) await deps.relay?.notify(trx, sessionId, BigInt(lastSeq));
    const touched = options.touch ?? true;
    await updateSessionRow(trx, session, { lastSeq, lastPosition }, touched ? now : row.time_updated);
    return { result, events };
  });
  deps.bus.publish(outcome.events);
  return outcome;
}
