import { randomUUID } from "node:crypto";
import { create, toJson } from "@bufbuild/protobuf";
import { connect, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import type { Kysely } from "kysely";
import { SessionEventSchema } from "../../gen/ledger/v1/event_pb.js";
import { logger } from "../observe/log.js";
import { sessionCache } from "../storage/session-cache.js";
import type { DB } from "../storage/schema.js";
import type { BusItem, EventBus } from "./bus.js";
import type { RelayStats } from "./relay-stats.js";
import { hintEventsJson, pack, publishCommitted, publishDeleted, split, startCatchUp, type Relay } from "./relay.js";

/** Subjects of a session are `ledger.v1.session.<session_id>.<kind>`; see {@link sessionSubject}. */
export const SUBJECT_PREFIX = "ledger.v1.session";
/** Bytes of event JSON a commit hint may carry; larger writes send the hint alone (NATS allows 1 MiB by default). */
export const MAX_NATS_HINT_EVENTS_BYTES = 64 * 1024;
/** Largest batch of deltas in one message (bytes of JSON). */
const MAX_DELTAS_BYTES = 256 * 1024;
/** Longest delta text (code points) sent in one piece; longer ones are split. */
const MAX_DELTA_CHARS = 16 * 1024;
/** Deltas are sent in batches at most this often (ms): never one message per token. */
const DELTA_FLUSH_MS = 15;
/** How long `requestAbort` waits for the server to confirm it has the request (ms). */
const ABORT_FLUSH_MS = 1000;
/**
 * How often the client pings its NATS server (ms); after `MAX_PINGS_OUT` unanswered pings it
 * drops the connection and reconnects to another server. A node that hangs or is cut off
 * without a TCP reset is thus given up within 9 s (the client's defaults, 2 min and 2, took
 * 4 to 6 min, during which the relay received nothing).
 */
const PING_INTERVAL_MS = 3000;
const MAX_PINGS_OUT = 2;
/** Session ids usable as one subject token (NATS tokens may not hold `.`, `*`, `>` or spaces). */
const SUBJECT_TOKEN = /^[A-Za-z0-9_-]+$/;

/**
 * The subject of one kind of a session's messages. Payloads start with the sender's origin id:
 * - `events`: commit hints, `origin|seq`, or `origin|seq|[events as proto JSON]` when the
 *   committed events' JSON fits `MAX_NATS_HINT_EVENTS_BYTES`;
 * - `deltas`: batched live deltas, `origin|[[seq, message_id, part_id, field, delta, offset], ...]`
 *   (seq, offset as decimal strings);
 * - `control`: `origin|abort` (abort the session's loop where it runs) and
 *   `origin|deleted|{session_deleted event as proto JSON}`.
 */
export function sessionSubject(sessionId: string, kind: "events" | "deltas" | "control"): string {
  return `${SUBJECT_PREFIX}.${sessionId}.${kind}`;
}

/** Where the NATS relay connects (`bus.nats` in ledger.json, or `LEDGER_NATS_URL`). */
export interface NatsRelayOptions {
  /** NATS server URLs, e.g. `["nats://127.0.0.1:4222"]`; the client picks one and fails over to the others. */
  servers: string[];
  /** Connection name shown by the NATS server's monitoring (default "session-ledger"). */
  name?: string;
  db: Kysely<DB>;
  bus: EventBus;
  /** The catch-up interval (ms), `events.catch_up_ms`; 0 turns the periodic check off. */
  catchUpMs?: number;
}

/**
 * What a NATS relay has seen, for tests, `/metrics` and health: the common `RelayStats` (kind
 * `"nats"`; `connected` to a NATS server now; `messages` delivered to its subscriptions since it
 * started, its own included, which it skips) and its subscriptions.
 */
export interface NatsRelayStats extends RelayStats {
  kind: "nats";
  /** Sessions whose subjects this relay is subscribed to now. */
  subscribed: string[];
}

/** A relay on NATS; see {@link startNatsRelay}. */
export interface NatsRelay extends Relay {
  /** Counters and state of the connection. */
  stats(): NatsRelayStats;
  /**
   * Sends the queued deltas and resolves once the NATS server has processed everything this
   * relay sent so far, subscriptions and unsubscriptions included (a round trip); resolves at
   * once while disconnected.
   */
  flush(): Promise<void>;
}

/**
 * Starts the relay on NATS (docs/streams-and-replicas.md "Fan-out on NATS"): the same contract
 * as `startPgRelay`, with one subject per session and kind (`sessionSubject`) instead of three
 * Postgres channels for everything.
 *
 * Interest-based: it subscribes to `ledger.v1.session.<id>.*` (one subscription per session)
 * while the session is watched on the bus here, i.e. while this replica has a `WatchSession` or
 * `PromptStream` feed of it or runs (or waits to run) its agent loop or a `Shell` command, and
 * unsubscribes when the last of them ends (`EventBus.onWatch`). So a replica receives nothing of
 * the sessions it does not serve; an abort requested on any replica reaches the one running the
 * loop (its session is watched there), and a deletion notice reaches every replica following
 * the session. Its own messages are skipped by origin id (and not echoed back by the server).
 * Another replica's commit hint evicts the session from `SessionCache` only where the session is
 * watched; elsewhere a stale cache entry is refused by the row-version check of the next write.
 * A subscription takes effect once the server has it (`flush()` waits for that): a message sent
 * in between (a hint right after a watcher's replay read the table, an abort right after a loop
 * started) is missed like a lost one, and the catch-up check covers the hint; such an abort is lost
 * and the `Abort` call reports that the session still runs.
 *
 * Postgres stays the source of truth: the periodic catch-up check (`startCatchUp`, every
 * `catchUpMs`) runs whether NATS is up or not, so a lost message, a NATS node going away or
 * NATS being down delays a watcher by at most about one interval and never loses an event (a
 * missed delta is covered by the next snapshot). When NATS is unreachable at start the relay
 * starts anyway (one warning on the log) and keeps connecting in the background (100 ms
 * doubling to 5 s); once connected, and after every reconnect, it subscribes to the watched
 * sessions and resyncs them from the table. A server that stops answering without closing the
 * connection (hung, partitioned) is given up after two unanswered pings 3 s apart (6 to 9 s).
 * While disconnected, what it sends is buffered by the client or lost; `requestAbort` then
 * reaches no other replica. Resolves after the first connection attempt; never rejects for an
 * unreachable server.
 */
export async function startNatsRelay(options: NatsRelayOptions): Promise<NatsRelay> {
  const origin = randomUUID().slice(0, 8);
  const { db, bus } = options;
  const cache = sessionCache(db);
  const subscriptions = new Map<string, Subscription>();
  let nc: NatsConnection | undefined;
  /** Connected now (false while the client reconnects). */
  let online = false;
  let closed = false;
  let messages = 0;
  let hints = 0;
  let lastHintAt: number | undefined;
  let abortHandler: ((sessionId: string) => void) | undefined;
  let retry: NodeJS.Timeout | undefined;
  let queue = new Map<string, string[]>();
  let timer: NodeJS.Timeout | undefined;

  const catchUp = startCatchUp({ db, bus, catchUpMs: options.catchUpMs, active: () => !closed });

  const receive = (sessionId: string, msg: Msg) => {
    messages++;
    const payload = msg.string();
    const bar = payload.indexOf("|");
    if (bar < 0 || payload.slice(0, bar) === origin) return;
    const body = payload.slice(bar + 1);
    const kind = msg.subject.slice(msg.subject.lastIndexOf(".") + 1);
    if (kind === "events") {
      // seq, then optionally |[events]: the JSON may hold "|" itself.
      const second = body.indexOf("|");
      const seq = BigInt(second < 0 ? body : body.slice(0, second));
      hints++;
      lastHintAt = Date.now();
      publishCommitted(bus, cache, sessionId, seq, second < 0 ? undefined : body.slice(second + 1));
    } else if (kind === "deltas") {
      const items: BusItem[] = (JSON.parse(body) as Array<[string, string, string, string, string, string]>).map(
        ([seq, messageId, partId, field, delta, offset]) =>
          create(SessionEventSchema, {
            sessionId,
            seq: BigInt(seq),
            kind: { case: "partDelta", value: { messageId, partId, field, delta, offset: BigInt(offset) } },
          }),
      );
      bus.publish(items);
    } else if (kind === "control") {
      if (body === "abort") abortHandler?.(sessionId);
      else if (body.startsWith("deleted|")) publishDeleted(bus, cache, body.slice("deleted|".length));
    }
  };

  const watch = (sessionId: string) => {
    if (!nc || subscriptions.has(sessionId) || !SUBJECT_TOKEN.test(sessionId)) return;
    try {
      const subscription = nc.subscribe(`${SUBJECT_PREFIX}.${sessionId}.*`, {
        callback: (error, msg) => {
          if (error) return;
          try {
            receive(sessionId, msg);
          } catch (e) {
            // A malformed payload (another version, a stray publisher) must not take the process down.
            logger.warn("relay: ignored a malformed NATS message", { subject: msg.subject, error: e });
          }
        },
      });
      subscriptions.set(sessionId, subscription);
    } catch (error) {
      // Closing or draining: the catch-up check still covers the session.
      logger.warn("relay: could not subscribe", { session_id: sessionId, error });
    }
  };
  const unwatch = (sessionId: string) => {
    subscriptions.get(sessionId)?.unsubscribe();
    subscriptions.delete(sessionId);
  };
  const stopWatching = bus.onWatch((sessionId, watched) => (watched ? watch(sessionId) : unwatch(sessionId)));

  const follow = async (connection: NatsConnection) => {
    for await (const status of connection.status()) {
      if (status.type === "disconnect") {
        online = false;
        logger.warn("relay: NATS disconnected; reconnecting", { server: status.server });
      }
      if (status.type === "reconnect") {
        online = true;
        logger.info("relay: NATS reconnected", { server: status.server });
        // Messages sent while we were away are lost: read what the watched sessions missed.
        void catchUp.resync().catch(() => {});
      }
    }
  };
  const open = async (attempt: number): Promise<void> => {
    retry = undefined;
    if (closed) return;
    let connection: NatsConnection;
    try {
      connection = await connect({
        servers: options.servers,
        name: options.name ?? "session-ledger",
        noEcho: true,
        maxReconnectAttempts: -1,
        reconnectTimeWait: 250,
        reconnectJitter: 100,
        timeout: 2000,
        pingInterval: PING_INTERVAL_MS,
        maxPingOut: MAX_PINGS_OUT,
      });
    } catch (error) {
      if (attempt === 0) {
        logger.warn("relay: NATS unreachable; retrying in the background, watchers catch up from the table meanwhile", {
          servers: options.servers.join(","),
          error: error instanceof Error ? error.message : String(error),
        });
      }
      if (!closed) retry = setTimeout(() => void open(attempt + 1), Math.min(100 * 2 ** attempt, 5000));
      return;
    }
    if (closed) {
      await connection.close().catch(() => {});
      return;
    }
    nc = connection;
    online = true;
    void follow(connection);
    void connection.closed().then(() => {
      // Closed by the server or an error (not by us): start over.
      if (closed || nc !== connection) return;
      nc = undefined;
      online = false;
      subscriptions.clear();
      void open(1);
    });
    for (const sessionId of bus.watchedSessions()) watch(sessionId);
    if (attempt > 0) {
      logger.info("relay: NATS connected", { server: connection.getServer() });
      await catchUp.resync().catch(() => {});
    }
  };

  const publish = (subject: string, payload: string) => {
    if (!nc || nc.isClosed()) return;
    try {
      nc.publish(subject, payload);
    } catch {
      // Lost: the other replicas' catch-up check reads what it announced.
    }
  };
  const sendDeltas = (sessionId: string) => {
    const items = queue.get(sessionId);
    if (!items) return;
    queue.delete(sessionId);
    for (const batch of pack(items, MAX_DELTAS_BYTES)) publish(sessionSubject(sessionId, "deltas"), `${origin}|${batch}`);
  };
  const flush = () => {
    timer = undefined;
    const sessions = [...queue.keys()];
    for (const sessionId of sessions) sendDeltas(sessionId);
    queue = new Map();
  };

  await open(0);
  return {
    hint(sessionId, seq, events) {
      if (!SUBJECT_TOKEN.test(sessionId)) return;
      // This session's queued deltas go first: readers must get a delta before the snapshot
      // that supersedes it (a late one would be dropped as already included).
      sendDeltas(sessionId);
      const json = hintEventsJson(events, seq, MAX_NATS_HINT_EVENTS_BYTES);
      publish(sessionSubject(sessionId, "events"), `${origin}|${seq}${json === undefined ? "" : `|${json}`}`);
    },
    delta(event) {
      if (event.kind.case !== "partDelta" || !SUBJECT_TOKEN.test(event.sessionId)) return;
      const d = event.kind.value;
      let items = queue.get(event.sessionId);
      if (!items) queue.set(event.sessionId, (items = []));
      let offset = d.offset;
      for (const piece of split(d.delta, MAX_DELTA_CHARS)) {
        items.push(JSON.stringify([String(event.seq), d.messageId, d.partId, d.field, piece.text, String(offset)]));
        offset += BigInt(piece.length);
      }
      timer ??= setTimeout(flush, DELTA_FLUSH_MS);
    },
    deleted(events) {
      for (const event of events) {
        if (!SUBJECT_TOKEN.test(event.sessionId)) continue;
        publish(sessionSubject(event.sessionId, "control"), `${origin}|deleted|${JSON.stringify(toJson(SessionEventSchema, event))}`);
      }
    },
    async requestAbort(sessionId) {
      if (!nc || nc.isClosed() || !SUBJECT_TOKEN.test(sessionId)) {
        logger.warn("relay: abort not sent to other replicas, NATS is unreachable", { session_id: sessionId });
        return;
      }
      publish(sessionSubject(sessionId, "control"), `${origin}|abort`);
      let wait: NodeJS.Timeout | undefined;
      await Promise.race([nc.flush(), new Promise((resolve) => (wait = setTimeout(resolve, ABORT_FLUSH_MS)))]).catch(() => {});
      clearTimeout(wait);
    },
    onAbort(handler) {
      abortHandler = handler;
    },
    async flush() {
      if (timer) clearTimeout(timer);
      flush();
      if (nc && !nc.isClosed()) await nc.flush();
    },
    stats: () => ({
      kind: "nats",
      connected: online,
      messages,
      hints,
      lastHintAt,
      catchUp: catchUp.stats(),
      subscribed: [...subscriptions.keys()],
    }),
    async close() {
      if (timer) clearTimeout(timer);
      flush();
      closed = true;
      if (retry) clearTimeout(retry);
      catchUp.stop();
      stopWatching();
      const connection = nc;
      nc = undefined;
      online = false;
      subscriptions.clear();
      if (!connection) return;
      // drain: pending publishes go out before the connection closes; a connection that is
      // reconnecting (NATS down) would wait for the server, so it is closed after 2 s.
      let wait: NodeJS.Timeout | undefined;
      await Promise.race([connection.drain(), new Promise((resolve) => (wait = setTimeout(resolve, 2000)))]).catch(() => {});
      clearTimeout(wait);
      if (!connection.isClosed()) await connection.close().catch(() => {});
    },
  };
}
