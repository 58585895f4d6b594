import { randomUUID } from "node:crypto";
import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import type { Kysely } from "kysely";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import pg from "pg";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { notify, notifyMany } from "../storage/notify.js";
import type { DB } from "../storage/schema.js";
import { listLastSeqs } from "../storage/session-store.js";
import { DEFAULT_CATCH_UP_MS } from "../config/config.js";
import { sessionCache } from "../storage/session-cache.js";
import { storedEventJson } from "../storage/session-write.js";
import type { BusItem, EventBus } from "./bus.js";

/**
 * Channel of commit hints: `origin|session_id|seq`, or `origin|session_id|seq|[events as proto
 * JSON]` when the committed events fit in the payload: a replica following the session then
 * yields them without reading them back from `session_event`.
 */
export const EVENTS_CHANNEL = "ledger_events";
/** Channel of batched live deltas: `origin|[[session, seq, message, part, field, delta, offset], ...]`. */
export const DELTAS_CHANNEL = "ledger_deltas";
/**
 * Channel of requests and notices to other replicas: `origin|abort|session_id` (abort the
 * session's loop), `origin|deleted|{session_deleted event as proto JSON}` (sent by DeleteSession
 * in its transaction, one per deleted session).
 */
export const CONTROL_CHANNEL = "ledger_control";
/** Postgres refuses NOTIFY payloads of 8000 bytes or more; stay well under. */
const MAX_PAYLOAD_BYTES = 7000;
/** Bytes of event JSON a commit hint may carry (the rest of the payload: origin, ids, seq). */
export const MAX_HINT_EVENTS_BYTES = MAX_PAYLOAD_BYTES - 200;
/** Longest delta text (code points) sent in one piece; longer ones are split. */
const MAX_DELTA_CHARS = 1500;
/** Deltas are sent in batches at most this often (ms): never one NOTIFY per token. */
const DELTA_FLUSH_MS = 15;

/** Cross-process fan-out over Postgres LISTEN/NOTIFY (docs/design.md §6, docs/streams-and-replicas.md). */
export interface Relay {
  /**
   * Tells the other replicas that `sessionId`'s log reached `seq`. Call it AFTER the write
   * committed, never inside the transaction (a NOTIFY queued in a transaction serializes every
   * commit of the Postgres instance). Returns at once: the hint is sent in the background, after
   * the session's pending deltas and batched with other hints (one `pg_notify` statement in
   * flight at a time); one that is lost (this process died, the connection failed) is made up
   * for by the other replicas' periodic check of their watched sessions.
   * `events`, the committed events ending at `seq`, travel with the hint when their proto JSON
   * fits in the payload (`MAX_HINT_EVENTS_BYTES`): the other replicas publish them as they are
   * instead of a hint, so their feeds need no read of `session_event` (one database round trip
   * less per hint and per following replica). Larger writes send the hint alone.
   */
  hint(sessionId: string, seq: bigint, events?: readonly SessionEvent[]): void;
  /** Sends a live delta to the other replicas (batched, under the payload limit). */
  delta(event: SessionEvent): void;
  /**
   * Sends, after the deleting transaction committed, one notice per deleted session carrying its
   * `session_deleted` event (session id, seq, and the session as it was: only `id`,
   * `parent_id` and `directory` when the whole session would not fit in a NOTIFY payload).
   * Every other replica then publishes the events on its bus, which ends its feeds of those
   * sessions and stops their loops; a replica that misses the notice finds the row gone at its
   * next periodic check. Returns at once, like `hint`.
   */
  deleted(events: readonly SessionEvent[]): void;
  /** Asks every other replica to abort the session's loop if it runs there. */
  requestAbort(sessionId: string): Promise<void>;
  /** Handles abort requests from other replicas. */
  onAbort(handler: (sessionId: string) => void): void;
  /** Stops listening and the periodic check, and sends what is pending. */
  close(): Promise<void>;
}

/**
 * Test hook: with `LEDGER_TEST_DIE_BEFORE_HINT=1` in its environment the process kills itself
 * (SIGKILL) when it is about to send its first commit hint, i.e. after a commit and before its
 * hint, as a crash there would. Only the tests set it.
 */
const DIE_BEFORE_HINT = process.env.LEDGER_TEST_DIE_BEFORE_HINT === "1";

/**
 * Starts the relay: one dedicated `pg.Client` LISTENs on the three channels and republishes what
 * other processes send on the local bus (commit hints as `Hint`s, deltas as `part_delta`
 * events, deletions as `session_deleted` events; its own messages are recognised by `origin`
 * and skipped). A hint or deletion from another replica also drops that session from this
 * process's `SessionCache`. If the connection drops it reconnects with backoff (100 ms doubling
 * to 5 s) and then resyncs: it hints every watched session at its current `last_seq`, so readers
 * read what they missed from the table; a watched session whose row is gone by then (its deletion
 * notice was sent while this replica was not listening) gets a `session_deleted` event with the
 * session id only and seq 0 (feeds renumber it one past the last event they yielded).
 *
 * The same resync runs every `catchUpMs` (default `DEFAULT_CATCH_UP_MS`, `events.catch_up_ms` in ledger.json; 0 turns it off) while
 * any session is watched here: one query for all watched sessions. Hints are sent after commit,
 * so a writer that dies between its commit and its hint sends none; a watcher then reads the
 * missing events at the next check (or at the next hint of that session, which carries a later seq).
 */
export async function startPgRelay(options: { url: string; db: Kysely<DB>; bus: EventBus; catchUpMs?: number }): Promise<Relay> {
  const origin = randomUUID().slice(0, 8);
  const { db, bus } = options;
  const cache = sessionCache(db);
  let client: pg.Client | undefined;
  let closed = false;
  let queue: Array<{ sessionId: string; item: string }> = [];
  let timer: NodeJS.Timeout | undefined;
  let abortHandler: ((sessionId: string) => void) | undefined;

  const onNotification = (message: pg.Notification) => {
    try {
      receive(message);
    } catch (error) {
      // A malformed payload (another version, a stray NOTIFY) must not take the process down.
      process.stderr.write(`relay: ignored a malformed ${message.channel} notification: ${String(error)}\n`);
    }
  };
  const receive = (message: pg.Notification) => {
    const payload = message.payload ?? "";
    const bar = payload.indexOf("|");
    if (bar < 0 || payload.slice(0, bar) === origin) return;
    const body = payload.slice(bar + 1);
    if (message.channel === CONTROL_CHANNEL) {
      if (body.startsWith("abort|")) abortHandler?.(body.slice("abort|".length));
      else if (body.startsWith("deleted|")) {
        const event = fromJson(SessionEventSchema, JSON.parse(body.slice("deleted|".length)) as JsonValue, { ignoreUnknownFields: true });
        if (event.kind.case === "sessionDeleted" && event.sessionId) {
          cache.evict(event.sessionId);
          bus.publish([event]);
        }
      }
      return;
    }
    if (message.channel === EVENTS_CHANNEL) {
      // session_id|seq, then optionally |[events]: the JSON may hold "|" itself.
      const first = body.indexOf("|");
      if (first <= 0) return;
      const second = body.indexOf("|", first + 1);
      const sessionId = body.slice(0, first);
      const seq = BigInt(second < 0 ? body.slice(first + 1) : body.slice(first + 1, second));
      let events: SessionEvent[] = [];
      try {
        if (second >= 0) {
          events = (JSON.parse(body.slice(second + 1)) as JsonValue[]).map((json) =>
            fromJson(SessionEventSchema, json, { ignoreUnknownFields: true }),
          );
        }
      } catch {
        // Events this version cannot read: the hint alone still sends feeds to the table.
        events = [];
      }
      cache.evict(sessionId);
      // Feeds take the events as if written here (in order, gaps read from the table); a hint
      // covers what the events do not reach.
      const items: BusItem[] = events.filter((event) => event.sessionId === sessionId);
      if ((items.at(-1) as SessionEvent | undefined)?.seq !== seq) items.push({ hint: true, sessionId, seq });
      bus.publish(items);
      return;
    }
    const items: BusItem[] = (JSON.parse(body) as Array<[string, string, string, string, string, string, string]>).map(
      ([sessionId, seq, messageId, partId, field, delta, offset]) =>
        create(SessionEventSchema, {
          sessionId,
          seq: BigInt(seq),
          kind: { case: "partDelta", value: { messageId, partId, field, delta, offset: BigInt(offset) } },
        }),
    );
    bus.publish(items);
  };

  const connect = async (attempt = 0): Promise<void> => {
    if (closed) return;
    const next = new pg.Client({ connectionString: options.url, application_name: "ledger-relay" });
    next.on("notification", onNotification);
    next.on("error", () => void reconnect(next));
    next.on("end", () => void reconnect(next));
    try {
      await next.connect();
      await next.query(`listen ${EVENTS_CHANNEL}`);
      await next.query(`listen ${DELTAS_CHANNEL}`);
      await next.query(`listen ${CONTROL_CHANNEL}`);
      client = next;
      if (attempt > 0) await resync();
    } catch {
      await next.end().catch(() => {});
      await new Promise((r) => setTimeout(r, Math.min(100 * 2 ** attempt, 5000)));
      return connect(attempt + 1);
    }
  };
  const reconnect = async (from: pg.Client) => {
    if (closed || client !== from) return;
    client = undefined;
    await from.end().catch(() => {});
    await connect(1);
  };
  const resync = async () => {
    const watched = bus.watchedSessions();
    if (watched.length === 0) return;
    const rows = await listLastSeqs(db, watched);
    bus.publish(rows.map((r) => ({ hint: true as const, sessionId: r.id, seq: r.lastSeq })));
    // Deleted while we were not listening: the notice is lost, the missing row tells.
    const alive = new Set(rows.map((r) => r.id));
    bus.publish(watched.filter((id) => !alive.has(id)).map((id) => deletedEvent(id)));
  };
  // Outgoing notifications, in order; one statement in flight at a time, the rest batched behind it.
  let outbox: Array<[string, string]> = [];
  let sending: Promise<void> | undefined;
  const send = (): Promise<void> => {
    if (sending) return sending;
    // Nothing to send: start no sender. (A sender started on an empty outbox would finish before
    // `sending` was assigned and leave it set for good: nothing would be sent again.)
    if (outbox.length === 0) return Promise.resolve();
    sending = (async () => {
      try {
        while (outbox.length > 0) {
          const batch = outbox;
          outbox = [];
          // Lost on failure: the other replicas' periodic check reads what the hints announced.
          await notifyMany(db, batch).catch(() => {});
        }
      } finally {
        sending = undefined;
      }
    })();
    return sending;
  };
  const moveDeltas = (only?: string) => {
    const mine = only === undefined ? queue : queue.filter((q) => q.sessionId === only);
    if (mine.length === 0) return;
    queue = only === undefined ? [] : queue.filter((q) => q.sessionId !== only);
    for (const payload of pack(mine.map((q) => q.item))) outbox.push([DELTAS_CHANNEL, `${origin}|${payload}`]);
  };
  const flush = async () => {
    timer = undefined;
    moveDeltas();
    await send();
  };
  let checking = false;
  const check = async () => {
    if (checking || closed || !client) return;
    checking = true;
    try {
      await resync();
    } catch {
      // The next check tries again.
    } finally {
      checking = false;
    }
  };
  const catchUpMs = options.catchUpMs ?? DEFAULT_CATCH_UP_MS;
  const checker = catchUpMs > 0 ? setInterval(() => void check(), catchUpMs) : undefined;
  checker?.unref();

  await connect();
  return {
    hint(sessionId, seq, events) {
      if (DIE_BEFORE_HINT) process.kill(process.pid, "SIGKILL");
      // This session's queued deltas go first: readers must get a delta before the snapshot
      // that supersedes it (a late one would be dropped as already included).
      moveDeltas(sessionId);
      outbox.push([EVENTS_CHANNEL, `${origin}|${sessionId}|${seq}${hintEvents(events, seq)}`]);
      void send();
    },
    delta(event) {
      if (event.kind.case !== "partDelta") return;
      const d = event.kind.value;
      let offset = d.offset;
      for (const piece of split(d.delta)) {
        queue.push({
          sessionId: event.sessionId,
          item: JSON.stringify([event.sessionId, String(event.seq), d.messageId, d.partId, d.field, piece.text, String(offset)]),
        });
        offset += BigInt(piece.length);
      }
      timer ??= setTimeout(() => void flush(), DELTA_FLUSH_MS);
    },
    deleted(events) {
      for (const event of events) outbox.push([CONTROL_CHANNEL, `${origin}|deleted|${deletedPayload(event)}`]);
      void send();
    },
    async requestAbort(sessionId) {
      await notify(db, CONTROL_CHANNEL, `${origin}|abort|${sessionId}`);
    },
    onAbort(handler) {
      abortHandler = handler;
    },
    async close() {
      closed = true;
      if (timer) clearTimeout(timer);
      if (checker) clearInterval(checker);
      await flush();
      await client?.end().catch(() => {});
    },
  };
}

/**
 * `|[events as proto JSON]` for a commit hint, or "" when there are none, they do not end at
 * `seq`, or their JSON is over `MAX_HINT_EVENTS_BYTES` (the hint then goes alone).
 */
function hintEvents(events: readonly SessionEvent[] | undefined, seq: bigint): string {
  if (!events || events.length === 0 || events.at(-1)!.seq !== seq) return "";
  let size = 2;
  const items: string[] = [];
  for (const event of events) {
    const item = storedEventJson(event) ?? JSON.stringify(toJson(SessionEventSchema, event));
    size += Buffer.byteLength(item) + 1;
    if (size > MAX_HINT_EVENTS_BYTES) return "";
    items.push(item);
  }
  return `|[${items.join(",")}]`;
}

/** A `session_deleted` event of `sessionId` that knows nothing else (seq 0: feeds renumber it). */
function deletedEvent(sessionId: string): SessionEvent {
  return create(SessionEventSchema, {
    sessionId,
    seq: 0n,
    time: timestampNow(),
    kind: { case: "sessionDeleted", value: { session: { id: sessionId } } },
  });
}

/** The event as proto JSON, under the NOTIFY limit: a session too large to fit keeps only `id`, `parent_id`, `directory` (else `id`). */
function deletedPayload(event: SessionEvent): string {
  const full = JSON.stringify(toJson(SessionEventSchema, event));
  if (Buffer.byteLength(full) <= MAX_PAYLOAD_BYTES - 100) return full;
  const session = event.kind.case === "sessionDeleted" ? event.kind.value.session : undefined;
  for (const value of [
    { id: event.sessionId, parentId: session?.parentId ?? "", directory: session?.directory ?? "" },
    { id: event.sessionId },
  ]) {
    const small = JSON.stringify(
      toJson(
        SessionEventSchema,
        create(SessionEventSchema, {
          sessionId: event.sessionId,
          seq: event.seq,
          time: event.time,
          kind: { case: "sessionDeleted", value: { session: value } },
        }),
      ),
    );
    if (Buffer.byteLength(small) <= MAX_PAYLOAD_BYTES - 100) return small;
  }
  throw new Error(`session id too long for a NOTIFY payload: ${event.sessionId.length} characters`);
}

/** Joins JSON items into arrays whose payloads stay under the NOTIFY limit. */
function pack(items: string[]): string[] {
  const out: string[] = [];
  let current: string[] = [];
  let size = 2;
  for (const item of items) {
    const bytes = Buffer.byteLength(item) + 1;
    if (current.length > 0 && size + bytes > MAX_PAYLOAD_BYTES) {
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

/** Splits a delta into pieces of at most MAX_DELTA_CHARS code points (their lengths in code points). */
function split(text: string): Array<{ text: string; length: number }> {
  const chars = [...text];
  const pieces: Array<{ text: string; length: number }> = [];
  for (let i = 0; i < chars.length; i += MAX_DELTA_CHARS) {
    const slice = chars.slice(i, i + MAX_DELTA_CHARS);
    pieces.push({ text: slice.join(""), length: slice.length });
  }
  return pieces.length > 0 ? pieces : [{ text: "", length: 0 }];
}
