import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionEventSchema } from "../../gen/ledger/v1/event_pb.js";
import { EventBus, type BusItem } from "../../src/events/bus.js";
import { inTransaction, publishLive, writeSession, type WriterDeps } from "../../src/ledger/writer.js";
import type { Database } from "../../src/storage/db.js";
import { getLogBounds } from "../../src/storage/session-store.js";
import { insertTestSession, openTestDatabase, TEST_ENGINE } from "../support/db.js";

// The one after-commit path: what a write publishes reaches the bus only once its transaction
// committed, and never when it rolled back.

let database: Database;
let deps: WriterDeps;
beforeAll(async () => {
  database = await openTestDatabase();
  deps = { db: database.db, bus: new EventBus() };
});
afterAll(() => database?.close());

const newSession = () => insertTestSession(database.db);

function listen(sessionId: string): BusItem[] {
  const seen: BusItem[] = [];
  deps.bus.subscribe(sessionId, (item) => seen.push(item));
  return seen;
}

describe(`writer on ${TEST_ENGINE}`, () => {
  it("writeSession publishes its events after commit, in seq order, and nothing while the transaction is open", async () => {
    const sessionId = await newSession();
    const seen = listen(sessionId);
    let seenInside = -1;
    const { events } = await writeSession(deps, sessionId, async (w) => {
      w.emit({ case: "sessionStatus", value: { status: { case: "busy", value: {} } } });
      w.emit({ case: "sessionStatus", value: { status: { case: "idle", value: {} } } });
      seenInside = seen.length;
    });
    expect(seenInside).toBe(0);
    expect(events.map((e) => e.seq)).toEqual([1n, 2n]);
    expect(seen).toEqual(events);
  });

  it("a write that throws rolls back and publishes nothing, hooks included", async () => {
    const sessionId = await newSession();
    const seen = listen(sessionId);
    let hooked = false;
    const failed = writeSession(deps, sessionId, async (w) => {
      w.emit({ case: "sessionStatus", value: { status: { case: "busy", value: {} } } });
      w.onCommit(() => (hooked = true));
      throw new Error("refused");
    });
    await expect(failed).rejects.toThrow("refused");
    expect(seen).toEqual([]);
    expect(hooked).toBe(false);
    expect(await getLogBounds(database.db, sessionId)).toEqual({ prunedSeq: 0n, lastSeq: 0n });
  });

  it("inTransaction runs its hooks after commit, in registration order, before it returns", async () => {
    const order: string[] = [];
    const result = await inTransaction(deps, async (tx) => {
      tx.onCommit(() => order.push("first"));
      tx.onCommit(() => order.push("second"));
      order.push("inside");
      return "done";
    });
    order.push(result);
    expect(order).toEqual(["inside", "first", "second", "done"]);
  });

  it("a hook that throws does not fail the committed write nor stop the next hooks", async () => {
    const order: string[] = [];
    await inTransaction(deps, async (tx) => {
      tx.onCommit(() => {
        throw new Error("listener bug");
      });
      tx.onCommit(() => order.push("next"));
    });
    expect(order).toEqual(["next"]);
  });

  it("publishLive sends an unstored event to the bus at once", async () => {
    const sessionId = await newSession();
    const seen = listen(sessionId);
    const delta = create(SessionEventSchema, {
      sessionId,
      seq: 3n,
      kind: { case: "partDelta", value: { messageId: "m", partId: "p", field: "text", delta: "hi" } },
    });
    publishLive(deps, delta);
    expect(seen).toEqual([delta]);
  });
});
