import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { newId } from "../../src/ids.js";
import type { Database } from "../../src/storage/db.js";
import { appendEvents, readEventPage } from "../../src/storage/event-store.js";
import { toJsonb } from "../../src/storage/jsonb.js";
import { insertTestSession, openTestDatabase, TEST_ENGINE } from "../support/db.js";

// readEventPage: replay pages bounded by rows and by the JSON bytes of their events, sized
// from `data_bytes` (written by appendEvents) or, for rows stored before that column, from
// what Postgres knows without reading them.

let database: Database;
beforeAll(async () => {
  database = await openTestDatabase();
});
afterAll(() => database?.close());

const newSession = () => insertTestSession(database.db);

/** A `part_updated` event whose text part holds `text` (a fixed time: its JSON length does not vary). */
function textEvent(sessionId: string, seq: number, text: string): SessionEvent {
  const part = { id: newId("prt"), sessionId, messageId: "msg_1", kind: { case: "text" as const, value: { text } } };
  return create(SessionEventSchema, {
    sessionId,
    seq: BigInt(seq),
    time: timestampFromMs(1_800_000_000_123),
    kind: { case: "partUpdated", value: { part } },
  });
}

/** Appends events whose JSON texts are these many bytes long (text padded with "x"). */
async function appendSized(sessionId: string, sizes: number[]): Promise<number[]> {
  const events = sizes.map((size, i) => {
    const one = Buffer.byteLength(toJsonb(SessionEventSchema, textEvent(sessionId, i + 1, "x")));
    return textEvent(sessionId, i + 1, "x".repeat(size - one + 1));
  });
  await database.db.transaction().execute((trx) => appendEvents(trx, events));
  return events.map((e) => Buffer.byteLength(toJsonb(SessionEventSchema, e)));
}

async function page(sessionId: string, after: number, rows: number, bytes: number) {
  const { events, more } = await readEventPage(database.db, sessionId, after, { rows, bytes });
  return { seqs: events.map((e) => Number(e.seq)), more };
}

describe(`readEventPage on ${TEST_ENGINE}`, () => {
  it("appendEvents stores the byte length of each event's JSON text", async () => {
    const sessionId = await newSession();
    const sizes = await appendSized(sessionId, [300, 5000]);
    await database.db.transaction().execute((trx) => appendEvents(trx, [textEvent(sessionId, 3, "é€😀")]));
    const rows = await database.db
      .selectFrom("session_event")
      .select(["seq", "data_bytes"])
      .where("session_id", "=", sessionId)
      .orderBy("seq")
      .execute();
    const unicode = Buffer.byteLength(toJsonb(SessionEventSchema, textEvent(sessionId, 3, "é€😀")));
    expect(rows.map((r) => [Number(r.seq), r.data_bytes])).toEqual([
      [1, 300],
      [2, 5000],
      [3, unicode],
    ]);
    expect(sizes).toEqual([300, 5000]);
  });

  it("stops after the event whose bytes reach the budget; an event over the budget comes alone", async () => {
    const sessionId = await newSession();
    await appendSized(sessionId, [300, 300, 5000, 300, 300]);
    expect(await page(sessionId, 0, 500, 1000)).toEqual({ seqs: [1, 2, 3], more: true });
    expect(await page(sessionId, 2, 500, 1000)).toEqual({ seqs: [3], more: true });
    expect(await page(sessionId, 3, 500, 1000)).toEqual({ seqs: [4, 5], more: false });
    expect(await page(sessionId, 5, 500, 1000)).toEqual({ seqs: [], more: false });
  });

  it("stops at the row limit, and says more may follow", async () => {
    const sessionId = await newSession();
    await appendSized(sessionId, [300, 300, 300]);
    expect(await page(sessionId, 0, 2, 1 << 20)).toEqual({ seqs: [1, 2], more: true });
    expect(await page(sessionId, 2, 2, 1 << 20)).toEqual({ seqs: [3], more: false });
  });

  it("returns the events themselves, in seq order", async () => {
    const sessionId = await newSession();
    const events = [textEvent(sessionId, 1, "one"), textEvent(sessionId, 2, "two")];
    await database.db.transaction().execute((trx) => appendEvents(trx, events));
    const { events: read } = await readEventPage(database.db, sessionId, 0, { rows: 500, bytes: 1 << 20 });
    expect(
      read.map((e) => (e.kind.case === "partUpdated" && e.kind.value.part?.kind.case === "text" ? e.kind.value.part.kind.value.text : "")),
    ).toEqual(["one", "two"]);
    expect(read.map((e) => e.kind.case === "partUpdated" && e.kind.value.part?.id)).toEqual(
      events.map((e) => e.kind.case === "partUpdated" && e.kind.value.part?.id),
    );
  });

  it("gives back the caller's copy for the seqs it already holds, read without their data; sizes and limits as without", async () => {
    const sessionId = await newSession();
    const sizes = await appendSized(sessionId, [300, 300, 5000, 300]);
    // Stand-ins that differ from what is stored: what comes back for seqs 2 and 3 cannot have been read.
    const held2 = textEvent(sessionId, 2, "held two");
    const held3 = textEvent(sessionId, 3, "held three");
    const known = new Map([
      [2n, held2],
      [3n, held3],
    ]);
    const first = await readEventPage(database.db, sessionId, 0, { rows: 500, bytes: 1000 }, known);
    expect(first.events.map((e) => Number(e.seq))).toEqual([1, 2, 3]);
    expect(first.events[1]).toBe(held2);
    expect(first.events[2]).toBe(held3);
    expect(first.events[0]!.kind.case === "partUpdated" && first.events[0]!.kind.value.part?.kind.value).toMatchObject({
      text: expect.stringMatching(/^x+$/),
    });
    expect(first.sizes).toEqual(sizes.slice(0, 3));
    expect(first.more).toBe(true);
    const rest = await readEventPage(database.db, sessionId, 3, { rows: 500, bytes: 1000 }, known);
    expect(rest.events.map((e) => Number(e.seq))).toEqual([4]);
    expect(rest.more).toBe(false);
  });

  it("sizes events stored without data_bytes by their stored size, and a compressed one as a whole page", async () => {
    const sessionId = await newSession();
    // As written before the column existed: a small event, one whose 100,000 "a" compress to
    // about a kilobyte, another small one.
    const legacy = [textEvent(sessionId, 1, "small"), textEvent(sessionId, 2, "a".repeat(100_000)), textEvent(sessionId, 3, "small")];
    await database.db
      .insertInto("session_event")
      .values(
        legacy.map((e) => ({
          session_id: sessionId,
          seq: Number(e.seq),
          kind: "part_updated",
          data: toJsonb(SessionEventSchema, e),
          time: timestampDate(e.time!),
        })),
      )
      .execute();
    const stored = await database.db
      .selectFrom("session_event")
      .select((eb) => [
        eb.fn<string | null>("pg_column_compression", ["data"]).as("compression"),
        eb.fn<number>("pg_column_size", ["data"]).as("size"),
      ])
      .where("session_id", "=", sessionId)
      .orderBy("seq")
      .execute();
    expect(stored.map((r) => r.compression !== null)).toEqual([false, true, false]);
    expect(stored[1]!.size).toBeLessThan(10_000);
    // Sized by stored size alone, all three would fit 50,000 bytes; the compressed one counts as 50,000.
    expect(await page(sessionId, 0, 500, 50_000)).toEqual({ seqs: [1, 2], more: true });
    expect(await page(sessionId, 2, 500, 50_000)).toEqual({ seqs: [3], more: false });
  });
});
