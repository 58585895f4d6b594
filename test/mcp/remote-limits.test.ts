import http from "node:http";
import type net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { limitedFetch, MessageTooLarge, REMOTE_MESSAGE_LIMIT } from "../../src/mcp/transports.js";
import { captureStderr } from "../support/stderr.js";
import { waitFor } from "../support/wait.js";
import { mcpReaders } from "../support/mcp-servers.js";

// The size limit on what a remote MCP server sends: a small hand-written MCP server on loopback
// (Streamable HTTP, and the older HTTP+SSE) whose resources are bigger than the limit, sent as
// one JSON body, as one event of an event stream, or as many small events.

const LIMIT = REMOTE_MESSAGE_LIMIT;
/** What the server sends of an endless resource before giving up (never reached: the client stops reading). */
const ENDLESS = 8 * LIMIT;

const stderr = captureStderr();
const mcpOf = mcpReaders();

type Message = { jsonrpc: "2.0"; id?: number; method?: string; params?: Record<string, unknown> };

/** Writes `size` bytes of `x` to `res` in 64 KiB chunks, waiting for drains; the bytes written (fewer when the client hung up). */
async function writeFiller(res: http.ServerResponse, size: number): Promise<number> {
  const chunk = Buffer.alloc(64 * 1024, "x");
  let written = 0;
  while (written < size && !res.destroyed) {
    const part = chunk.subarray(0, Math.min(chunk.length, size - written));
    written += part.length;
    if (!res.write(part)) await drained(res);
  }
  return written;
}

/** Resolves when `res` drains or closes. */
function drained(res: http.ServerResponse): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      res.off("drain", done);
      res.off("close", done);
      resolve();
    };
    res.on("drain", done);
    res.on("close", done);
  });
}

/** The fake server: its port, the bytes it wrote of the last endless resource, and its stop. */
interface Fake {
  port: number;
  sent: number[];
  close(): Promise<void>;
}

/**
 * An MCP server of resources only: `initialize`, `resources/read` of `huge://json` (an endless
 * JSON body), `huge://event` (an event stream whose one event never ends), `many://events`
 * (12 MiB of small log notifications, then the answer `ok`), anything else `ok`. Streamable
 * HTTP at `/mcp`; at `/sse` the older protocol (POST answered 404, the stream at GET `/sse`,
 * messages POSTed to `/message`).
 */
async function fakeServer(): Promise<Fake> {
  const sent: number[] = [];
  let sseStream: http.ServerResponse | undefined;
  const answer = async (message: Message, res: http.ServerResponse, sse: boolean): Promise<void> => {
    const result =
      message.method === "initialize"
        ? { protocolVersion: message.params!.protocolVersion, capabilities: { resources: {} }, serverInfo: { name: "fake", version: "1" } }
        : { contents: [{ uri: String(message.params?.uri), text: "ok" }] };
    const head = (type: string) => {
      if (!sse) res.writeHead(200, { "content-type": type, "mcp-session-id": "s1" });
    };
    const event = (body: unknown) => res.write(`event: message\ndata: ${JSON.stringify(body)}\n\n`);
    const uri = message.params?.uri;
    if (uri === "huge://json" && !sse) {
      head("application/json");
      res.write(`{"jsonrpc":"2.0","id":${message.id},"result":{"contents":[{"uri":"huge://json","text":"`);
      sent.push(await writeFiller(res, ENDLESS));
      res.end('"}]}}');
    } else if (uri === "huge://event") {
      head("text/event-stream");
      res.write(`event: message\ndata: {"jsonrpc":"2.0","id":${message.id},"result":{"contents":[{"uri":"huge://event","text":"`);
      sent.push(await writeFiller(res, ENDLESS));
      res.write('"}]}}\n\n');
      if (!sse) res.end();
    } else if (uri === "many://events") {
      head("text/event-stream");
      const data = "y".repeat(10_000);
      for (let i = 0; i < 1200 && !res.destroyed; i++)
        if (!event({ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data } })) await drained(res);
      event({ jsonrpc: "2.0", id: message.id, result });
      if (!sse) res.end();
    } else if (!sse)
      res
        .writeHead(200, { "content-type": "application/json", "mcp-session-id": "s1" })
        .end(JSON.stringify({ jsonrpc: "2.0", id: message.id, result }));
    else event({ jsonrpc: "2.0", id: message.id, result });
  };
  const server = http.createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      if (path === "/mcp" && req.method === "POST") {
        const message = JSON.parse(body) as Message;
        if (message.id === undefined) return void res.writeHead(202).end();
        void answer(message, res, false);
      } else if (path === "/sse" && req.method === "GET") {
        sseStream = res;
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write("event: endpoint\ndata: /message?sessionId=s1\n\n");
      } else if (path === "/message" && req.method === "POST") {
        res.writeHead(202).end();
        const message = JSON.parse(body) as Message;
        if (message.id !== undefined && sseStream) void answer(message, sseStream, true);
      } else res.writeHead(path === "/mcp" ? 405 : 404).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    sent,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe("a remote server's messages are bounded by the HTTP limit (10 MiB, the stdio one)", () => {
  let fake: Fake;
  beforeAll(async () => {
    fake = await fakeServer();
  });
  afterAll(async () => {
    await fake?.close();
  });

  const tooLarge = (name: string) =>
    `MCP server "${name}" at http://127.0.0.1:${fake.port} sent a message larger than the HTTP limit (${LIMIT} bytes); the connection was closed and the next use connects again`;

  it("an endless JSON answer (Streamable HTTP) fails naming the limit, read no further, logged without the headers; the next use connects again", async () => {
    expect(LIMIT).toBe(10 * 1024 * 1024);
    const headers = { Authorization: "Bearer s3cr3t-t0ken" };
    const mcp = await mcpOf({ big: { type: "remote", url: `http://127.0.0.1:${fake.port}/mcp`, headers, timeout: 20_000 } });
    fake.sent.length = 0;
    await expect(mcp.read("big", "huge://json")).rejects.toThrow(new Error(tooLarge("big")));
    // The client stopped reading near the limit (the socket buffers hold a few MiB more at most).
    await waitFor("the server to see the hang-up", () => fake.sent.length === 1);
    expect(fake.sent[0]).toBeLessThan(3 * LIMIT);
    const records = stderr
      .written()
      .join("")
      .split("\n")
      .filter((line) => line.includes("over the HTTP limit"));
    expect(records.map((line) => JSON.parse(line) as Record<string, unknown>)).toEqual([
      { time: expect.any(String), level: "warn", msg: "mcp server message over the HTTP limit", server: "big", limit: LIMIT },
    ]);
    expect(stderr.written().join("")).not.toContain("s3cr3t-t0ken");
    expect(await mcp.read("big", "small://one")).toEqual([{ text: "ok" }]);
  });

  it("an event stream counts each event apart: one endless event fails, 12 MiB of small events pass", async () => {
    const mcp = await mcpOf({ big: { type: "remote", url: `http://127.0.0.1:${fake.port}/mcp`, timeout: 20_000 } });
    expect(await mcp.read("big", "many://events")).toEqual([{ text: "ok" }]);
    fake.sent.length = 0;
    await expect(mcp.read("big", "huge://event")).rejects.toThrow(new Error(tooLarge("big")));
    await waitFor("the server to see the hang-up", () => fake.sent.length === 1);
    expect(fake.sent[0]).toBeLessThan(3 * LIMIT);
    expect(await mcp.read("big", "many://events")).toEqual([{ text: "ok" }]);
  });

  it("over HTTP+SSE (the long-lived stream): 12 MiB of small events pass, one endless event fails naming the limit", async () => {
    const mcp = await mcpOf({ old: { type: "remote", url: `http://127.0.0.1:${fake.port}/sse`, timeout: 20_000 } });
    expect(await mcp.read("old", "many://events")).toEqual([{ text: "ok" }]);
    expect(await mcp.read("old", "many://events")).toEqual([{ text: "ok" }]);
    fake.sent.length = 0;
    await expect(mcp.read("old", "huge://event")).rejects.toThrow(new Error(tooLarge("old")));
    await waitFor("the server to see the hang-up", () => fake.sent.length === 1);
    expect(fake.sent[0]).toBeLessThan(3 * LIMIT);
    expect(await mcp.read("old", "small://one")).toEqual([{ text: "ok" }]);
  });
});

describe("limitedFetch (a limit of 100 bytes)", () => {
  /** The text `limitedFetch` gives of a body sent in `chunks` as `type`, or its error, and the overflows it reported. */
  async function read(type: string, chunks: string[]): Promise<{ text?: string; error?: unknown; overflows: number }> {
    let overflows = 0;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(new TextEncoder().encode(chunk));
        controller.close();
      },
    });
    const base = () => Promise.resolve(new Response(body, { headers: { "content-type": type } }));
    const response = await limitedFetch(100, () => overflows++, base)("http://127.0.0.1/mcp");
    return response.text().then(
      (text) => ({ text, overflows }),
      (error: unknown) => ({ error, overflows }),
    );
  }

  it("a body counts whole: 100 bytes pass, 101 fail with MessageTooLarge, reported once", async () => {
    expect(await read("application/json", ["x".repeat(60), "x".repeat(40)])).toEqual({ text: "x".repeat(100), overflows: 0 });
    const over = await read("application/json", ["x".repeat(60), "x".repeat(41)]);
    expect(over).toEqual({ error: new MessageTooLarge(100), overflows: 1 });
    expect((over.error as Error).message).toBe("the server sent a message larger than the HTTP limit (100 bytes)");
  });

  it("an event stream counts each event apart, whatever its line endings (\\n, \\r\\n, \\r), split anywhere across chunks", async () => {
    const event = (end: string) => `data: ${"y".repeat(80)}${end}${end}`;
    const stream = [event("\n"), event("\r\n"), event("\r"), event("\n")].join("");
    // Split into chunks of 7 bytes: boundaries fall inside events and inside "\r\n".
    const chunks = stream.match(/[\s\S]{1,7}/g)!;
    expect(await read("text/event-stream; charset=utf-8", chunks)).toEqual({ text: stream, overflows: 0 });
    const long = await read("text/event-stream", [event("\n"), `data: ${"z".repeat(95)}`, "\n\n"]);
    expect(long).toEqual({ error: new MessageTooLarge(100), overflows: 1 });
  });
});
