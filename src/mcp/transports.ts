import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { Readable } from "node:stream";
import type { McpLocalConfig, McpRemoteConfig } from "../config/mcp.js";
import { loadOnce } from "../load-once.js";
import { logStderr } from "./stderr-log.js";

// How a Connection reaches its server: the MCP SDK loaded on first use, a local server's stdio
// process, a remote server's Streamable HTTP (or HTTP+SSE) session, and their errors.

/** The parts of the MCP SDK the connections use. */
export interface Sdk {
  Client: typeof import("@modelcontextprotocol/sdk/client/index.js").Client;
  StdioClientTransport: typeof import("@modelcontextprotocol/sdk/client/stdio.js").StdioClientTransport;
  StreamableHTTPClientTransport: typeof import("@modelcontextprotocol/sdk/client/streamableHttp.js").StreamableHTTPClientTransport;
  StreamableHTTPError: typeof import("@modelcontextprotocol/sdk/client/streamableHttp.js").StreamableHTTPError;
  SSEClientTransport: typeof import("@modelcontextprotocol/sdk/client/sse.js").SSEClientTransport;
  SseError: typeof import("@modelcontextprotocol/sdk/client/sse.js").SseError;
  McpError: typeof import("@modelcontextprotocol/sdk/types.js").McpError;
  ErrorCode: typeof import("@modelcontextprotocol/sdk/types.js").ErrorCode;
  ToolListChangedNotificationSchema: typeof import("@modelcontextprotocol/sdk/types.js").ToolListChangedNotificationSchema;
  ResourceListChangedNotificationSchema: typeof import("@modelcontextprotocol/sdk/types.js").ResourceListChangedNotificationSchema;
}

/**
 * The MCP SDK (with ajv and zod-to-json-schema), imported on the first MCP use: a ledger
 * without MCP servers, or whose prompts and loops use none, never loads it. A failed load is
 * tried again on the next use, not cached for the process.
 */
export const loadSdk: () => Promise<Sdk> = loadOnce(() =>
  Promise.all([
    import("@modelcontextprotocol/sdk/client/index.js"),
    import("@modelcontextprotocol/sdk/client/stdio.js"),
    import("@modelcontextprotocol/sdk/types.js"),
    import("@modelcontextprotocol/sdk/client/streamableHttp.js"),
    import("@modelcontextprotocol/sdk/client/sse.js"),
  ]).then(([client, stdio, types, streamableHttp, sse]) => ({
    Client: client.Client,
    StdioClientTransport: stdio.StdioClientTransport,
    StreamableHTTPClientTransport: streamableHttp.StreamableHTTPClientTransport,
    StreamableHTTPError: streamableHttp.StreamableHTTPError,
    SSEClientTransport: sse.SSEClientTransport,
    SseError: sse.SseError,
    McpError: types.McpError,
    ErrorCode: types.ErrorCode,
    ToolListChangedNotificationSchema: types.ToolListChangedNotificationSchema,
    ResourceListChangedNotificationSchema: types.ResourceListChangedNotificationSchema,
  })),
);

/** Starts local server `name`'s process and connects to it over stdio, its stderr logged; bounded by its `timeout`. */
export async function startLocal(sdk: Sdk, name: string, server: McpLocalConfig, newClient: () => Client): Promise<Client> {
  const [command, ...args] = server.command;
  const transport = new sdk.StdioClientTransport({ command: command!, args, env: server.environment, stderr: "pipe" });
  if (transport.stderr) logStderr(name, transport.stderr as Readable);
  const client = newClient();
  await client.connect(transport, { timeout: server.timeoutMs });
  return client;
}

/**
 * Connects to the remote server within its `timeout`: over Streamable HTTP, or, when that is
 * answered with a 4xx status other than 401 (a server of the older protocol), over HTTP+SSE at
 * the same URL, as the MCP SDK's docs advise. `headers` go on every request of both. A 401
 * (from either) fails with {@link NeedsAuth}; `isClosed` says whether MCP was shut down meanwhile.
 * Every answer's body is read through {@link limitedFetch} ({@link REMOTE_MESSAGE_LIMIT}):
 * `onOverflow` is told when one passes it (the request reading it fails with that error too).
 */
export async function startRemote(
  sdk: Sdk,
  server: McpRemoteConfig,
  newClient: () => Client,
  isClosed: () => boolean,
  onOverflow: (error: MessageTooLarge) => void,
): Promise<Client> {
  const url = new URL(server.url);
  const requestInit: RequestInit = { headers: server.headers };
  const fetch = limitedFetch(REMOTE_MESSAGE_LIMIT, onOverflow);
  const deadline = AbortSignal.timeout(server.timeoutMs);
  const attempt = async (transport: Parameters<Client["connect"]>[0]): Promise<Client> => {
    const client = newClient();
    try {
      await untilAborted(client.connect(transport, { timeout: server.timeoutMs }), deadline);
      return client;
    } catch (error) {
      await closeClient(client);
      throw deadline.aborted ? new Error(`timed out after ${server.timeoutMs} ms`) : error;
    }
  };
  try {
    return await attempt(new sdk.StreamableHTTPClientTransport(url, { requestInit, fetch }));
  } catch (error) {
    const status = error instanceof sdk.StreamableHTTPError ? (error.code ?? 0) : 0;
    // 401: the server speaks Streamable HTTP and wants authorization (OAuth: not supported yet).
    if (status === 401) throw new NeedsAuth(error as Error);
    if (status < 400 || status >= 500 || deadline.aborted) throw error;
    if (isClosed()) throw new Error("MCP is shut down");
    try {
      return await attempt(new sdk.SSEClientTransport(url, { requestInit, fetch }));
    } catch (sseError) {
      if (sseError instanceof sdk.SseError && sseError.code === 401) throw new NeedsAuth(sseError);
      throw new Error(`Streamable HTTP: ${reason(error)}; SSE: ${reason(sseError)}`, { cause: sseError });
    }
  }
}

/**
 * The most bytes of one message from a remote server (10 MiB): the SDK's stdio read buffer
 * limit (`STDIO_DEFAULT_MAX_BUFFER_SIZE`), so a remote server can send no more than a local one.
 */
export const REMOTE_MESSAGE_LIMIT = 10 * 1024 * 1024;

/** A remote server's answer (a body, or one event of an event stream) passed {@link REMOTE_MESSAGE_LIMIT}. */
export class MessageTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`the server sent a message larger than the HTTP limit (${limit} bytes)`);
  }
}

type FetchLike = (url: string | URL, init?: RequestInit) => Promise<Response>;

/**
 * `fetch` whose answers' bodies are counted as they are read, so that no answer is ever held
 * whole past `limit` bytes: a body (an `application/json` answer, an error page) counts as one
 * message; an event stream (`text/event-stream`, long-lived) counts each event apart (the
 * bytes up to the blank line ending it). Past `limit` the body fails with {@link MessageTooLarge}
 * (the HTTP response is cancelled, closing its connection) and `onOverflow` is called with it.
 */
export function limitedFetch(limit: number, onOverflow: (error: MessageTooLarge) => void, base: FetchLike = fetch): FetchLike {
  return async (url, init) => {
    const response = await base(url, init);
    if (!response.body || [101, 204, 205, 304].includes(response.status)) return response;
    const stream = (response.headers.get("content-type") ?? "").toLowerCase().includes("text/event-stream");
    let size = 0;
    // Event streams: whether the bytes read so far end a line, and whether the last byte was a "\r"
    // (a line ends with "\r\n", "\n" or "\r", as the SSE spec has it).
    let lineStart = true;
    let afterCr = false;
    const counted = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        if (!stream) size += chunk.byteLength;
        else
          for (const byte of chunk) {
            if (byte === 10 || byte === 13) {
              const crlf = byte === 10 && afterCr;
              afterCr = byte === 13;
              if (crlf) continue;
              // A blank line ends an event: the next one counts from 0.
              if (lineStart) size = 0;
              lineStart = true;
            } else {
              afterCr = false;
              lineStart = false;
              if (++size > limit) break;
            }
          }
        if (size > limit) {
          const error = new MessageTooLarge(limit);
          controller.error(error);
          onOverflow(error);
          return;
        }
        controller.enqueue(chunk);
      },
    });
    const limited = new Response(response.body.pipeThrough(counted), {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
    // The SDK compares a response's URL with the request's (redirects): keep fetch's.
    Object.defineProperty(limited, "url", { value: response.url });
    return limited;
  };
}

/** A remote server answered 401: it asks for authorization the ledger cannot give (status `needs_auth`). */
export class NeedsAuth extends Error {
  constructor(cause: Error) {
    super(`it asks for authorization (HTTP 401); OAuth is not supported yet: put a token in "headers" (${reason(cause)})`, { cause });
  }
}

/**
 * Closes `client`: a Streamable HTTP session is ended first (`DELETE`, at most
 * {@link SESSION_END_MS}; a server may not support it), then the transport (a local server's
 * process is stopped).
 */
export async function closeClient(client: Client): Promise<void> {
  const transport = client.transport as { sessionId?: string; terminateSession?: () => Promise<void> } | undefined;
  if (transport?.terminateSession && transport.sessionId)
    await untilAborted(transport.terminateSession(), AbortSignal.timeout(SESSION_END_MS)).catch(() => undefined);
  await client.close().catch(() => undefined);
}

/** How long (ms) closing a remote connection waits for the server to end its session. */
const SESSION_END_MS = 1_000;

/**
 * The text of a failure: its message, with a network failure's cause instead of fetch's bare
 * "fetch failed" (e.g. `connect ECONNREFUSED 127.0.0.1:8080`), cut to 500 characters (an HTTP
 * error's body may be a whole page).
 */
export function reason(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  let text = error.message;
  if (text === "fetch failed" && error.cause instanceof Error) {
    const cause = error.cause instanceof AggregateError && error.cause.errors[0] instanceof Error ? error.cause.errors[0] : error.cause;
    text = cause.message || (cause as { code?: string }).code || text;
  }
  return text.length > 500 ? `${text.slice(0, 500)}…` : text;
}

/** `promise`, or a rejection as soon as `signal` aborts (the promise itself goes on). */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}
