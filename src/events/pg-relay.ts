import { randomUUID } from "node:crypto";
import { create, toJson } from "@bufbuild/protobuf";
import type { Kysely } from "kysely";
import pg from "pg";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { logger } from "../observe/log.js";
import { notify, notifyMany } from "../storage/notify.js";
import type { DB } from "../storage/schema.js";
import { sessionCache } from "../storage/session-cache.js";
import type { BusItem, EventBus } from "./bus.js";
import { hintEventsJson, pack, publishCommitted, publishDeleted, split, startCatchUp, type Relay } from "./relay.js";

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
/** Most bytes of a piece's JSON string text (escapes included), so one delta's payload stays under MAX_PAYLOAD_BYTES. */
const MAX_DELTA_JSON_BYTES = 6000;
/** Deltas are sent in batches at most this often (ms): never one NOTIFY per token. */
const DELTA_FLUSH_MS = 15;

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
 * any session is watched here, whether the listener is connected or not (through the pool): one
 * query for all watched sessions (`startCatchUp`, shared with the NATS relay). Hints are sent after commit,
 * so a writer that dies between its commit and its hint sends none; a watcher then reads the
 * missing events at the next check (or at the next hint of that session, which carries a later seq).
 * A lost listener connection and its return are logged at info; `stats()` reports kind
 * `"postgres"`, the listener's state and the counters.
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
  let messages = 0;
  let hints = 0;
  let lastHintAt: number | undefined;

  const onNotification = (message: pg.Notification) => {
    messages++;
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
      else if (body.startsWith("deleted|")) publishDeleted(bus, cache, body.slice("deleted|".length));
      return;
    }
    if (message.channel === EVENTS_CHANNEL) {
      // session_id|seq, then optionally |[events]: the JSON may hold "|" itself.
      const first = body.indexOf("|");
      if (first <= 0) return;
      const second = body.indexOf("|", first + 1);
      const sessionId = body.slice(0, first);
      const seq = BigInt(second < 0 ? body.slice(first + 1) : body.slice(first + 1, second));
      hints++;
      lastHintAt = Date.now();
      publishCommitted(bus, cache, sessionId, seq, second < 0 ? undefined : body.slice(second + 1));
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
      if (attempt > 0) {
        logger.info("relay: Postgres listener reconnected");
        await resync();
      }
    } catch {
      await next.end().catch(() => {});
      await new Promise((r) => setTimeout(r, Math.min(100 * 2 ** attempt, 5000)));
      return connect(attempt + 1);
    }
  };
  const reconnect = async (from: pg.Client) => {
    if (closed || client !== from) return;
    client = undefined;
    // info, not warn: the listener reconnects by itself and resyncs (ledger_relay_connected shows it).
    logger.info("relay: Postgres listener disconnected; reconnecting, watchers catch up from the table meanwhile");
    await from.end().catch(() => {});
    await connect(1);
  };
  const catchUp = startCatchUp({ db, bus, catchUpMs: options.catchUpMs, active: () => !closed });
  const resync = catchUp.resync;
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
          // Lost on failure (said once per batch): the other replicas' periodic check reads what the hints announced.
          await notifyMany(db, batch).catch((error: unknown) =>
            logger.warn("relay: a batch of notifications was not sent; other replicas catch up from the table", {
              notifications: batch.length,
              error,
            }),
          );
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
    const payloads = pack(
      mine.map((q) => q.item),
      MAX_PAYLOAD_BYTES,
    );
    for (const payload of payloads) outbox.push([DELTAS_CHANNEL, `${origin}|${payload}`]);
  };
  const flush = async () => {
    timer = undefined;
    moveDeltas();
    await send();
  };

  await connect();
  return {
    hint(sessionId, seq, events) {
      if (DIE_BEFORE_HINT) process.kill(process.pid, "SIGKILL");
      // This session's queued deltas go first: readers must get a delta before the snapshot
      // that supersedes it (a late one would be dropped as already included).
      moveDeltas(sessionId);
      const json = hintEventsJson(events, seq, MAX_HINT_EVENTS_BYTES);
      outbox.push([EVENTS_CHANNEL, `${origin}|${sessionId}|${seq}${json === undefined ? "" : `|${json}`}`]);
      void send();
    },
    delta(event) {
      if (event.kind.case !== "partDelta") return;
      const d = event.kind.value;
      let offset = d.offset;
      for (const piece of split(d.delta, MAX_DELTA_CHARS, MAX_DELTA_JSON_BYTES)) {
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
    stats: () => ({ kind: "postgres", connected: client !== undefined, messages, hints, lastHintAt, catchUp: catchUp.stats() }),
    async close() {
      closed = true;
      if (timer) clearTimeout(timer);
      catchUp.stop();
      await flush();
      await client?.end().catch(() => {});
    },
  };
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
