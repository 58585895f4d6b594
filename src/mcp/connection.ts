import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { McpServerConfig } from "../config/mcp.js";
import { listAllResources, listAllTools } from "./listings.js";
import { type McpResourceListing, type McpServerStatus, type McpTool, type McpToolResult } from "./reader.js";
import { logger } from "../observe/log.js";
import { closeClient, loadSdk, NeedsAuth, reason, startLocal, startRemote, untilAborted } from "./transports.js";

type ResourceContents = Awaited<ReturnType<Client["readResource"]>>["contents"];

/** How long (ms) a server's resource listing is reused (unless the server says it changed before). */
export const RESOURCE_LISTING_MS = 30_000;

/** The SDK's stdio transport error when a message passes its read buffer (`ReadBuffer`, shared/stdio.js): it then closes the connection. */
const STDIO_OVERFLOW = /ReadBuffer exceeded maximum size of (\d+) bytes/;

/** Clients whose transport hit the stdio buffer limit or the HTTP one, with that limit (bytes). */
const overflowed = new WeakMap<Client, number>();
/** Clients whose errors are watched for {@link STDIO_OVERFLOW}. */
const watched = new WeakSet<Client>();

/** The first wait (ms) before starting (connecting to) again a server whose start failed. */
export const RECONNECT_FIRST_MS = 1_000;
/** The longest wait (ms) between two starts (connection attempts) of a server. */
export const RECONNECT_MAX_MS = 30_000;

/**
 * How long (ms) a server, local or remote, is left alone after `failures` failed starts (connection attempts) in a
 * row (1, 2, …): {@link RECONNECT_FIRST_MS} doubled for each failure after the first, at most
 * {@link RECONNECT_MAX_MS} (1 s, 2 s, 4 s, … 30 s).
 */
export function reconnectDelayMs(failures: number): number {
  return Math.min(RECONNECT_FIRST_MS * 2 ** Math.max(0, failures - 1), RECONNECT_MAX_MS);
}

/**
 * One configured server: a client connected on demand and dropped when the connection ends (the
 * next use connects again). Concurrent users of a start wait for the same one.
 *
 * - A local server is a child process spoken to over stdio; it ends when its process ends.
 * - A remote server is spoken to over Streamable HTTP, or, when the server answers the first
 *   request with a 4xx status, over the older HTTP+SSE transport (as the MCP SDK's docs advise),
 *   with the configured `headers` on every request. A request that fails at the HTTP level
 *   (unreachable, an HTTP error status), or an event stream that breaks for good, drops the
 *   connection: the next use connects again (a request answered 404, the session gone, is sent
 *   again at once on a new one). A body, or one event of an event stream, past 10 MiB closes the
 *   connection (as the stdio limit does a local server's).
 * - Failed starts (connection attempts) in a row, of either kind, are spaced by
 *   {@link reconnectDelayMs}: meanwhile uses fail at once with the last error and
 *   `(next attempt in N ms)`, so no caller can start a failing local server over and over.
 *
 * Errors name the server, and a remote server's URL origin (never its path or query, which may
 * hold a token).
 */
export class Connection {
  private current?: {
    client: Client;
    ready: Promise<Client>;
    connected: boolean;
    tools?: Promise<McpTool[]>;
    /** The resource listing and when (ms since the epoch) it was asked for. */
    resources?: { listing: Promise<McpResourceListing>; at: number };
  };
  private closed = false;
  /** Failed starts (connection attempts) in a row, and when (ms since the epoch) the next may start. */
  private retry = { failures: 0, at: 0 };
  /**
   * The last start's failure, or (`listing`) the last tool listing's of the running server, and
   * when (ms since the epoch); cleared by a successful start, or (a listing's) a successful listing.
   */
  failure?: { error: string; at: number; needsAuth?: boolean; listing?: boolean };

  constructor(
    private readonly name: string,
    private readonly server: McpServerConfig,
  ) {}

  /** `MCP server "<name>"`, and for a remote server ` at <origin of its url>`. */
  private get label(): string {
    const name = `MCP server ${JSON.stringify(this.name)}`;
    return this.server.type === "remote" ? `${name} at ${new URL(this.server.url).origin}` : name;
  }

  /** Where the server stands (see {@link McpServerStatus}): `failed` while running when its tools could not be listed. */
  get status(): McpServerStatus {
    if (this.current?.connected && !this.failure?.listing) return { status: "connected" };
    if (this.failure) return { status: this.failure.needsAuth ? "needs_auth" : "failed", error: this.failure.error };
    return { status: "idle" };
  }

  /** Reads `uri`, bounded by the server's `timeout` (start included) and `signal`. */
  read(uri: string, signal?: AbortSignal): Promise<ResourceContents> {
    return this.request(signal, this.server.timeoutMs, async (client, abort) => {
      const result = await client.readResource({ uri }, { signal: abort, timeout: this.server.timeoutMs });
      return result.contents;
    });
  }

  /**
   * The server's tools (every page), listed once per process of the server and again after it
   * says they changed. A listing that fails on the running server is recorded as its
   * {@link failure} (status `failed`) until one succeeds.
   */
  async listTools(signal?: AbortSignal): Promise<McpTool[]> {
    let used: Client | undefined;
    try {
      const tools = await this.request(signal, this.server.timeoutMs, async (client, abort) => {
        used = client;
        const current = this.current;
        const wait = (listing: Promise<McpTool[]>) => (abort ? untilAborted(listing, abort) : listing);
        if (current?.client === client && current.tools) return wait(current.tools);
        // Shared by every caller: bounded by the server's timeout only, so that one caller's abort
        // (a run cancelled) ends that caller's wait, not the listing the others wait for.
        const listing = listAllTools(client, this.name, { timeout: this.server.timeoutMs });
        if (current?.client === client) current.tools = listing;
        // A failed listing is not kept: the next step asks again.
        listing.catch(() => {
          if (current?.tools === listing) current.tools = undefined;
        });
        return wait(listing);
      });
      if (this.failure?.listing && this.current?.client === used) this.failure = undefined;
      return tools;
    } catch (error) {
      // A failed start records its own failure; this is a running server that did not list its tools.
      // (Not when this caller gave up: the shared listing may still succeed.)
      if (!signal?.aborted && used && this.current?.client === used && this.current.connected)
        this.failure = { error: error instanceof Error ? error.message : String(error), at: Date.now(), listing: true };
      throw error;
    }
  }

  /**
   * Calls `tool` with `args`: the start is bounded by the server's `timeout`, then the call by
   * the same `timeout` without an answer, restarted by each progress notification the server
   * sends (the call asks for them with a progress token), and by `signal`.
   */
  callTool(tool: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<McpToolResult> {
    return this.request(signal, undefined, async (client, abort) => {
      const result = await client.callTool({ name: tool, arguments: args }, undefined, {
        signal: abort,
        timeout: this.server.timeoutMs,
        resetTimeoutOnProgress: true,
        // Without a progress handler the SDK sends no progress token, and the server no progress.
        onprogress: () => undefined,
      });
      return result as McpToolResult;
    });
  }

  /** Stops the server's process (local) or ends its session (remote); later uses fail with "MCP is shut down". */
  async close(): Promise<void> {
    this.closed = true;
    const current = this.current;
    this.current = undefined;
    if (current) await closeClient(current.client);
  }

  /**
   * Runs `fn` on a started client. `timeoutMs` (when given) bounds the start and `fn` together;
   * otherwise the start alone is bounded by the server's `timeout`. Errors: the server's error
   * without the SDK's doubled "MCP error <code>: " prefix, `did not answer within <ms> ms`,
   * `Connection closed (…)` when the process ended or the connection was closed during the
   * request, or (remote) `the connection failed: <why>` for an HTTP-level failure, which also
   * drops the connection so that the next use connects again. A remote request answered 404
   * (the session is gone) is sent once more, on a new connection.
   */
  private async request<T>(
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    fn: (client: Client, abort: AbortSignal | undefined) => Promise<T>,
    retried = false,
  ): Promise<T> {
    const limit = timeoutMs ?? this.server.timeoutMs;
    // Signals of this request only: the SDK never removes its abort listener (which holds the
    // answer), so a signal that outlived the request (AbortSignal.timeout until it fires, the
    // caller's for a whole run) kept every answer in memory that long.
    const signals = requestSignals(signal, limit);
    try {
      return await this.requestWith(signals, signal, limit, timeoutMs, fn, retried);
    } finally {
      signals.done();
    }
  }

  private async requestWith<T>(
    signals: RequestSignals,
    signal: AbortSignal | undefined,
    limit: number,
    timeoutMs: number | undefined,
    fn: (client: Client, abort: AbortSignal | undefined) => Promise<T>,
    retried: boolean,
  ): Promise<T> {
    const deadline = signals.deadline;
    const startAbort = signals.any;
    const { McpError, ErrorCode, StreamableHTTPError } = await loadSdk();
    const failure = (error: unknown, bounded: boolean): unknown => {
      const timedOut = (bounded && deadline.aborted) || (error instanceof McpError && error.code === ErrorCode.RequestTimeout);
      if (timedOut && !signal?.aborted) {
        const ms = bounded && deadline.aborted ? limit : ((error as { data?: { timeout?: number } }).data?.timeout ?? limit);
        return new Error(`${this.label} did not answer within ${ms} ms`);
      }
      if (error instanceof McpError && error.code === ErrorCode.ConnectionClosed && !signal?.aborted) {
        const next = this.server.type === "local" ? "its process ended; the next use starts a new one" : "the next use connects again";
        return new Error(`${this.label}: Connection closed (${next})`, { cause: error });
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
    const abort = timeoutMs === undefined ? (signal ? signals.caller : undefined) : startAbort;
    try {
      // Without `timeoutMs` the call bounds itself (a request timeout), not the deadline.
      return await fn(client, abort);
    } catch (error) {
      const overflow = this.overflowError(client);
      if (overflow) throw overflow;
      // An HTTP-level failure (not an answer of the server, nor our abort): the connection is gone.
      if (this.server.type === "remote" && !(error instanceof McpError) && !abort?.aborted) {
        this.drop(client);
        // 404: the server ended the session (e.g. it restarted), and never saw the request; the
        // spec has the client start a new session, so the request is sent once more on a new one.
        if (!retried && error instanceof StreamableHTTPError && error.code === 404) return this.request(signal, timeoutMs, fn, true);
        throw new Error(`${this.label}: the connection failed: ${reason(error)}`, { cause: error });
      }
      throw failure(error, timeoutMs !== undefined);
    }
  }

  /** Forgets `client` if it is the current one and closes it (the next use connects again). */
  private drop(client: Client): void {
    if (this.current?.client === client) {
      this.current = undefined;
      if (this.failure?.listing) this.failure = undefined;
    }
    void closeClient(client);
  }

  private async connect(): Promise<Client> {
    if (this.closed) throw new Error("MCP is shut down");
    if (this.current) return this.current.ready;
    const wait = this.retry.at - Date.now();
    if (this.failure && !this.failure.listing && wait > 0) throw new Error(`${this.failure.error} (next attempt in ${wait} ms)`);
    const sdk = await loadSdk();
    if (this.closed) throw new Error("MCP is shut down");
    if (this.current) return (this.current as { ready: Promise<Client> }).ready;
    const entry = { connected: false } as NonNullable<Connection["current"]>;
    // A client of this start: it is `entry.client` until the next one (a transport fallback).
    const newClient = (): Client => {
      const client = new sdk.Client({ name: "session-ledger", version: "0.1.0" }, { capabilities: {} });
      // The process ended (or the connection was closed): the next use starts a new one. A start
      // that fails drops its entry itself.
      client.onclose = () => {
        if (this.current !== entry || entry.client !== client || !entry.connected) return;
        this.current = undefined;
        // A listing failure was this process's: the next use starts a new one and lists again.
        if (this.failure?.listing) this.failure = undefined;
      };
      client.setNotificationHandler(sdk.ToolListChangedNotificationSchema, () => {
        if (this.current === entry && entry.client === client) entry.tools = undefined;
      });
      client.setNotificationHandler(sdk.ResourceListChangedNotificationSchema, () => {
        if (this.current === entry && entry.client === client) entry.resources = undefined;
      });
      // A remote server's event stream broke for good: the HTTP+SSE stream failed (the SDK's
      // `SseError`), or the Streamable HTTP one could not be opened again (the SDK gives up with
      // "Maximum reconnection attempts (N) exceeded."). The connection is dropped: the next use
      // connects again, and the status says `idle` meanwhile.
      client.onerror = (error) => {
        const broken = error instanceof sdk.SseError || error.message.startsWith("Maximum reconnection attempts");
        if (broken && this.current === entry && entry.client === client && entry.connected) this.drop(client);
      };
      entry.client = client;
      return client;
    };
    const server = this.server;
    const start =
      server.type === "local"
        ? startLocal(sdk, this.name, server, newClient)
        : startRemote(
            sdk,
            server,
            newClient,
            () => this.closed,
            (error) => {
              // As a stdio overflow: the connection is closed, its pending requests fail naming the limit.
              const client = entry.client;
              overflowed.set(client, error.limit);
              logger.warn("mcp server message over the HTTP limit", { server: this.name, limit: error.limit });
              if (entry.connected) this.drop(client);
            },
          );
    entry.ready = start.then(
      async (client) => {
        // Closed meanwhile: by close(), or the process ended right after the start.
        if (this.closed || this.current !== entry || !client.transport) {
          if (this.current === entry) this.current = undefined;
          await closeClient(client);
          throw new Error(this.closed ? "MCP is shut down" : `${this.label}: Connection closed right after it opened`);
        }
        entry.connected = true;
        this.failure = undefined;
        this.retry = { failures: 0, at: 0 };
        return client;
      },
      async (error: unknown) => {
        if (this.current === entry) this.current = undefined;
        if (entry.client) await closeClient(entry.client);
        const needsAuth = error instanceof NeedsAuth;
        const message = `${this.label} could not ${server.type === "local" ? "start" : "connect"}: ${reason(error)}`;
        this.failure = { error: message, at: Date.now(), ...(needsAuth ? { needsAuth } : {}) };
        const failures = this.retry.failures + 1;
        this.retry = { failures, at: Date.now() + reconnectDelayMs(failures) };
        throw new Error(message, { cause: error });
      },
    );
    this.current = entry;
    return entry.ready;
  }

  /**
   * The server's resources, then its resource templates (MCP `resources/list` and
   * `resources/templates/list`, every page, at most `MAX_RESOURCE_PAGES` (listings.ts) of each), bounded
   * by the server's `timeout` (start included) and `signal`; none when the server does not
   * declare the `resources` capability. A listing is reused for {@link RESOURCE_LISTING_MS}, or
   * until the server says its resources changed (`notifications/resources/list_changed`) or its
   * connection ends; a failed one is not kept.
   */
  listResources(signal?: AbortSignal): Promise<McpResourceListing> {
    return this.request(signal, this.server.timeoutMs, async (client, abort) => {
      const current = this.current;
      const wait = (listing: Promise<McpResourceListing>) => (abort ? untilAborted(listing, abort) : listing);
      const cached = current?.client === client ? current.resources : undefined;
      if (cached && Date.now() - cached.at < RESOURCE_LISTING_MS) return wait(cached.listing);
      // Shared, as the tool listing: one caller's abort does not end it for the others.
      const listing = listAllResources(client, { timeout: this.server.timeoutMs });
      const entry = { listing, at: Date.now() };
      if (current?.client === client) current.resources = entry;
      listing.catch(() => {
        if (current?.resources === entry) current.resources = undefined;
      });
      return wait(listing);
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

  /**
   * The error naming the limit, when `client`'s connection was closed for a message over it: the
   * stdio one (local), or the HTTP one on a body or an event (remote; `REMOTE_MESSAGE_LIMIT` in transports.ts).
   */
  private overflowError(client: Client): Error | undefined {
    const limit = overflowed.get(client);
    if (limit === undefined) return undefined;
    const next = this.server.type === "local" ? "the server starts again on its next use" : "the next use connects again";
    return new Error(
      `${this.label} sent a message larger than the ${this.server.type === "local" ? "stdio" : "HTTP"} limit (${limit} bytes); the connection was closed and ${next}`,
    );
  }
}

/** The signals of one request (see {@link requestSignals}). */
interface RequestSignals {
  /** Aborts when the request's time (`limit` ms) is up. */
  deadline: AbortSignal;
  /** Aborts with the caller's signal or at the deadline. */
  any: AbortSignal;
  /** Aborts with the caller's signal only. */
  caller: AbortSignal;
  /** Ends the request: the timer is cleared and the caller's signal no longer followed. */
  done(): void;
}

/**
 * Signals that live as long as one request: what the SDK attaches to them goes with them once
 * `done()` is called, instead of staying reachable from a long-lived signal.
 */
function requestSignals(signal: AbortSignal | undefined, limit: number): RequestSignals {
  const deadline = new AbortController();
  const any = new AbortController();
  const caller = new AbortController();
  const timer = setTimeout(() => deadline.abort(new DOMException(`timed out after ${limit} ms`, "TimeoutError")), limit);
  const fromCaller = () => {
    any.abort(signal!.reason);
    caller.abort(signal!.reason);
  };
  deadline.signal.addEventListener("abort", () => any.abort(deadline.signal.reason), { once: true });
  if (signal?.aborted) fromCaller();
  else signal?.addEventListener("abort", fromCaller, { once: true });
  return {
    deadline: deadline.signal,
    any: any.signal,
    caller: caller.signal,
    done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", fromCaller);
    },
  };
}
