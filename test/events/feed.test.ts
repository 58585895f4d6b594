import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { followSession, SHARED_EVENT_BYTES } from "../../src/events/feed.js";
import { watchSession } from "../../src/ledger/watch.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { TEST_ENGINE } from "../support/db.js";
import { lastSeq } from "../support/stored.js";

// Issue 11, item 3: feeds replaying the same large stored events hold one copy of each between
// them (a stalled WatchSession keeps the event it is blocked on), small ones are read per feed.

let t: TestLedger;
beforeAll(async () => {
  t = await startTestLedger();
});
afterAll(async () => {
  await t.close();
});

/** The first `count` events of `sessionId`'s feed from seq 0, then ends the feed. */
async function firstEvents(sessionId: string, count: number, db = t.ledger.deps.db): Promise<SessionEvent[]> {
  const stop = new AbortController();
  const events: SessionEvent[] = [];
  for await (const event of followSession({ ...t.ledger.deps, db }, sessionId, 0n, stop.signal)) {
    events.push(event);
    if (events.length === count) break;
  }
  stop.abort();
  return events;
}

describe("followSession replaying stored events", () => {
  it("two feeds get the same object for an event of at least SHARED_EVENT_BYTES, equal but separate ones for small events", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const big = "x".repeat(SHARED_EVENT_BYTES + 1000);
    await t.client.prompt({ sessionId, noReply: true, parts: [text("small"), text(big)] });
    const end = await lastSeq(t.ledger.database.db, sessionId);

    const [a, b] = await Promise.all([firstEvents(sessionId, end), firstEvents(sessionId, end)]);
    expect(a.map((e) => e.seq)).toEqual(Array.from({ length: end }, (_, i) => BigInt(i + 1)));
    expect(b).toEqual(a);
    const isBig = (e: SessionEvent) =>
      e.kind.case === "partUpdated" && e.kind.value.part?.kind.case === "text" && e.kind.value.part.kind.value.text === big;
    const i = a.findIndex(isBig);
    expect(i).toBeGreaterThan(0);
    expect(b[i]).toBe(a[i]);
    for (let j = 0; j < a.length; j++) if (j !== i) expect(b[j]).not.toBe(a[j]);
  });
});

describe("followSession reading a page", () => {
  it("does not read again the data of a large event another feed holds: it uses that feed's copy", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const big = "y".repeat(SHARED_EVENT_BYTES + 1000);
    await t.client.prompt({ sessionId, noReply: true, parts: [text(big)] });
    const end = await lastSeq(t.ledger.database.db, sessionId);
    const held = await firstEvents(sessionId, end);
    const i = held.findIndex((e) => e.kind.case === "partUpdated" && e.kind.value.part?.kind.case === "text");
    const seq = Number(held[i]!.seq);
    // Spoil the stored row behind the feeds' back (a stored event never changes otherwise): a
    // feed that read it again would fail to decode it (a number where the text goes).
    await sql`update session_event set data = jsonb_set(data, '{partUpdated,part,text,text}', '5') where session_id = ${sessionId} and seq = ${seq}`.execute(
      t.ledger.database.db,
    );
    const again = await firstEvents(sessionId, end);
    expect(again.map((e) => e.seq)).toEqual(held.map((e) => e.seq));
    expect(again[i]).toBe(held[i]);
  });
});

describe("followSession: feeds replaying together", () => {
  it("read each large event's data once between them: 8 feeds from seq 0 started at once", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    for (let i = 0; i < 5; i++)
      await t.client.prompt({ sessionId, noReply: true, parts: [text(`${i}`.repeat(SHARED_EVENT_BYTES + 1000))] });
    const end = await lastSeq(t.ledger.database.db, sessionId);
    // The rows of large events that came back with their data, counted where the database answers.
    let decoded = 0;
    const counting = t.ledger.deps.db.withPlugin({
      transformQuery: (args) => args.node,
      transformResult: async (args) => {
        for (const row of args.result.rows as Array<{ data?: unknown; bytes?: unknown }>)
          if (row.data != null && Number(row.bytes) >= SHARED_EVENT_BYTES) decoded++;
        return args.result;
      },
    });
    const feeds = await Promise.all(Array.from({ length: 8 }, () => firstEvents(sessionId, end, counting)));
    for (const events of feeds) expect(events.map((e) => e.seq)).toEqual(feeds[0]!.map((e) => e.seq));
    expect(feeds[0]!.map((e) => Number(e.seq))).toEqual(Array.from({ length: end }, (_, i) => i + 1));
    expect(decoded).toBe(5);
  });
});

describe("followSession: a read turn is always given back", () => {
  it("a feed whose first page is refused (checkBounds throws) does not hold up the next feed of the session", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    await t.client.prompt({ sessionId, noReply: true, parts: [text("z".repeat(SHARED_EVENT_BYTES + 1000))] });
    const end = await lastSeq(t.ledger.database.db, sessionId);
    const refused = (async () => {
      for await (const _ of followSession(t.ledger.deps, sessionId, 0n, undefined, {
        checkBounds: () => {
          throw new Error("refused");
        },
      }));
    })();
    await expect(refused).rejects.toThrow("refused");
    expect((await firstEvents(sessionId, end)).map((e) => Number(e.seq))).toEqual(Array.from({ length: end }, (_, i) => i + 1));
  });

  // Postgres only: a table lock in another transaction holds the first feed's read (PGlite has one connection).
  it.skipIf(TEST_ENGINE !== "postgres")("a feed whose signal fires while it waits for another feed's read stops at once", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    await t.client.prompt({ sessionId, noReply: true, parts: [text("w".repeat(SHARED_EVENT_BYTES + 1000))] });
    let release!: () => void;
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    const lock = t.ledger.database.db.transaction().execute(async (trx) => {
      await sql`lock table session_event in access exclusive mode`.execute(trx);
      locked();
      await new Promise<void>((resolve) => (release = resolve));
    });
    await isLocked;
    // The first feed's first page read waits for the lock; the second feed waits for that read.
    const first = followSession(t.ledger.deps, sessionId, 0n, new AbortController().signal);
    let ended: unknown;
    try {
      const firstEvent = first.next();
      await new Promise((resolve) => setTimeout(resolve, 100));
      const stop = new AbortController();
      const second = followSession(t.ledger.deps, sessionId, 0n, stop.signal);
      const secondEvent = second.next();
      await new Promise((resolve) => setTimeout(resolve, 100));
      stop.abort();
      // It ends while the first read is still held, not once that read is over.
      ended = await Promise.race([
        secondEvent.then((r) => r.done),
        new Promise((resolve) => setTimeout(() => resolve("still waiting"), 2_000)),
      ]);
      release();
      expect((await firstEvent).value?.seq).toBe(1n);
    } finally {
      release();
      await lock;
      await first.return(undefined);
    }
    expect(ended).toBe(true);
  });
});

describe("followSession and its signal", () => {
  it("stops replaying the backlog as soon as the signal fires (a client gone, a deadline, the server draining)", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    for (let i = 0; i < 20; i++) await t.client.prompt({ sessionId, noReply: true, parts: [text(`p${i}`)] });
    expect(await lastSeq(t.ledger.database.db, sessionId)).toBeGreaterThan(60);
    const stop = new AbortController();
    const seqs: bigint[] = [];
    for await (const event of followSession(t.ledger.deps, sessionId, 0n, stop.signal)) {
      seqs.push(event.seq);
      if (seqs.length === 3) stop.abort();
    }
    expect(seqs).toEqual([1n, 2n, 3n]);
  });
});

// A trial, 2026-12-04: a live part_delta whose snapshot had not been yielded yet came out of a
// feed that was stopping (its catch-up returns at once), and WatchSession's cursor took the
// delta's seq: a drained stream's after_seq skipped the snapshot the client never got.
describe("a live part_delta ahead of the feed when its signal fires", () => {
  it("is not yielded, and WatchSession's after_seq stays at the last event it sent", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    await t.client.prompt({ sessionId, noReply: true, parts: [text("stored")] });
    const end = BigInt(await lastSeq(t.ledger.database.db, sessionId));
    const stop = new AbortController();
    const feed = watchSession(t.ledger.deps, sessionId, 0n, stop.signal);
    const seen: SessionEvent[] = [];
    for (let i = 0n; i < end; i++) seen.push((await feed.next()).value as SessionEvent);
    const next = feed.next();
    // The snapshot at end + 1 is not stored (as if its commit were still on its way); its delta is published, then the stream stops.
    const delta = create(SessionEventSchema, {
      sessionId,
      seq: end + 1n,
      kind: {
        case: "partDelta",
        value: { messageId: "msg_01M8N3PWC98KEGMQ42T22BSJ1B", partId: "prt_01M8N3PWC98KEGMQ42T22BSJ1B", field: "text", delta: "x" },
      },
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    t.ledger.deps.bus.publish([delta]);
    stop.abort(new ConnectError("draining", Code.Unavailable));
    const outcome = await next.then(
      (result) => ({ yielded: result.value as SessionEvent | undefined }),
      (error: unknown) => ({ error }),
    );
    expect(seen.map((e) => e.seq)).toEqual(Array.from({ length: Number(end) }, (_, i) => BigInt(i + 1)));
    expect(outcome).toMatchObject({ error: { reason: "WATCH_INTERRUPTED", metadata: { after_seq: String(end) } } });
  });
});

// A trial across replicas, 2026-12-04: a feed still replaying when the session was deleted (its
// rows went with it) passed on the deletion's own seq: 37 after 35.
describe("session_deleted reaching a feed that is behind", () => {
  it("is numbered one past the last event the feed yielded", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    // Pages of at most 256 KiB: each of these large events comes in a page of its own.
    for (let i = 0; i < 4; i++) await t.client.prompt({ sessionId, noReply: true, parts: [text(`${i}`.repeat(SHARED_EVENT_BYTES * 2))] });
    const end = BigInt(await lastSeq(t.ledger.database.db, sessionId));
    const stop = new AbortController();
    const feed = followSession(t.ledger.deps, sessionId, 0n, stop.signal);
    const seen: SessionEvent[] = [];
    for (;;) {
      const event = (await feed.next()).value as SessionEvent;
      seen.push(event);
      if (event.kind.case === "partUpdated") break;
    }
    await t.client.deleteSession({ sessionId });
    for (let next = await feed.next(); !next.done; next = await feed.next()) seen.push(next.value);
    stop.abort();
    const last = seen.at(-1)!;
    expect(last.kind.case).toBe("sessionDeleted");
    expect(last.seq).toBeLessThan(end + 1n);
    expect(seen.map((e) => e.seq)).toEqual(seen.map((_, i) => BigInt(i + 1)));
  });
});
