import http from "node:http";
import http2 from "node:http2";
import type net from "node:net";
import { create, fromBinary, toBinary, toJsonString } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import {
  compressionGzip,
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  connectNodeAdapter,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { Health, HealthCheckRequestSchema, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { PromptRequestSchema, SessionService } from "../../gen/ledger/v1/service_pb.js";
import { errorInterceptor } from "../../src/server/errors.js";
import { withProtocolErrors } from "../../src/server/protocol-errors.js";
import { grpcLedgerClient } from "../support/grpc-js.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { connectError as failure } from "../support/errors.js";

// A request message over `limits.request_bytes` is refused before any handler runs, by the
// server itself before connect-es reads it (src/server/request-limit.ts). The README promises
// every limit over-run is RESOURCE_EXHAUSTED naming the limit and the value, with a
// google.rpc.ErrorInfo; these tests send oversized requests through real clients of every
// protocol the port speaks and check the code, message and ErrorInfo. The last group runs the
// same refusals on a server where connect-es has no limit at all, so none of them depends on
// what connect-es would say.

const LIMIT = 4096;

let t: TestLedger;
let sessionId: string;
let h2: Http2SessionManager;

beforeAll(async () => {
  t = await startTestLedger({ limits: { request_bytes: LIMIT } }, { transport: "http" });
  sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  h2 = new Http2SessionManager(t.ledger.url);
});

afterAll(async () => {
  h2?.abort();
  await t?.close();
});

/** A prompt whose message is well over LIMIT bytes in both the binary and the JSON format. */
function bigPrompt() {
  return { sessionId, noReply: true, parts: [text("x".repeat(3 * LIMIT))] };
}

const binarySize = () => toBinary(PromptRequestSchema, create(PromptRequestSchema, bigPrompt())).byteLength;
const jsonSize = () => Buffer.byteLength(toJsonString(PromptRequestSchema, create(PromptRequestSchema, bigPrompt())));

async function drainFailure(stream: AsyncIterable<unknown>): Promise<ConnectError> {
  return failure(
    (async () => {
      for await (const _ of stream) void _;
    })(),
  );
}

/**
 * The refusal every protocol must give: RESOURCE_EXHAUSTED, a message naming `request_bytes`, the
 * limit and (when connect knew it) the size, and ErrorInfo {LIMIT_EXCEEDED, ledger.v1, metadata}.
 */
function expectTooLarge(
  code: Code,
  message: string,
  details: { reason: string; domain: string; metadata: Record<string, string> } | undefined,
  actual?: number,
  afterDecompression = false,
): void {
  expect(code).toBe(Code.ResourceExhausted);
  expect(message).toContain("request_bytes");
  expect(message).toContain(String(LIMIT));
  expect(message).not.toContain("readMaxBytes");
  if (actual !== undefined) expect(message).toBe(`request message: ${actual} bytes exceeds limit request_bytes (${LIMIT} bytes)`);
  else if (afterDecompression)
    expect(message).toBe(`request message: more than ${LIMIT} bytes after decompression exceeds limit request_bytes (${LIMIT} bytes)`);
  else expect(message).toBe(`request message: more than ${LIMIT} bytes exceeds limit request_bytes (${LIMIT} bytes)`);
  expect(details, "ErrorInfo detail").toBeDefined();
  expect(details!.reason).toBe("LIMIT_EXCEEDED");
  expect(details!.domain).toBe("ledger.v1");
  const metadata: Record<string, string> = { limit: "request_bytes", max: String(LIMIT) };
  if (actual !== undefined) metadata.actual = String(actual);
  expect({ ...details!.metadata }).toEqual(metadata);
}

function expectConnectTooLarge(error: ConnectError, actual?: number, afterDecompression = false): void {
  expectTooLarge(error.code, error.rawMessage, error.findDetails(ErrorInfoSchema)[0], actual, afterDecompression);
}

async function expectNothingStored(): Promise<void> {
  expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
}

describe("a request over limits.request_bytes", () => {
  // connect-es clients stream the body without a content-length: connect stops reading at the
  // limit, so the size is unknown.
  it("Connect unary JSON over HTTP/1.1 (connect-es client: size unknown)", async () => {
    const error = await failure(t.client.prompt(bigPrompt()));
    expectConnectTooLarge(error);
    await expectNothingStored();
  });

  it("Connect unary binary over h2c (connect-es client: size unknown)", async () => {
    const client = createClient(
      SessionService,
      createConnectTransport({ baseUrl: t.ledger.url, httpVersion: "2", useBinaryFormat: true, sessionManager: h2 }),
    );
    expectConnectTooLarge(await failure(client.prompt(bigPrompt())));
  });

  it("Connect unary JSON with a content-length (like curl): the size is named", async () => {
    const body = toJsonString(PromptRequestSchema, create(PromptRequestSchema, bigPrompt()));
    const res = await fetch(`${t.ledger.url}/ledger.v1.SessionService/Prompt`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });
    expect(res.status).toBe(429);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    const bytes = new Uint8Array(await res.arrayBuffer());
    expect(res.headers.get("content-length")).toBe(String(bytes.byteLength));
    expectConnectTooLarge(errorFromJsonBytes(bytes, undefined, new ConnectError("unparsable", Code.Unknown)), jsonSize());
    await expectNothingStored();
  });

  it("Connect unary, gzip-compressed under the limit but over it decompressed", async () => {
    const client = createClient(
      SessionService,
      createConnectTransport({ baseUrl: t.ledger.url, httpVersion: "1.1", useBinaryFormat: true, sendCompression: compressionGzip }),
    );
    expectConnectTooLarge(await failure(client.prompt(bigPrompt())), undefined, true);
    await expectNothingStored();
  });

  it("Connect unary JSON with a chunked body (no content-length: size unknown)", async () => {
    const body = Buffer.from(toJsonString(PromptRequestSchema, create(PromptRequestSchema, bigPrompt())));
    const res = await new Promise<{ status: number; body: Buffer; type: string }>((resolve, reject) => {
      const req = http.request(
        `${t.ledger.url}/ledger.v1.SessionService/Prompt`,
        { method: "POST", headers: { "content-type": "application/json" } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks), type: String(res.headers["content-type"]) }));
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      // Several writes without a content-length: Node sends transfer-encoding: chunked.
      for (let i = 0; i < body.length; i += 1000) req.write(body.subarray(i, i + 1000));
      req.end();
    });
    expect(res.status).toBe(429);
    expect(res.type).toMatch(/^application\/json/);
    expectConnectTooLarge(errorFromJsonBytes(res.body, undefined, new ConnectError("unparsable", Code.Unknown)));
  });

  it("Connect server stream (PromptStream) over HTTP/1.1", async () => {
    const client = createClient(
      SessionService,
      createConnectTransport({ baseUrl: t.ledger.url, httpVersion: "1.1", useBinaryFormat: true }),
    );
    expectConnectTooLarge(await drainFailure(client.promptStream(bigPrompt())), binarySize());
    await expectNothingStored();
  });

  it("gRPC with connect-es over h2c (size from the envelope header)", async () => {
    const client = createClient(SessionService, createGrpcTransport({ baseUrl: t.ledger.url, sessionManager: h2 }));
    expectConnectTooLarge(await failure(client.prompt(bigPrompt())), binarySize());
  });

  it("gRPC with connect-es, gzip-compressed envelope over the limit decompressed", async () => {
    const client = createClient(
      SessionService,
      createGrpcTransport({ baseUrl: t.ledger.url, sessionManager: h2, sendCompression: compressionGzip }),
    );
    expectConnectTooLarge(await failure(client.prompt(bigPrompt())), undefined, true);
  });

  it("gRPC server stream (PromptStream) with connect-es over h2c", async () => {
    const client = createClient(SessionService, createGrpcTransport({ baseUrl: t.ledger.url, sessionManager: h2 }));
    expectConnectTooLarge(await drainFailure(client.promptStream(bigPrompt())), binarySize());
  });

  it("gRPC-Web over HTTP/1.1, unary and server stream", async () => {
    const transport: Transport = createGrpcWebTransport({ baseUrl: t.ledger.url, httpVersion: "1.1" });
    const client = createClient(SessionService, transport);
    expectConnectTooLarge(await failure(client.prompt(bigPrompt())), binarySize());
    expectConnectTooLarge(await drainFailure(client.promptStream(bigPrompt())), binarySize());
    await expectNothingStored();
  });

  it("@grpc/grpc-js: RESOURCE_EXHAUSTED with grpc-status-details-bin holding ErrorInfo", async () => {
    const client = grpcLedgerClient(t.ledger.url);
    try {
      const error = await new Promise<grpc.ServiceError | null>((resolve) =>
        client.prompt!({ sessionId, noReply: true, parts: [{ text: { text: "x".repeat(3 * LIMIT) } }] }, (e) => resolve(e)),
      );
      expect(error).not.toBeNull();
      const [bin] = error!.metadata.get("grpc-status-details-bin");
      expect(bin).toBeInstanceOf(Buffer);
      const status = fromBinary(StatusSchema, new Uint8Array(bin as Buffer));
      expect(status.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      // grpc-message is percent-encoded as the gRPC spec says (src/server/grpc-message.ts), so
      // grpc-js reads the exact text, as the Status in grpc-status-details-bin has it.
      expect(error!.details).toBe(status.message);
      const info = status.details.map((d) => anyUnpack(d, ErrorInfoSchema)).find((d) => d !== undefined);
      expectTooLarge(error!.code as number as Code, status.message, info, binarySize());
    } finally {
      client.close();
    }
    await expectNothingStored();
  });

  it("a request under the limit still works on the same server", async () => {
    const res = await t.client.prompt({ sessionId, noReply: true, parts: [text("small")] });
    expect(res.message?.parts).toHaveLength(1);
  });
});

describe("the limit is the server's own: connect-es has none and is never asked", () => {
  // This adapter is built like the ledger's (withProtocolErrors, errorInterceptor) but sets no
  // readMaxBytes, so connect-es's default (4 GiB) never refuses: each refusal below comes from
  // the server alone, and none can depend on connect-es's wording. The regular expressions this
  // replaced needed connect-es to refuse first, in words they knew; here every call would have
  // gone through.
  const SERVING = HealthCheckResponse_ServingStatus.SERVING;
  let h1: http.Server;
  let h2s: http2.Http2Server;
  let url1: string;
  let url2: string;
  let bareH2: Http2SessionManager;
  const sessions = new Set<http2.ServerHttp2Session>();

  beforeAll(async () => {
    const adapter = connectNodeAdapter(
      withProtocolErrors(
        {
          routes: (router) =>
            router.service(Health, {
              check: () => ({ status: SERVING }),
              async *watch() {
                yield { status: SERVING };
              },
            }),
          interceptors: [errorInterceptor],
        },
        LIMIT,
      ),
    );
    h1 = http.createServer(adapter);
    h2s = http2.createServer(adapter);
    h2s.on("session", (session) => {
      sessions.add(session);
      session.once("close", () => sessions.delete(session));
    });
    url1 = await listen(h1);
    url2 = await listen(h2s);
    bareH2 = new Http2SessionManager(url2);
  });

  afterAll(async () => {
    bareH2?.abort();
    for (const session of sessions) session.destroy();
    h1?.closeAllConnections();
    await Promise.all([h1, h2s].map((server) => server && new Promise((resolve) => server.close(resolve))));
  });

  async function listen(server: net.Server): Promise<string> {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  }

  /** A Check request of exactly `bytes` bytes in the binary format (tag, 2-byte length, text). */
  const checkOf = (bytes: number) => ({ service: "x".repeat(bytes - 3) });
  const sizeOf = (bytes: number) => toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, checkOf(bytes))).byteLength;

  it("gRPC over h2c: a message of exactly request_bytes passes, one byte more is refused naming its size", async () => {
    expect(sizeOf(LIMIT)).toBe(LIMIT);
    const client = createClient(Health, createGrpcTransport({ baseUrl: url2, sessionManager: bareH2 }));
    expect((await client.check(checkOf(LIMIT))).status).toBe(SERVING);
    expectConnectTooLarge(await failure(client.check(checkOf(LIMIT + 1))), LIMIT + 1);
    expectConnectTooLarge(await drainFailure(client.watch(checkOf(LIMIT + 1))), LIMIT + 1);
  });

  it("Connect unary JSON: with a content-length (size named), and streamed by connect-es (size unknown)", async () => {
    const body = toJsonString(HealthCheckRequestSchema, create(HealthCheckRequestSchema, checkOf(2 * LIMIT)));
    const res = await fetch(`${url1}/grpc.health.v1.Health/Check`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });
    expect(res.status).toBe(429);
    const bytes = new Uint8Array(await res.arrayBuffer());
    expectConnectTooLarge(errorFromJsonBytes(bytes, undefined, new ConnectError("unparsable", Code.Unknown)), Buffer.byteLength(body));
    const client = createClient(Health, createConnectTransport({ baseUrl: url1, httpVersion: "1.1" }));
    expectConnectTooLarge(await failure(client.check(checkOf(2 * LIMIT))));
  });

  it("Connect server stream and gRPC-Web (unary and stream) over HTTP/1.1: size from the envelope", async () => {
    const connect = createClient(Health, createConnectTransport({ baseUrl: url1, httpVersion: "1.1", useBinaryFormat: true }));
    expectConnectTooLarge(await drainFailure(connect.watch(checkOf(LIMIT + 1))), LIMIT + 1);
    const web = createClient(Health, createGrpcWebTransport({ baseUrl: url1, httpVersion: "1.1" }));
    expectConnectTooLarge(await failure(web.check(checkOf(LIMIT + 1))), LIMIT + 1);
    expectConnectTooLarge(await drainFailure(web.watch(checkOf(LIMIT + 1))), LIMIT + 1);
  });

  it("gzip under the limit but over it decompressed: Connect unary and gRPC", async () => {
    const connect = createClient(
      Health,
      createConnectTransport({ baseUrl: url1, httpVersion: "1.1", useBinaryFormat: true, sendCompression: compressionGzip }),
    );
    expectConnectTooLarge(await failure(connect.check(checkOf(3 * LIMIT))), undefined, true);
    const grpcClient = createClient(
      Health,
      createGrpcTransport({ baseUrl: url2, sessionManager: bareH2, sendCompression: compressionGzip }),
    );
    expectConnectTooLarge(await failure(grpcClient.check(checkOf(3 * LIMIT))), undefined, true);
  });
});
