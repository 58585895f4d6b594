import { clone, create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import type { Kysely } from "kysely";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { DEFAULT_LIMITS, type Limits } from "../config/limits.js";
import { CursorOutOfRangeError, WatcherTooSlowError } from "../errors.js";
import { readEventPage, readEventPageWithBounds, type EventPage, type PageLimits } from "../storage/event-store.js";
import type { DB } from "../storage/schema.js";
import { getLogBounds, type LogBounds } from "../storage/session-store.js";
import { isHint, type EventBus } from "./bus.js";
import { subscribe, type BufferCaps } from "./subscription.js";
import { WriteSlots, type ReleaseSlot } from "./write-slots.js";

/**
 * One query's worth while replaying or filling a gap: at most 500 events, and no further event
 * once 256 KiB of their JSON text is read (the first one comes whatever its size), so a page
 * holds less than 256 KiB plus one event.
 *
 * Measured (80 stored prompts with a 1,000,000-char text part, 322 events, 80 MB of JSON;
 * server `--max-old-space-size=384`): with pages of 500 rows, the first query of each
 * `WatchSession{after_seq: 0}` read the whole log, about 80 MB of V8 heap per watcher (the
 * rows' parsed JSON) held until its client had read the last event; 8 watchers that read
 * nothing took the server from 282 to 890 MB RSS (4 GB heap) and, with 384 MB, killed it in
 * `JSON.parse` within seconds whether the clients read or not. With 1 MiB pages a page still held two of these events, hence 256
 * KiB. Events are taken off the page as they are yielded, and connect-node writes each one and
 * waits for `drain` before asking for the next, so the next page is read only as fast as the
 * client reads: a watcher holds one page and the message being written (the event is shared,
 * see `shared`; so are its serialized bytes in a binary codec, src/server/shared-frames.ts).
 * Large events are written in one of the process's `LARGE_WRITES_AT_ONCE` slots.
 */
export const REPLAY_PAGE: PageLimits = { rows: 500, bytes: 256 << 10 };

/**
 * A session's events after `afterSeq`, in `seq` order, without gaps or duplicates: first the
 * stored ones (replayed from `session_event` in pages bounded by `REPLAY_PAGE`, one page read
 * at a time as the reader takes events), then live ones. It subscribes to the bus
 * before reading the table, so nothing committed in between is missed; a live event ahead of the
 * last seq yielded, or a hint from another replica, makes it read the missing rows from the
 * table (they are committed: writers of a session serialize on its row and publish after
 * commit). Live `part_delta` events are yielded once the snapshot they extend has been yielded,
 * and dropped when a newer snapshot of that part already was (it contains them).
 * The first page is read with the log's bounds in one statement and given to
 * `options.checkBounds` (undefined: no such session), which may throw to end the feed before
 * anything is yielded (`WatchSession`'s NOT_FOUND and cursor checks).
 * Ends after yielding a `session_deleted` event (published by DeleteSession here, by the relay
 * for a deletion on another replica or one found missing after a listener reconnect, or made
 * here when the session was already gone once subscribed); its `seq` is one past the last
 * event yielded (whatever seq it was published with). Ends when `signal` aborts. Throws
 * `CursorOutOfRangeError` (CURSOR_EXPIRED) when retention removed events the reader has not
 * seen yet, `WatcherTooSlowError` (WATCHER_TOO_SLOW, naming the last seq yielded) when the live
 * events waiting for the reader passed `options.caps` (default: the default limits'
 * `watch_buffer_events` and `watch_buffer_bytes`; see `subscribe`), and what the database throws.
 */
export async function* followSession(
  deps: { db: Kysely<DB>; bus: EventBus },
  sessionId: string,
  afterSeq: bigint,
  signal?: AbortSignal,
  options: { checkBounds?: (bounds: LogBounds | undefined) => void; caps?: BufferCaps } = {},
): AsyncGenerator<SessionEvent> {
  const live = subscribe(deps.bus, sessionId, signal, options.caps ?? bufferCaps(DEFAULT_LIMITS));
  let last = afterSeq;
  // Checked after every event yielded (the reader came back) and when the live feed ends.
  const tooSlow = () => {
    const overflow = live.overflow();
    if (overflow) throw new WatcherTooSlowError(sessionId, last, overflow.limit, overflow.max);
  };
  const snapshots = new Map<string, bigint>();
  // The first page comes with the log's bounds, in the same statement (one round trip to start).
  let first = true;
  let missing = false;
  async function* catchUp(): AsyncGenerator<SessionEvent> {
    // After a large event the next is likely large too: its write slot is taken before its page
    // is read, so a stream waiting for a slot holds no page (32 streams: 32 MB less).
    let ahead: ReleaseSlot | undefined;
    let largeLast = false;
    try {
      for (;;) {
        // A replay stops when the feed's signal fires (the client left, its deadline, the server
        // draining), not after the backlog: the caller then ends the stream with its cursor.
        if (signal?.aborted) return;
        if (largeLast && !(ahead = await largeWrites.acquire(signal))) return;
        let page: EventPage;
        const turn = readTurn(sessionId, last);
        try {
          // A replay's first page, or the page after a large event, is read after the reads of
          // this session that other feeds started before: the large events they read and still
          // hold are named as known, and not read again. Other reads (a live feed filling a gap
          // of small events after a hint, as many watchers do at once) do not wait.
          if (first || largeLast) {
            await untilAborted(turn.earlier, signal);
            if (signal?.aborted) return;
          }
          const known = heldAfter(sessionId, last);
          if (first) {
            first = false;
            const bounded = await readEventPageWithBounds(deps.db, sessionId, querySeq(last), REPLAY_PAGE, known);
            options.checkBounds?.(bounded?.bounds);
            missing = !bounded;
            page = bounded ?? { events: [], sizes: [], more: false };
          } else page = await readEventPage(deps.db, sessionId, querySeq(last), REPLAY_PAGE, known);
          known.clear();
          for (let i = 0; i < page.events.length; i++) if (page.sizes[i]! >= SHARED_EVENT_BYTES) page.events[i] = shared(page.events[i]!);
        } finally {
          turn.done();
        }
        const { events, sizes, more } = page;
        // Retention may have deleted what comes next since the reader started: never skip it silently.
        if (events[0] && events[0].seq !== last + 1n) await assertRetained(deps.db, sessionId, last);
        // Taken off the page as they go: a page holds only what is still to be written.
        for (let event = events.shift(), size = sizes.shift() ?? 0; event; event = events.shift(), size = sizes.shift() ?? 0) {
          // A large event is written in one of the process's write slots (held until the stream
          // asks for the next event, i.e. the write drained, or LARGE_WRITE_HOLD_MS).
          largeLast = size >= SHARED_EVENT_BYTES;
          let release: ReleaseSlot | undefined;
          if (largeLast) {
            release = ahead ?? (await largeWrites.acquire(signal));
            ahead = undefined;
            if (!release) return;
          } else {
            ahead?.();
            ahead = undefined;
          }
          last = event.seq;
          if (event.kind.case === "partUpdated" && event.kind.value.part) snapshots.set(event.kind.value.part.id, event.seq);
          try {
            yield event;
          } finally {
            release?.();
          }
          tooSlow();
          if (signal?.aborted) return;
        }
        ahead?.();
        ahead = undefined;
        if (!more) return;
      }
    } finally {
      ahead?.();
    }
  }
  try {
    yield* catchUp();
    // The session may have been deleted before we subscribed (its session_deleted went by
    // unseen): the first read, made after subscribing, found no row.
    if (missing) {
      yield deleted(sessionId, last);
      return;
    }
    for await (const item of live) {
      if (isHint(item)) {
        if (item.seq > last) yield* catchUp();
        continue;
      }
      if (item.kind.case === "partDelta") {
        if (item.seq > last) yield* catchUp();
        // The snapshot it extends was not yielded (the feed is stopping: the catch-up returned
        // early): neither is the delta, which a reader could not apply, and whose seq would look
        // delivered (a trial, 2026-12-04: a drained stream's after_seq skipped that snapshot).
        if (item.seq > last) {
          if (signal?.aborted) return;
          continue;
        }
        if (item.seq >= (snapshots.get(item.kind.value.partId) ?? 0n)) yield item;
        continue;
      }
      // The log goes with a deleted session: there is nothing left to fill a gap from.
      // Numbered for this reader, one past what it got: a reader behind the deletion (whose
      // rows went with it) saw no gap before (a trial, 2026-12-04: 37 after 35).
      if (item.kind.case === "sessionDeleted") {
        yield item.seq === last + 1n ? item : { ...clone(SessionEventSchema, item), seq: last + 1n };
        return;
      }
      if (item.seq <= last) continue;
      if (item.seq > last + 1n) {
        yield* catchUp();
        continue;
      }
      last = item.seq;
      if (item.kind.case === "partUpdated" && item.kind.value.part) snapshots.set(item.kind.value.part.id, item.seq);
      yield item;
    }
    tooSlow();
  } finally {
    live.close();
  }
}

/** The stream buffer caps of `limits`, as `followSession` and `subscribe` take them. */
export function bufferCaps(limits: Pick<Limits, "watch_buffer_events" | "watch_buffer_bytes">): BufferCaps {
  return { events: limits.watch_buffer_events, bytes: limits.watch_buffer_bytes };
}

/**
 * Stored events of at least this many bytes of JSON are shared between the feeds of this
 * process ({@link shared}), and replayed in one of its {@link LARGE_WRITES_AT_ONCE} write slots;
 * smaller ones cost less to hold twice than to share.
 */
export const SHARED_EVENT_BYTES = 64 << 10;

/**
 * Most large stored events (≥ {@link SHARED_EVENT_BYTES}) that the replays of this process write
 * at once. Measured (docs/streams-and-replicas.md "Replay with bounded memory"): 32 replays of 80
 * stored 1 MB prompts, all reading, took RSS up by 192 MB, about 6 MB per stream writing. With
 * 4, 8 readers replay as fast as without slots (16 s against 18 s here: the CPU is the bound).
 * Since binary streams share each event's serialized bytes (src/server/shared-frames.ts), a slot
 * mostly bounds the large pages read at once and the JSON streams' writes (2 slots: the same peaks).
 */
export const LARGE_WRITES_AT_ONCE = 4;

/**
 * The longest one large write keeps its slot, ms: a client that stops reading (or reads slowly)
 * holds its slot this long, then lets the next stream write, while its own write still waits
 * for it (the memory that write holds is its own: one message, as for any stalled stream).
 * A local reader's 1 MB write drains in a few ms. Measured with 32 readers on a loaded 2-vCPU
 * machine, whose reads then took longer: 250 ms let more writes overlap (+64 MB on Postgres,
 * +52 MB on PGlite), 1000 ms kept them within the goal (+55, +43).
 */
export const LARGE_WRITE_HOLD_MS = 1000;

const largeWrites = new WriteSlots(LARGE_WRITES_AT_ONCE, LARGE_WRITE_HOLD_MS);

/** The large stored events some feed of this process holds, by `session_id`, then `seq`. */
const held = new Map<string, Map<bigint, WeakRef<SessionEvent>>>();
const forget = new FinalizationRegistry<{ sessionId: string; seq: bigint }>(({ sessionId, seq }) => {
  const events = held.get(sessionId);
  if (events?.get(seq)?.deref() !== undefined) return;
  events?.delete(seq);
  if (events?.size === 0) held.delete(sessionId);
});

/** The page reads in flight of each session, by the feeds of this process: what each read after, and when it is over. */
const reading = new Map<string, Set<{ after: bigint; over: Promise<void> }>>();

/**
 * A feed's turn to read the page of `sessionId` after seq `after`: `earlier` settles once the
 * reads of that session in flight that may hold some of the same events (after a seq less than a
 * page's rows away) are over, their large events then held, so `heldAfter` names them; `done()`
 * ends this read, successful or not. The reads that wait (a replay's first page, the page after a
 * large event) thus go one after the other where they meet: feeds replaying the same log in step
 * (clients that connected together, all after seq 0) read each large event once instead of once
 * each, and a read far from them in the log does not wait. A turn lasts one query, never a
 * client's read. Measured (8 `WatchSession` replays of 80 stored 1 MB prompts on a just-started
 * server, 2026-12-04): without turns, 240 large rows read and decoded for the 80 events; with
 * them, 80.
 */
function readTurn(sessionId: string, after: bigint): { earlier: Promise<unknown>; done(): void } {
  let turns = reading.get(sessionId);
  if (!turns) reading.set(sessionId, (turns = new Set()));
  const span = BigInt(REPLAY_PAGE.rows);
  const earlier = Promise.all([...turns].filter((t) => t.after > after - span && t.after < after + span).map((t) => t.over));
  let end!: () => void;
  const turn = { after, over: new Promise<void>((resolve) => (end = resolve)) };
  turns.add(turn);
  return {
    earlier,
    done() {
      end();
      turns.delete(turn);
      if (turns.size === 0 && reading.get(sessionId) === turns) reading.delete(sessionId);
    },
  };
}

/** Settles when `promise` does, or as soon as `signal` aborts (never rejects). */
async function untilAborted(promise: Promise<unknown>, signal: AbortSignal | undefined): Promise<void> {
  if (!signal) return void (await promise);
  if (signal.aborted) return;
  let stop!: () => void;
  const aborted = new Promise<void>((resolve) => (stop = resolve));
  signal.addEventListener("abort", stop, { once: true });
  try {
    await Promise.race([promise, aborted]);
  } finally {
    signal.removeEventListener("abort", stop);
  }
}

/** At most this many held events are named to one page query (a page holds at most 4 shared events: 256 KiB / 64 KiB). */
const KNOWN_PER_PAGE = 8;

/** The largest seq a query is given: a cursor beyond any log (up to 2^64 − 1 from a client) reads nothing after it. */
const MAX_QUERY_SEQ = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * `seq` as the event store takes it (a number): a client's cursor above 2^53 − 1 is read as that,
 * after which no session has events, so the page is empty and `checkBounds` answers CURSOR_AHEAD
 * (a bigint beyond Postgres' `bigint` was an INTERNAL "out of range" before).
 */
function querySeq(seq: bigint): number {
  return Number(seq > MAX_QUERY_SEQ ? MAX_QUERY_SEQ : seq);
}

/**
 * The held events of `sessionId` that the next page after `afterSeq` may hold (the first
 * `KNOWN_PER_PAGE` within `REPLAY_PAGE.rows` seqs), by seq: strong references for the time of
 * the read, so that what the query skips is still there to use. Measured (8 `WatchSession`
 * replays of 80 stored 1 MB prompts at once, `--cpu-prof`, 2026-12-02): each replay read and
 * decoded every event itself; 7.7 s of the server's 26 s of CPU went to the rows' UTF-8 text
 * and `JSON.parse`.
 */
function heldAfter(sessionId: string, afterSeq: bigint): Map<bigint, SessionEvent> {
  const found: [bigint, SessionEvent][] = [];
  const end = afterSeq + BigInt(REPLAY_PAGE.rows);
  for (const [seq, ref] of held.get(sessionId) ?? []) {
    const event = seq > afterSeq && seq <= end ? ref.deref() : undefined;
    if (event) found.push([seq, event]);
  }
  found.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return new Map(found.slice(0, KNOWN_PER_PAGE));
}

/**
 * The one copy of a stored event that the feeds of this process share: `event` itself, or an
 * equal one (same `session_id` and `seq`: a stored event never changes) that another feed read
 * earlier and still holds. Events are immutable once read (the bus already hands the same live
 * event object to every subscriber), so N watchers replaying the same large events hold each
 * once, not N times. Measured (docs/streams-and-replicas.md "Replay with bounded memory"): 32
 * `WatchSession` streams stalled on the same 1 MB event added 75–84 MB to the server's RSS, each
 * keeping its own decoded copy; shared, +53 MB: what was left was connect-node's two copies per
 * stream (the serialized message and its gRPC frame), which src/server/shared-frames.ts removes
 * for binary codecs (+7 to +12 MB, 2026-12-04).
 */
function shared(event: SessionEvent): SessionEvent {
  let events = held.get(event.sessionId);
  const known = events?.get(event.seq)?.deref();
  if (known) return known;
  if (!events) held.set(event.sessionId, (events = new Map()));
  events.set(event.seq, new WeakRef(event));
  forget.register(event, { sessionId: event.sessionId, seq: event.seq });
  return event;
}

/**
 * Whether `event` is the copy of a stored event that the feeds of this process share (a replayed
 * event of at least {@link SHARED_EVENT_BYTES} of stored JSON, see `shared`): the same object for
 * as long as some feed holds it, so what is derived from it (src/server/shared-frames.ts: its
 * serialized response) can be shared too.
 */
export function isSharedEvent(event: SessionEvent): boolean {
  return held.get(event.sessionId)?.get(event.seq)?.deref() === event;
}

/** A `session_deleted` event for a session found missing: only its id is known. */
function deleted(sessionId: string, last: bigint): SessionEvent {
  return create(SessionEventSchema, {
    sessionId,
    seq: last + 1n,
    time: timestampNow(),
    kind: { case: "sessionDeleted", value: { session: { id: sessionId } } },
  });
}

/** Throws CURSOR_EXPIRED when events after `last` were pruned. */
async function assertRetained(db: Kysely<DB>, sessionId: string, last: bigint): Promise<void> {
  const bounds = await getLogBounds(db, sessionId);
  if (!bounds) return;
  if (bounds.prunedSeq > last) throw new CursorOutOfRangeError("CURSOR_EXPIRED", last, bounds);
}
