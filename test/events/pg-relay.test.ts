import { create } from "@bufbuild/protobuf";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionEventSchema } from "../../gen/ledger/v1/event_pb.js";
import { EventBus } from "../../src/events/bus.js";
import { DELTAS_CHANNEL, EVENTS_CHANNEL, startPgRelay, type Relay } from "../../src/events/pg-relay.js";
import { openDatabase, type Database } from "../../src/storage/db.js";
import { createTestDatabase, TEST_ENGINE, type TestDatabase } from "../support/db.js";
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
});
