/**
 * What the fake model servers (./openai-server.ts, ./anthropic-server.ts,
 * ./openai-responses-server.ts) and the model proxy (./model-proxy.ts) share: a loopback HTTP
 * server that destroys its open connections on close, JSON request bodies, JSON replies and SSE
 * writes that stop when the client went away.
 */
import { once } from "node:events";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { sleep } from "./wait.js";

/** A running loopback server; see {@link listenLoopback}. */
export interface LoopbackServer {
  /** `http://127.0.0.1:PORT`, no trailing slash. */
  origin: string;
  /** Stops listening and destroys every open connection (including hung streams). */
  close(): Promise<void>;
}

/**
 * Serves `handle` on 127.0.0.1 with an ephemeral port. A handler that throws answers 500 with
 * `{ error: { message } }` (or cuts the connection when the headers were already sent).
 */
export async function listenLoopback(handle: (req: IncomingMessage, res: ServerResponse) => Promise<void>): Promise<LoopbackServer> {
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    void handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) sendJson(res, 500, { error: { message: String(error), type: "server_error", code: null } });
      else res.destroy();
    });
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}

/** The request body parsed as a JSON object; throws (→ 500) when it is not one. */
export async function readJsonObject(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const parsed: unknown = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("request body is not a JSON object");
  return parsed as Record<string, unknown>;
}

/** Answers `status` with `body` as JSON plus `headers`. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

/** Writes server-sent events to one response; see {@link openSse}. */
export interface SseWriter {
  /** Writes `event: <name>` (when given) and `data: <JSON>`; false once the client is gone. */
  send(data: unknown, event?: string): Promise<boolean>;
  /** Keeps the stream open until the client goes away (or the server closes). */
  hang(): Promise<void>;
  /** Ends the response. */
  end(): void;
}

/** Starts a 200 `text/event-stream` response; `delayMs` waits between events. */
export function openSse(res: ServerResponse, delayMs = 0): SseWriter {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  res.flushHeaders();
  let sent = 0;
  return {
    async send(data, event) {
      if (res.destroyed || res.writableEnded) return false;
      if (sent++ > 0 && delayMs > 0) {
        await sleep(delayMs);
        if (res.destroyed) return false;
      }
      res.write(`${event ? `event: ${event}\n` : ""}data: ${JSON.stringify(data)}\n\n`);
      return true;
    },
    async hang() {
      if (!res.destroyed) await once(res, "close");
    },
    end() {
      if (!res.destroyed) res.end();
    },
  };
}
