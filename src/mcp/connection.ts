import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { Readable } from "node:stream";
import type { McpLocalConfig } from "../config/mcp.js";
import { loadOnce } from "../load-once.js";
import {
  mcpToolId,
  type McpResourceInfo,
  type McpResourceTemplateInfo,
  type McpServerStatus,
  type McpTool,
  type McpToolResult,
} from "./reader.js";
import { logger } from "../observe/log.js";
import { logStderr } from "./stderr-log.js";

type ResourceContents = Awaited<ReturnType<Client["readResource"]>>["contents"];

/** Most pages of `tools/list` read from one server (a server paging forever lists the first ones only). */
const MAX_TOOL_PAGES = 50;

/** The SDK's stdio transport error when a message passes its read buffer (`ReadBuffer`, shared/stdio.js): it then closes the connection. */
const STDIO_OVERFLOW = /ReadBuffer exceeded maximum size of (\d+) bytes/;

/** Clients whose transport hit the stdio buffer limit, with that limit (bytes). */
const overflowed = new WeakMap<Client, number>();
/** Clients whose errors are watched for {@link STDIO_OVERFLOW}. */
const watched = new WeakSet<Client>();

/** The parts of the MCP SDK the connections use. */
interface Sdk {
  Client: typeof import("@modelcontextprotocol/sdk/client/index.js").Client;
  StdioClientTransport: typeof import("@modelcontextprotocol/sdk/client/stdio.js").StdioClientTransport;
  McpError: typeof import("@modelcontextprotocol/sdk/types.js").McpError;
  ErrorCode: typeof import("@modelcontextprotocol/sdk/types.js").ErrorCode;
  ToolListChangedNotificationSchema: typeof import("@modelcontextprotocol/sdk/types.js").ToolListChangedNotificationSchema;
}

/**
 * The MCP SDK (with ajv and zod-to-json-schema), imported on the first MCP use: a ledger
 * without MCP servers, or whose prompts and loops use none, never loads it. A failed load is
 * tried again on the next use, not cached for the process.
 */
const loadSdk: () => Promise<Sdk> = loadOnce(() =>
  Promise.all([
    import("@modelcontextprotocol/sdk/client/index.js"),
    import("@modelcontextprotocol/sdk/client/stdio.js"),
    import("@modelcontextprotocol/sdk/types.js"),
  ]).then(([client, stdio, types]) => ({
    Client: client.Client,
    StdioClientTransport: stdio.StdioClientTransport,
    McpError: types.McpError,
    ErrorCode: types.ErrorCode,
    ToolListChangedNotificationSchema: types.ToolListChangedNotificationSchema,
  })),
);

/**
 * One local (stdio) server: a client connected on demand, dropped when its process ends (the
 * next use starts a new one). Concurrent users of a start wait for the same one.
 */
export class Connection {
  private current?: { client: Client; ready: Promise<Client>; connected: boolean; tools?: Promise<McpTool[]> };
  private closed = false;
  /** The last start's failure and when (ms since the epoch); cleared by a successful start. */
  failure?: { error: string; at: number };

  constructor(
    private readonly name: string,
    private readonly server: McpLocalConfig,
  ) {}

  /** Where the server stands (see {@link McpServerStatus}). */
  get status(): McpServerStatus {
    if (this.current?.connected) return { status: "connected" };
    if (this.failure) return { status: "failed", error: this.failure.error };
    return { status: "idle" };
  }

  /** Reads `uri`, bounded by the server's `timeout` (start included) and `signal`. */
  read(uri: string, signal?: AbortSignal): Promise<ResourceContents> {
    return this.request(signal, this.server.timeoutMs, async (client, abort) => {
      const result = await client.readResource({ uri }, { signal: abort, timeout: this.server.timeoutMs });
      return result.contents;
    });
  }

  /** The server's tools (every page), listed once per process of the server and again after it says they changed. */
  listTools(signal?: AbortSignal): Promise<McpTool[]> {
    return this.request(signal, this.server.timeoutMs, async (client, abort) => {
      const current = this.current;
      if (current?.client === client && current.tools) return current.tools;
      const listing = (async () => {
        const tools: McpTool[] = [];
        // A server without the tools capability (resources only) has none: asking would fail.
        if (!client.getServerCapabilities()?.tools) return tools;
        let cursor: string | undefined;
        for (let page = 0; page < MAX_TOOL_PAGES; page++) {
          const result = await client.listTools(cursor ? { cursor } : {}, { signal: abort, timeout: this.server.timeoutMs });
          for (const t of result.tools)
            tools.push({
              server: this.name,
              name: t.name,
              id: mcpToolId(this.name, t.name),
              description: t.description ?? "",
              inputSchema: t.inputSchema as Record<string, unknown>,
            });
          cursor = result.nextCursor;
          if (!cursor) break;
        }
        return tools;
      })();
      if (current?.client === client) current.tools = listing;
      // A failed listing is not kept: the next step asks again.
      listing.catch(() => {
        if (current?.tools === listing) current.tools = undefined;
      });
      return listing;
    });
  }

  /** Calls `tool` with `args`: bounded by the server's start `timeout` to start, then by the SDK's 60 s request timeout (reset on progress) and `signal`. */
  callTool(tool: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<McpToolResult> {
    return this.request(signal, undefined, async (client, abort) => {
      const result = await client.callTool({ name: tool, arguments: args }, undefined, { signal: abort, resetTimeoutOnProgress: true });
      return result as McpToolResult;
    });
  }

  /** Stops the server's process; later uses fail with "MCP is shut down". */
  async close(): Promise<void> {
    this.closed = true;
    const current = this.current;
    this.current = undefined;
    await current?.client.close().catch(() => undefined);
  }

  /**
   * Runs `fn` on a started client. `timeoutMs` (when given) bounds the start and `fn` together;
   * otherwise the start alone is bounded by the server's `timeout`. Errors: the server's error
   * without the SDK's doubled "MCP error <code>: " prefix, or `did not answer within <ms> ms`.
   */
  private async request<T>(
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    fn: (client: Client, abort: AbortSignal | undefined) => Promise<T>,
  ): Promise<T> {
    const limit = timeoutMs ?? this.server.timeoutMs;
    const deadline = AbortSignal.timeout(limit);
    const startAbort = signal ? AbortSignal.any([signal, deadline]) : deadline;
    const { McpError, ErrorCode } = await loadSdk();
    const failure = (error: unknown, bounded: boolean): unknown => {
      const timedOut = (bounded && deadline.aborted) || (error instanceof McpError && error.code === ErrorCode.RequestTimeout);
      if (timedOut && !signal?.aborted) {
        const ms = bounded && deadline.aborted ? limit : ((error as { data?: { timeout?: number } }).data?.timeout ?? limit);
        return new Error(`MCP server ${JSON.stringify(this.name)} did not answer within ${ms} ms`);
      }
      // The SDK prefixes a server's McpError message with "MCP error <code>: " a second time.
      if (error instanceof McpError) return new Error(error.message.replace(/^(MCP error -?\d+: )\1+/, "$1"), { cause: error });
      return error;
    };
    let client: Client;
    try {
      client = await untilAborted(this.connect(), startAbort);
    } catch (error) {
      throw failure(error, true);
    }
    this.watchOverflow(client);
    try {
      // Without `timeoutMs` the call itself is bounded by the SDK's request timeout, not the deadline.
      return await fn(client, timeoutMs === undefined ? signal : startAbort);
    } catch (error) {
      throw this.overflowError(client) ?? failure(error, timeoutMs !== undefined);
    }
  }

  private async connect(): Promise<Client> {
    if (this.closed) throw new Error("MCP is shut down");
    if (this.current) return this.current.ready;
    const sdk = await loadSdk();
    if (this.closed) throw new Error("MCP is shut down");
    if (this.current) return (this.current as { ready: Promise<Client> }).ready;
    const [command, ...args] = this.server.command;
    const transport = new sdk.StdioClientTransport({ command: command!, args, env: this.server.environment, stderr: "pipe" });
    if (transport.stderr) logStderr(this.name, transport.stderr as Readable);
    const client = new sdk.Client({ name: "session-ledger", version: "0.1.0" }, { capabilities: {} });
    const drop = () => {
      if (this.current?.client === client) this.current = undefined;
    };
    // The process ended (or the connection broke): the next use starts a new one.
    client.onclose = drop;
    client.setNotificationHandler(sdk.ToolListChangedNotificationSchema, () => {
      if (this.current?.client === client) this.current.tools = undefined;
    });
    const ready = client.connect(transport, { timeout: this.server.timeoutMs }).then(
      () => {
        if (this.current?.client === client) this.current.connected = true;
        this.failure = undefined;
        return client;
      },
      async (error: unknown) => {
        drop();
        await client.close().catch(() => undefined);
        const message = `MCP server ${JSON.stringify(this.name)} could not start: ${error instanceof Error ? error.message : String(error)}`;
        this.failure = { error: message, at: Date.now() };
        throw new Error(message);
      },
    );
    this.current = { client, ready, connected: false };
    return ready;
  }

  /**
   * One page of the server's resources (MCP `resources/list` from `cursor`), bounded by the
   * server's `timeout` (start included) and `signal`; none when the server does not declare the
   * `resources` capability.
   */
  listResources(cursor?: string, signal?: AbortSignal): Promise<{ resources: McpResourceInfo[]; nextCursor?: string }> {
    return this.request(signal, this.server.timeoutMs, async (client, abort) => {
      if (!client.getServerCapabilities()?.resources) return { resources: [] };
      const result = await client.listResources(cursor ? { cursor } : {}, { signal: abort, timeout: this.server.timeoutMs });
      const resources = result.resources.map((r): McpResourceInfo => ({
        uri: r.uri,
        name: r.name,
        ...described(r),
        ...(typeof r.size === "number" ? { size: r.size } : {}),
      }));
      return { resources, nextCursor: result.nextCursor };
    });
  }

  /** One page of the server's resource templates (MCP `resources/templates/list`), as {@link listResources}. */
  listResourceTemplates(cursor?: string, signal?: AbortSignal): Promise<{ templates: McpResourceTemplateInfo[]; nextCursor?: string }> {
    return this.request(signal, this.server.timeoutMs, async (client, abort) => {
      if (!client.getServerCapabilities()?.resources) return { templates: [] };
      const result = await client.listResourceTemplates(cursor ? { cursor } : {}, { signal: abort, timeout: this.server.timeoutMs });
      const templates = result.resourceTemplates.map((t): McpResourceTemplateInfo => ({
        uriTemplate: t.uriTemplate,
        name: t.name,
        ...described(t),
      }));
      return { templates, nextCursor: result.nextCursor };
    });
  }

  /** Notes on `client` when its stdio transport reports a message over the SDK's read buffer (the SDK then closes the connection). */
  private watchOverflow(client: Client): void {
    if (watched.has(client)) return;
    watched.add(client);
    const previous = client.onerror;
    client.onerror = (error: Error) => {
      const limit = STDIO_OVERFLOW.exec(error.message)?.[1];
      if (limit) {
        overflowed.set(client, Number(limit));
        logger.warn("mcp server message over the stdio limit", { server: this.name, limit: Number(limit) });
      }
      previous?.(error);
    };
  }

  /** The error naming the stdio limit, when `client`'s connection was closed for a message over it. */
  private overflowError(client: Client): Error | undefined {
    const limit = overflowed.get(client);
    if (limit === undefined) return undefined;
    return new Error(
      `MCP server ${JSON.stringify(this.name)} sent a message larger than the stdio limit (${limit} bytes); the connection was closed and the server starts again on its next use`,
    );
  }
}

/** `promise`, or a rejection as soon as `signal` aborts (the promise itself goes on). */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
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

/** The optional descriptive fields of a listed resource or template, those the server gave. */
function described(entry: { title?: string; description?: string; mimeType?: string }): {
  title?: string;
  description?: string;
  mimeType?: string;
} {
  return {
    ...(entry.title ? { title: entry.title } : {}),
    ...(entry.description ? { description: entry.description } : {}),
    ...(entry.mimeType ? { mimeType: entry.mimeType } : {}),
  };
}
