import http from "node:http";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WatchSessionRequestSchema } from "../../gen/ledger/v1/service_pb.js";
import { TEST_ENGINE } from "../support/db.js";
import { watchOverH2c } from "../support/h2c.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { sleep, waitFor } from "../support/wait.js";

// A server stream whose client stops reading and then goes away must end on the server. Over
// HTTP/2, Node closes the response without failing the write that waits for `drain`, and
// connect-node waited for it forever (src/server/pending-writes.ts).

const WATCH = "/ledger.v1.SessionService/WatchSession";
/** Larger than what flow control lets through to a client that reads nothing (64 KiB window). */
const TEXT_CHARS = 1_000_000;

let t: TestLedger;
let sessionId: string;

beforeAll(async () => {
  t = await startTestLedger({}, { transport: "http" });
  sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  await t.client.prompt({ sessionId, noReply: true, parts: [text("y".repeat(TEXT_CHARS))] });
});

afterAll(async () => {
  await t?.close();
});

/** `ledger_rpc_requests_total` for WatchSession with `code`. */
async function ended(code: string): Promise<number> {
  const metric = await t.ledger.deps.metrics!.registry.getSingleMetric("ledger_rpc_requests_total")!.get();
  return metric.values.find((v) => v.labels.procedure === WATCH && v.labels.code === code)?.value ?? 0;
}

/** Resolves once `size()` is above 0 and has not changed for half a second. */
async function stopsGrowing(size: () => number): Promise<void> {
  let last = -1;
  let still = 0;
  await waitFor("the client to stop receiving", async () => {
    await sleep(100);
    still = size() > 0 && size() === last ? still + 1 : 0;
    last = size();
    return still >= 5;
  });
}

describe(`a WatchSession whose client stopped reading, then left, ends on the server (${TEST_ENGINE})`, () => {
  it("gRPC over HTTP/2: the call ends canceled", async () => {
    const before = await ended("canceled");
    const watch = watchOverH2c(t.ledger.url, { sessionId, afterSeq: 0n, read: false, untilSeq: 0n, textChars: TEXT_CHARS });
    await stopsGrowing(() => watch.buffered());
    watch.close();
    await waitFor("the server to end the call", async () => (await ended("canceled")) > before, 10_000);
    expect((await ended("canceled")) - before).toBe(1);
  });

  it("Connect over HTTP/1.1: the call ends canceled", async () => {
    const before = await ended("canceled");
    const body = toBinary(WatchSessionRequestSchema, create(WatchSessionRequestSchema, { sessionId, afterSeq: 0n }));
    const envelope = Buffer.alloc(5 + body.length);
    envelope.writeUInt32BE(body.length, 1);
    envelope.set(body, 5);
    const req = http.request(`${t.ledger.url}${WATCH}`, { method: "POST", headers: { "content-type": "application/connect+proto" } });
    req.on("error", () => {});
    const res = await new Promise<http.IncomingMessage>((resolve) => req.once("response", resolve).end(envelope));
    res.pause();
    await stopsGrowing(() => res.readableLength);
    req.destroy();
    await waitFor("the server to end the call", async () => (await ended("canceled")) > before, 10_000);
    expect((await ended("canceled")) - before).toBe(1);
  });
});
