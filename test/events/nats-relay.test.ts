import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { EventBus, type BusItem } from "../../src/events/bus.js";
import { MAX_NATS_HINT_EVENTS_BYTES, startNatsRelay, type NatsRelay } from "../../src/events/nats-relay.js";
import { newId } from "../../src/ids.js";
import { openDatabase, type Database } from "../../src/storage/db.js";
import { listLastSeqs } from "../../src/storage/session-store.js";
import { createTestDatabase, insertTestSession, TEST_ENGINE, type TestDatabase } from "../support/db.js";
import { closedNatsUrl, hasNatsServer, NATS_URL, natsReachable, startNatsServer, type NatsServer } from "../support/nats.js";
import { sleep, waitFor } from "../support/wait.js";

// The NATS relay between two relays of one process, each on its own connection to the machine's
// real NATS server and its own bus, as two replicas would be. Postgres only (the relay needs a
// database for its catch-up check; NATS with PGlite is refused at start).

const NATS = TEST_ENGINE === "postgres" && (await natsReachable());

const textUpdate = (sessionId: string, seq: bigint, text: string): SessionEvent =>
  create(SessionEventSchema, {
    sessionId,
    seq,
    time: { seconds: 1_764_000_000n, nanos: 5 },
    kind: {
      case: "partUpdated",
      value: { part: { id: `prt_${seq}`, sessionId, messageId: "msg_1", kind: { case: "text", value: { text } } } },
    },
  });
const delta = (sessionId: string, seq: bigint, text: string, offset: bigint): SessionEvent =>
  create(SessionEventSchema, {
    sessionId,
    seq,
    kind: { case: "partDelta", value: { messageId: "msg_1", partId: "prt_1", field: "text", delta: text, offset } },
  });

describe.skipIf(!NATS)("NATS relay: two replicas on the real NATS server", () => {
  let test: TestDatabase;
  let database: Database;
  let A: NatsRelay;
  let B: NatsRelay;
  const busB = new EventBus();
  const X = newId("ses");
  const Y = newId("ses");
  const got: BusItem[] = [];
  const aborts: string[] = [];
  let stopX: () => void;

  beforeAll(async () => {
    test = await createTestDatabase();
    database = await openDatabase(test.target);
    A = await startNatsRelay({ servers: [NATS_URL], name: "test-A", db: database.db, bus: new EventBus(), catchUpMs: 0 });
    B = await startNatsRelay({ servers: [NATS_URL], name: "test-B", db: database.db, bus: busB, catchUpMs: 0 });
    B.onAbort((sessionId) => aborts.push(sessionId));
    stopX = busB.subscribe(X, (item) => got.push(item));
    await B.flush(); // B's subscription to X reached the server
  });
  afterAll(async () => {
    await A?.close();
    await B?.close();
    await database?.close();
    await test?.drop();
  });

  it("a small write's hint arrives as its events (in order, '|' in the JSON included); a large one as a hint only", async () => {
    expect(B.stats()).toMatchObject({ kind: "nats", connected: true, messages: 0, hints: 0, lastHintAt: undefined, subscribed: [X] });
    const small = [textUpdate(X, 2n, "a | b"), textUpdate(X, 3n, "c")];
    const sent = Date.now();
    A.hint(X, 3n, small);
    await waitFor("the small write", () => got.length >= 2, 5_000);
    expect(got).toEqual(small);
    expect(B.stats()).toMatchObject({ messages: 1, hints: 1 });
    expect(B.stats().lastHintAt).toBeGreaterThanOrEqual(sent);
    expect(A.stats()).toMatchObject({ messages: 0, hints: 0, lastHintAt: undefined });

    A.hint(X, 4n, [textUpdate(X, 4n, "x".repeat(MAX_NATS_HINT_EVENTS_BYTES))]);
    await waitFor("the large write's hint", () => got.length >= 3, 5_000);
    expect(got.slice(2)).toEqual([{ hint: true, sessionId: X, seq: 4n }]);
    got.length = 0;
  });

  it("deltas arrive batched, in order, before the hint that follows them", async () => {
    const before = B.stats().messages;
    A.delta(delta(X, 5n, "one ", 0n));
    A.delta(delta(X, 5n, "two ", 4n));
    A.delta(delta(X, 5n, "three", 8n));
    A.hint(X, 6n);
    await waitFor("the deltas and the hint", () => got.length >= 4, 5_000);
    expect(got).toEqual([
      delta(X, 5n, "one ", 0n),
      delta(X, 5n, "two ", 4n),
      delta(X, 5n, "three", 8n),
      { hint: true, sessionId: X, seq: 6n },
    ]);
    // One message for the three deltas, one for the hint.
    expect(B.stats().messages - before).toBe(2);
    got.length = 0;

    // Without a hint behind them, the timer sends them (at most 15 ms later).
    A.delta(delta(X, 6n, "four", 0n));
    await waitFor("the timed delta", () => got.length >= 1, 5_000);
    expect(got).toEqual([delta(X, 6n, "four", 0n)]);
    got.length = 0;
  });

  it("an abort requested on A reaches B's handler; a deletion reaches B's bus", async () => {
    await A.requestAbort(X);
    await waitFor("the abort", () => aborts.length >= 1, 5_000);
    expect(aborts).toEqual([X]);

    const deleted = create(SessionEventSchema, {
      sessionId: X,
      seq: 7n,
      time: { seconds: 1_764_000_001n, nanos: 0 },
      kind: { case: "sessionDeleted", value: { session: { id: X, directory: "/tmp", title: "t" } } },
    });
    A.deleted([deleted]);
    await waitFor("the deletion", () => got.length >= 1, 5_000);
    expect(got).toEqual([deleted]);
    got.length = 0;
  });

  it("B receives nothing of a session it does not watch, and nothing of X once its last watcher left", async () => {
    const before = B.stats().messages;
    for (let seq = 1n; seq <= 3n; seq++) A.hint(Y, seq);
    A.delta(delta(Y, 3n, "y", 0n));
    await A.requestAbort(Y);
    A.hint(X, 8n);
    await waitFor("X's hint", () => got.length >= 1, 5_000);
    await A.flush();
    await B.flush();
    expect(got).toEqual([{ hint: true, sessionId: X, seq: 8n }]);
    expect(aborts).toEqual([X]);
    expect(B.stats().messages - before).toBe(1);

    // A second watcher of X leaves: still subscribed. The last one leaves: unsubscribed.
    const second = busB.subscribe(X, () => {});
    second();
    expect(B.stats().subscribed).toEqual([X]);
    stopX();
    expect(B.stats().subscribed).toEqual([]);
    await B.flush(); // the UNSUB reached the server
    const after = B.stats().messages;
    A.hint(X, 9n);
    A.delta(delta(X, 9n, "z", 0n));
    await A.requestAbort(X);
    await A.flush();
    await sleep(100);
    await B.flush();
    expect(B.stats().messages).toBe(after);
    expect(got).toEqual([{ hint: true, sessionId: X, seq: 8n }]);
    expect(aborts).toEqual([X]);
  });
});

describe.skipIf(TEST_ENGINE !== "postgres")("NATS relay: NATS unreachable", () => {
  let test: TestDatabase;
  let database: Database;
  let relay: NatsRelay | undefined;

  beforeAll(async () => {
    test = await createTestDatabase();
    database = await openDatabase(test.target);
  });
  afterAll(async () => {
    await relay?.close();
    await database?.close();
    await test?.drop();
  });

  it("starts anyway, and the catch-up check still hints watched sessions from the table", async () => {
    const bus = new EventBus();
    relay = await startNatsRelay({ servers: [await closedNatsUrl()], db: database.db, bus, catchUpMs: 50 });
    expect(relay.stats()).toMatchObject({ kind: "nats", connected: false, messages: 0, subscribed: [] });
    expect(relay.stats().catchUp).toMatchObject({ intervalMs: 50, checks: 0, failures: 0, hints: 0 });
    const sessionId = await insertTestSession(database.db);
    const [row] = await listLastSeqs(database.db, [sessionId]);
    const got: BusItem[] = [];
    const stop = bus.subscribe(sessionId, (item) => got.push(item));
    await waitFor("a catch-up hint", () => got.length >= 1, 5_000);
    stop();
    expect(got[0]).toEqual({ hint: true, sessionId, seq: row!.lastSeq });
    // The check that found it is counted (the timer keeps ticking: at least one).
    const { catchUp } = relay.stats();
    expect(catchUp.checks).toBeGreaterThanOrEqual(1);
    expect(catchUp.hints).toBeGreaterThanOrEqual(1);
    expect(catchUp.failures).toBe(0);
    expect(catchUp.lastFailureAt).toBeUndefined();
    expect(catchUp.lastSuccessAt).toBeGreaterThanOrEqual(catchUp.startedAt);
    // Sending while down is a no-op, not an error.
    relay.hint(sessionId, 2n);
    relay.delta(delta(sessionId, 2n, "d", 0n));
    await relay.requestAbort(sessionId);
    expect(relay.stats()).toMatchObject({ connected: false, messages: 0, hints: 0, subscribed: [] });
  });
});

describe.skipIf(TEST_ENGINE !== "postgres" || !hasNatsServer())(
  "NATS relay: a NATS server of its own that comes late, dies and comes back",
  () => {
    let test: TestDatabase;
    let database: Database;
    let A: NatsRelay | undefined;
    let B: NatsRelay | undefined;
    let server: NatsServer | undefined;

    beforeAll(async () => {
      test = await createTestDatabase();
      database = await openDatabase(test.target);
    });
    afterAll(async () => {
      await A?.close();
      await B?.close();
      await server?.kill();
      await database?.close();
      await test?.drop();
    });

    it("connects once NATS is up, subscribes to the watched sessions and resyncs them; after NATS restarts, resyncs again and relays", async () => {
      const url = await closedNatsUrl();
      const port = Number(new URL(url).port);
      const busB = new EventBus();
      B = await startNatsRelay({ servers: [url], db: database.db, bus: busB, catchUpMs: 0 });
      const sessionId = await insertTestSession(database.db);
      const [row] = await listLastSeqs(database.db, [sessionId]);
      const got: BusItem[] = [];
      busB.subscribe(sessionId, (item) => got.push(item));
      expect(B.stats()).toMatchObject({ connected: false, messages: 0, subscribed: [] });

      server = await startNatsServer(port);
      await waitFor("B connected", () => B!.stats().connected, 10_000);
      expect(B.stats().subscribed).toEqual([sessionId]);
      await waitFor("the resync after connecting", () => got.length >= 1, 5_000);
      expect(got).toEqual([{ hint: true, sessionId, seq: row!.lastSeq }]);

      A = await startNatsRelay({ servers: [server.url], db: database.db, bus: new EventBus(), catchUpMs: 0 });
      await B.flush();
      A.hint(sessionId, 5n);
      await waitFor("A's hint", () => got.length >= 2, 5_000);
      expect(got.slice(1)).toEqual([{ hint: true, sessionId, seq: 5n }]);

      await server.kill();
      await waitFor("both disconnected", () => !A!.stats().connected && !B!.stats().connected, 10_000);
      server = await startNatsServer(port);
      await waitFor("both reconnected", () => A!.stats().connected && B!.stats().connected, 15_000);
      await waitFor("the resync after reconnecting", () => got.length >= 3, 5_000);
      expect(got.slice(2)).toEqual([{ hint: true, sessionId, seq: row!.lastSeq }]);
      await B.flush();
      A.hint(sessionId, 7n);
      await waitFor("A's hint after the restart", () => got.length >= 4, 5_000);
      expect(got.slice(3)).toEqual([{ hint: true, sessionId, seq: 7n }]);
    }, 60_000);
  },
);
