import { clone } from "@bufbuild/protobuf";
import { Code, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { connectError } from "../support/errors.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { storedEvents } from "../support/stored.js";

// A probe, 2026-12-02: a google.protobuf.Timestamp no RFC 3339 time can write (seconds 10^15,
// nanos 2e9 or -5), sent in binary (JSON clients cannot send one), answered INTERNAL: the part
// could not be stored as JSON. Now INVALID_ARGUMENT naming the field, nothing stored.

let t: TestLedger;
let binary: ReturnType<typeof createClient<typeof SessionService>>;
beforeAll(async () => {
  t = await startTestLedger({}, { transport: "http" });
  binary = createClient(SessionService, createConnectTransport({ baseUrl: t.ledger.url, httpVersion: "1.1", useBinaryFormat: true }));
});
afterAll(() => t?.close());

const BAD: Array<[string, { seconds: bigint; nanos: number }]> = [
  ["seconds after 9999-12-31", { seconds: 10n ** 15n, nanos: 0 }],
  ["seconds before 0001-01-01", { seconds: -62_135_596_801n, nanos: 0 }],
  ["nanos over 999,999,999", { seconds: 0n, nanos: 2_000_000_000 }],
  ["negative nanos", { seconds: 0n, nanos: -5 }],
];

describe("Timestamps in a request", () => {
  it.each(BAD)("Prompt with a text draft's time.start of %s: INVALID_ARGUMENT naming it, nothing stored", async (_name, start) => {
    const sessionId = (await binary.createSession({ directory: t.dir })).session!.id;
    const events = await storedEvents(t.ledger.deps.db, sessionId);
    const error = await connectError(
      binary.prompt({
        sessionId,
        noReply: true,
        parts: [{ kind: { case: "text", value: { text: "ok" } } }, { kind: { case: "text", value: { text: "hi", time: { start } } } }],
      }),
    );
    expect([error.code, error.rawMessage]).toEqual([
      Code.InvalidArgument,
      `parts[1].text.time.start: is not a time between 0001-01-01 and 9999-12-31 UTC with nanos 0 to 999999999 (seconds ${start.seconds}, nanos ${start.nanos})`,
    ]);
    expect(await storedEvents(t.ledger.deps.db, sessionId)).toEqual(events);
  });

  it("the limits themselves are valid: 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999999Z are stored", async () => {
    const sessionId = (await binary.createSession({ directory: t.dir })).session!.id;
    const time = { start: { seconds: -62_135_596_800n, nanos: 0 }, end: { seconds: 253_402_300_799n, nanos: 999_999_999 } };
    const res = await binary.prompt({ sessionId, noReply: true, parts: [{ kind: { case: "text", value: { text: "hi", time } } }] });
    const part = res.message!.parts[0]!.kind;
    expect(part.case === "text" && part.value.time).toMatchObject(time);
  });

  it("UpdatePart with a bad time: INVALID_ARGUMENT on part.text.time.end, nothing written", async () => {
    const sessionId = (await binary.createSession({ directory: t.dir })).session!.id;
    const sent = (await binary.prompt({ sessionId, noReply: true, parts: [{ kind: { case: "text", value: { text: "hi" } } }] })).message!;
    const events = await storedEvents(t.ledger.deps.db, sessionId);
    const part = clone(PartSchema, sent.parts[0]!);
    if (part.kind.case === "text")
      part.kind.value.time = { $typeName: "ledger.v1.PartTime", end: { $typeName: "google.protobuf.Timestamp", seconds: 0n, nanos: -1 } };
    const error = await connectError(binary.updatePart({ sessionId, messageId: sent.message!.kind.value!.id, part }));
    expect([error.code, error.rawMessage]).toEqual([
      Code.InvalidArgument,
      "part.text.time.end: is not a time between 0001-01-01 and 9999-12-31 UTC with nanos 0 to 999999999 (seconds 0, nanos -1)",
    ]);
    expect(await storedEvents(t.ledger.deps.db, sessionId)).toEqual(events);
  });
});
