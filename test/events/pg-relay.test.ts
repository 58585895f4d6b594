import { create } from "@bufbuild/protobuf";
import { sql } from "kysely";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionEventSchema } from "../../gen/ledger/v1/event_pb.js";
import { EventBus, type BusItem } from "../../src/events/bus.js";
import { DELTAS_CHANNEL, EVENTS_CHANNEL, MAX_HINT_EVENTS_BYTES, startPgRelay } from "../../src/events/pg-relay.js";
import type { Relay } from "../../src/events/relay.js";
import { openDatabase, type Database } from "../../src/storage/db.js";
import { createTestDatabase, insertTestSession, TEST_ENGINE, type TestDatabase } from "../support/db.js";
import { sleep, waitFor } from "../support/wait.js";

// The relay's outgoing side on a real Postgres: what one replica sends, another's LISTEN gets.

describe.skipIf(TEST_ENGINE !== "postgres")("Postgres relay: sending", () => {
  let test: TestDatabase;
  let database: Database;
  let relay: Relay;
  let listener: pg.Client;
  const got: string[] = [];

  beforeAll(async () => {
    test = await createTestDatabase();
    database = await openDatabase(test.target);
    const url = test.url!;
    relay = await startPgRelay({ url, db: database.db, bus: new EventBus(), catchUpMs: 0 });
    listener = new pg.Client({ connectionString: url });
    await listener.connect();
    listener.on("notification", (m) => got.push(`${m.channel} ${m.payload!.slice(m.payload!.indexOf("|") + 1)}`));
    await listener.query(`listen ${EVENTS_CHANNEL}`);
    await listener.query(`listen ${DELTAS_CHANNEL}`);
  });
  afterAll(async () => {
    await relay?.close();
    await listener?.end();
    await database?.close();
    await test?.drop();
  });

  const delta = (seq: bigint, text: string) =>
    create(SessionEventSchema, {
      sessionId: "ses_A",
      seq,
      kind: { case: "partDelta", value: { messageId: "msg_1", partId: "prt_1", field: "text", delta: text, offset: 0n } },
    });

  it("keeps sending after a delta flush found nothing to send (a hint had taken the deltas first)", async () => {
    relay.delta(delta(15n, "w0 "));
    // The hint moves the queued delta ahead of itself; the delta timer then fires with nothing left.
    relay.hint("ses_A", 16n);
    await sleep(60);
    relay.delta(delta(16n, "w1 "));
    relay.hint("ses_A", 17n);
    await waitFor("the second hint", () => got.some((g) => g.includes("ses_A|17")), 5_000);
    expect(got).toEqual([
      `${DELTAS_CHANNEL} [["ses_A","15","msg_1","prt_1","text","w0 ","0"]]`,
      `${EVENTS_CHANNEL} ses_A|16`,
      `${DELTAS_CHANNEL} [["ses_A","16","msg_1","prt_1","text","w1 ","0"]]`,
      `${EVENTS_CHANNEL} ses_A|17`,
    ]);
  });

  // A trial, 2026-12-04: 1,400 control characters (6 bytes each in JSON) made a payload Postgres
  // refused, and the whole batch (deltas, hints) was lost without a word.
  it("splits a delta of control characters so each payload fits; the hint sent with them arrives too", async () => {
    got.length = 0;
    const text = "\u0001".repeat(1400) + "é".repeat(1400);
    relay.delta(delta(20n, text));
    relay.hint("ses_A", 21n);
    await waitFor("the hint", () => got.some((g) => g.includes("ses_A|21")), 5_000);
    const pieces = got
      .filter((g) => g.startsWith(DELTAS_CHANNEL))
      .flatMap((g) => JSON.parse(g.slice(DELTAS_CHANNEL.length + 1)) as string[][]);
    expect(pieces.map((p) => p[5]).join("")).toBe(text);
    expect(pieces.map((p) => p[6])).toEqual(pieces.map((_, i) => String(pieces.slice(0, i).reduce((n, p) => n + [...p[5]!].length, 0))));
    expect(got.at(-1)).toBe(`${EVENTS_CHANNEL} ses_A|21`);
  });
});

describe.skipIf(TEST_ENGINE !== "postgres")("Postgres relay: commit hints carry the events of small writes", () => {
  let test: TestDatabase;
  let database: Database;
  let sender: Relay;
  let receiver: Relay;
  const bus = new EventBus();
  const got: BusItem[] = [];

  beforeAll(async () => {
    test = await createTestDatabase();
    database = await openDatabase(test.target);
    sender = await startPgRelay({ url: test.url!, db: database.db, bus: new EventBus(), catchUpMs: 0 });
    receiver = await startPgRelay({ url: test.url!, db: database.db, bus, catchUpMs: 0 });
    bus.subscribe("ses_B", (item) => got.push(item));
  });
  afterAll(async () => {
    await sender?.close();
    await receiver?.close();
    await database?.close();
    await test?.drop();
  });

  const textUpdate = (seq: bigint, text: string) =>
    create(SessionEventSchema, {
      sessionId: "ses_B",
      seq,
      time: { seconds: 1_764_000_000n, nanos: 5 },
      kind: {
        case: "partUpdated",
        value: { part: { id: `prt_${seq}`, sessionId: "ses_B", messageId: "msg_1", kind: { case: "text", value: { text } } } },
      },
    });

  it("the other replica publishes the committed events themselves (no table read), in order; a write too large for the payload sends the hint alone", async () => {
    // "|" inside the JSON must not confuse the receiver.
    const small = [textUpdate(2n, "a | b"), textUpdate(3n, "c")];
    sender.hint("ses_B", 3n, small);
    await waitFor("the small write", () => got.length >= 2, 5_000);
    expect(got).toEqual(small);

    const large = [textUpdate(4n, "x".repeat(MAX_HINT_EVENTS_BYTES))];
    sender.hint("ses_B", 4n, large);
    await waitFor("the large write's hint", () => got.length >= 3, 5_000);
    expect(got[2]).toEqual({ hint: true, sessionId: "ses_B", seq: 4n });

    // Events a replica cannot read (another version, a damaged payload): the hint still arrives.
    const notify = new pg.Client({ connectionString: test.url! });
    await notify.connect();
    await notify.query("select pg_notify($1, $2)", [
      EVENTS_CHANNEL,
      `other|ses_B|5|[{"sessionId": "ses_B", "seq": "5", "partUpdated": {"part": 7}}]`,
    ]);
    await notify.end();
    await waitFor("the hint of the unreadable events", () => got.length >= 4, 5_000);
    expect(got[3]).toEqual({ hint: true, sessionId: "ses_B", seq: 5n });
    got.splice(3, 1);

    // Events that do not end at the hint's seq: the hint goes alone too.
    sender.hint("ses_B", 6n, [textUpdate(5n, "d")]);
    await waitFor("the hint past the events", () => got.length >= 4, 5_000);
    expect(got.slice(3)).toEqual([{ hint: true, sessionId: "ses_B", seq: 6n }]);
  });
});

describe.skipIf(TEST_ENGINE !== "postgres")("Postgres relay: stats for /metrics and health", () => {
  let test: TestDatabase;
  let database: Database;
  let sender: Relay;
  let receiver: Relay;
  const bus = new EventBus();

  beforeAll(async () => {
    test = await createTestDatabase();
    database = await openDatabase(test.target);
    sender = await startPgRelay({ url: test.url!, db: database.db, bus: new EventBus(), catchUpMs: 0 });
    receiver = await startPgRelay({ url: test.url!, db: database.db, bus, catchUpMs: 50 });
  });
  afterAll(async () => {
    await sender?.close();
    await receiver?.close();
    await database?.close();
    await test?.drop();
  });

  it("counts hints from other replicas (not its own), and the catch-up checks with their failures while the query fails", async () => {
    expect(receiver.stats()).toMatchObject({ kind: "postgres", connected: true, messages: 0, hints: 0, lastHintAt: undefined });
    const sessionId = await insertTestSession(database.db);
    const got: BusItem[] = [];
    const stop = bus.subscribe(sessionId, (item) => got.push(item));
    const sent = Date.now();
    sender.hint(sessionId, 9n);
    receiver.hint(sessionId, 10n); // its own: delivered back by Postgres, skipped
    await waitFor("the other replica's hint", () => got.some((item) => "hint" in item && item.seq === 9n), 5_000);
    await waitFor("both notifications", () => receiver.stats().messages >= 2, 5_000);
    expect(receiver.stats()).toMatchObject({ messages: 2, hints: 1 });
    expect(receiver.stats().lastHintAt).toBeGreaterThanOrEqual(sent);
    await waitFor("a catch-up check", () => receiver.stats().catchUp.checks >= 1 && receiver.stats().catchUp.hints >= 1, 5_000);
    expect(receiver.stats().catchUp).toMatchObject({ intervalMs: 50, failures: 0 });

    // A real failure of the catch-up query (`select last_seq from session ...`): the table is gone.
    await sql`alter table session rename to session_away`.execute(database.db);
    try {
      await waitFor("a failed check", () => receiver.stats().catchUp.failures >= 1, 5_000);
      const failed = receiver.stats().catchUp;
      expect(failed.lastFailureAt).toBeGreaterThan(failed.lastSuccessAt!);
    } finally {
      await sql`alter table session_away rename to session`.execute(database.db);
    }
    await waitFor(
      "a check that succeeds again",
      () => {
        const { lastSuccessAt, lastFailureAt } = receiver.stats().catchUp;
        return lastSuccessAt! > lastFailureAt!;
      },
      5_000,
    );
    stop();
  });
});
