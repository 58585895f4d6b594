import { randomBytes } from "node:crypto";
import { ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import type * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { SHARED_EVENT_BYTES } from "../../src/events/feed.js";
import { grpcLedgerClient } from "../support/grpc-js.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";

// Large replayed events are serialized once per process and written to every stream in a binary
// codec without a copy (src/server/shared-frames.ts). Every client, in every protocol and codec,
// with and without a negotiated response compression, must read exactly the stored events.

/** Prompts stored: large (over SHARED_EVENT_BYTES of JSON, with multi-byte characters) and small in turn. */
const TEXTS = [large("a"), "small one", large("b"), large("c"), "small two"];

let t: TestLedger;
let sessionId: string;
let lastSeq: bigint;

beforeAll(async () => {
  t = await startTestLedger({}, { transport: "http" });
  sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  for (const text of TEXTS) await t.client.prompt({ sessionId, noReply: true, parts: [{ kind: { case: "text", value: { text } } }] });
  lastSeq = await logEnd();
});

afterAll(async () => {
  await t?.close();
});

/** What a watcher read: each event's seq and kind, and the texts of its text parts. */
interface Seen {
  seqs: string[];
  kinds: string[];
  texts: string[];
}

describe("WatchSession{after_seq: 0} replaying events of 64 KiB and more", () => {
  it("every client reads exactly the stored events, in order, in each protocol and codec, all at once", async () => {
    const url = t.ledger.url;
    const transports: Record<string, Transport> = {
      "Connect JSON (HTTP/1.1)": createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: false }),
      "Connect binary (h2c, gzip accepted)": createConnectTransport({ baseUrl: url, httpVersion: "2", useBinaryFormat: true }),
      "Connect binary (HTTP/1.1, no compression)": createConnectTransport({
        baseUrl: url,
        httpVersion: "1.1",
        useBinaryFormat: true,
        acceptCompression: [],
      }),
      "gRPC (h2c)": createGrpcTransport({ baseUrl: url }),
      "gRPC-Web binary (HTTP/1.1)": createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: true }),
      "gRPC-Web JSON (HTTP/1.1)": createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: false }),
    };
    const reads = Object.entries(transports).map(async ([name, transport]) => [name, await watchConnect(transport)] as const);
    // Two more of the same protocol read the same shared events at the same time.
    reads.push(watchConnect(createGrpcTransport({ baseUrl: url })).then((seen) => ["gRPC (h2c), second", seen] as const));
    reads.push(watchGrpcJs().then((seen) => ["@grpc/grpc-js (gzip accepted)", seen] as const));
    const seen = Object.fromEntries(await Promise.all(reads));
    const expected = expectedEvents(seen["Connect JSON (HTTP/1.1)"]!);
    for (const [name, got] of Object.entries(seen)) expect({ name, ...got }).toEqual({ name, ...expected });
  });
});

/** The stored log's shape, checked on one watcher's reading: seqs 1..last, one user message and text part per prompt. */
function expectedEvents(reference: Seen): Seen {
  const seqs = Array.from({ length: Number(lastSeq) }, (_, i) => String(i + 1));
  expect(reference.seqs).toEqual(seqs);
  expect(reference.kinds.filter((k) => k === "partUpdated")).toHaveLength(TEXTS.length);
  expect(reference.texts).toEqual(TEXTS);
  return reference;
}

async function watchConnect(transport: Transport): Promise<Seen> {
  const seen: Seen = { seqs: [], kinds: [], texts: [] };
  const abort = new AbortController();
  try {
    for await (const { event } of createClient(SessionService, transport).watchSession(
      { sessionId, afterSeq: 0n },
      { signal: abort.signal },
    )) {
      seen.seqs.push(String(event!.seq));
      seen.kinds.push(event!.kind.case ?? "");
      if (event!.kind.case === "partUpdated" && event!.kind.value.part?.kind.case === "text")
        seen.texts.push(event!.kind.value.part.kind.value.text);
      if (event!.seq >= lastSeq) break;
    }
  } finally {
    abort.abort();
  }
  return seen;
}

async function watchGrpcJs(): Promise<Seen> {
  const client = grpcLedgerClient(t.ledger.url);
  const seen: Seen = { seqs: [], kinds: [], texts: [] };
  try {
    await new Promise<void>((resolve, reject) => {
      const call = (client as unknown as { watchSession(req: object): grpc.ClientReadableStream<GrpcEvent> }).watchSession({
        sessionId,
        afterSeq: "0",
      });
      call.on("data", ({ event }: GrpcEvent) => {
        seen.seqs.push(event.seq);
        seen.kinds.push(event.kind);
        if (event.kind === "partUpdated" && event.partUpdated.part.kind === "text") seen.texts.push(event.partUpdated.part.text.text);
        if (BigInt(event.seq) >= lastSeq) {
          call.cancel();
          resolve();
        }
      });
      call.on("error", (error: grpc.ServiceError) => (error.code === 1 ? resolve() : reject(error)));
    });
  } finally {
    client.close();
  }
  return seen;
}

/** An event as @grpc/proto-loader decodes it (oneofs named, 64-bit ints as strings). */
interface GrpcEvent {
  event: { seq: string; kind: string; partUpdated: { part: { kind: string; text: { text: string } } } };
}

/** The session's last seq, from WatchSession's OUT_OF_RANGE answer to a cursor far ahead. */
async function logEnd(): Promise<bigint> {
  try {
    for await (const _ of t.client.watchSession({ sessionId, afterSeq: 1n << 62n })) break;
  } catch (error) {
    const last = ConnectError.from(error).findDetails(ErrorInfoSchema)[0]?.metadata.last_seq;
    if (last) return BigInt(last);
    throw error;
  }
  throw new Error("WatchSession accepted a cursor far ahead of the log");
}

/** A text of about 3 × SHARED_EVENT_BYTES characters: random ASCII with 2- and 4-byte UTF-8 characters in it. */
function large(tag: string): string {
  const ascii = randomBytes(SHARED_EVENT_BYTES * 2).toString("base64");
  return `${tag}: é ${ascii.slice(0, SHARED_EVENT_BYTES)} 🦀 ${ascii.slice(SHARED_EVENT_BYTES)} ü`;
}
