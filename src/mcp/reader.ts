/** One item of a read resource: its text, or a note that it is binary (never its bytes). */
export type McpContent = { text: string } | { blob: true; mime: string };

/** One tool of an MCP server, as the model is offered it (see src/tools/mcp-tools.ts). */
export interface McpTool {
  /** The configured server's name (the key under `mcp`). */
  server: string;
  /** The tool's name as the server gives it (what `tools/call` is sent). */
  name: string;
  /**
   * The tool id the model calls and permission rules name: `<server>_<tool>`, each side with every
   * character outside `[a-zA-Z0-9_-]` replaced by `_` (as OpenCode names MCP tools).
   */
  id: string;
  /** The server's description of the tool ("" when it gives none). */
  description: string;
  /** The tool's input JSON Schema (an object schema) as the server gives it. */
  inputSchema: Record<string, unknown>;
}

/** One content item of a tool call's result (MCP `CallToolResult.content`), as far as the ledger reads it. */
export type McpToolContent =
  | { type: "text"; text: string }
  | { type: "image" | "audio"; data: string; mimeType: string }
  | { type: "resource"; resource: { uri: string; mimeType?: string; text?: string; blob?: string } }
  | { type: "resource_link"; uri: string; name: string; mimeType?: string }
  | { type: string };

/** What a tool call answered (MCP `CallToolResult`). */
export interface McpToolResult {
  content: McpToolContent[];
  /** Set when the tool itself failed: `content` says why. */
  isError?: boolean;
  /** JSON the tool returned besides (or instead of) `content`. */
  structuredContent?: Record<string, unknown>;
}

/**
 * Where a configured server stands: `connected` (its process runs, or a remote server's session
 * is open), `idle` (not started yet, starting, or its process ended or its connection broke;
 * started or connected on its next use), `disabled` (`"enabled": false`), `failed` (its last
 * start or connection attempt failed: `error` says why), `needs_auth` (a remote server that
 * answered 401: it asks for authorization the ledger cannot give, OAuth being left for later).
 */
export type McpServerStatus = { status: "connected" | "idle" | "disabled" } | { status: "failed" | "needs_auth"; error: string };

/** One configured server as discovery reports it (the `ListMcpServers` RPC). */
export interface McpServerInfo {
  /** Its key under `mcp`. */
  name: string;
  type: "local" | "remote";
  status: McpServerStatus;
  /** Its tools, its resources and its resource templates, counted only while it is connected and when they could be listed. */
  toolCount?: number;
  resourceCount?: number;
  resourceTemplateCount?: number;
}

/** A resource a server lists (MCP `Resource`); optional fields are absent when the server gives none. */
export interface McpResourceInfo {
  uri: string;
  name: string;
  title?: string;
  description?: string;
  mimeType?: string;
  /** Bytes, when the server says. */
  size?: number;
}

/** A resource template a server lists (MCP `ResourceTemplate`, `uriTemplate` per RFC 6570). */
export interface McpResourceTemplateInfo {
  uriTemplate: string;
  name: string;
  title?: string;
  description?: string;
  mimeType?: string;
}

/** Everything a server lists: its resources and its resource templates, each in the server's order. */
export interface McpResourceListing {
  resources: McpResourceInfo[];
  templates: McpResourceTemplateInfo[];
}

/** The configured MCP servers (`mcp` in ledger.json): their resources and tools; made by `startMcp` (./client.ts). */
export interface McpReader {
  /**
   * Reads `uri` from the server named `clientName`: its contents in order, text items whole
   * (a prompt bounds them: `limits.mcp_item_bytes`), binary items as `{ blob, mime }` (mime "" when the
   * server gave none; empty blobs are left out). Connects on first use and again after the
   * server's process died or its connection broke. Throws an `Error` naming the server (and a
   * remote one's URL origin) and the problem: not configured (listing the configured ones),
   * disabled, could not start or connect (during the wait before the next attempt: that error
   * and `(next attempt in N ms)`), no answer within its `timeout`, `Connection closed (…)`, the
   * connection failed, or the server's own error.
   */
  read(clientName: string, uri: string, signal?: AbortSignal): Promise<McpContent[]>;
  /**
   * The tools of every enabled server, server by server in config order, each server's in its
   * own order; starts (or connects to) the servers not running. A server that cannot start or be
   * reached, or does not list its tools within its `timeout`, adds none (its status says why; it
   * is tried again on a later call, at most once a minute). Disabled servers add none.
   */
  tools(signal?: AbortSignal): Promise<McpTool[]>;
  /**
   * Calls `tool` (its server-side name) of server `server` with `args`. Bounded by the server's
   * `timeout` without an answer (restarted by each progress notification; `MCP server "x" did
   * not answer within <timeout> ms`) and by `signal`, whose abort
   * cancels the call on the server (`notifications/cancelled`) and rejects with its reason.
   * Throws an `Error` as {@link McpReader.read} does.
   */
  callTool(server: string, tool: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<McpToolResult>;
  /** Every configured server's status, by name, in config order. */
  status(): Record<string, McpServerStatus>;
  /**
   * Every configured server, in config order, with its status and, when it is connected, its
   * tool, resource and resource template counts (tools from the listing kept per process;
   * resources listed now, bounded by the server's `timeout`; a count that could not be had is
   * left out). With `connect`, the enabled servers that are not running are started first
   * (together, each bounded by its `timeout`); without it nothing is started.
   */
  servers(options?: { connect?: boolean }, signal?: AbortSignal): Promise<McpServerInfo[]>;
  /**
   * The resources and resource templates of server `server` (every page the server gives, at
   * most 50 of each), starting it when it is not running; each listing is bounded by the
   * server's `timeout`. A server without the `resources` capability lists none. Throws an
   * `Error` as {@link McpReader.read} does.
   */
  resources(server: string, signal?: AbortSignal): Promise<McpResourceListing>;
  /** Stops every server process. Later calls fail. */
  close(): Promise<void>;
}

/** The error for a server name that is not in `mcp`. */
export function notConfigured(clientName: string, configured: string[]): Error {
  const known =
    configured.length === 0 ? "no MCP servers are configured" : `configured: ${configured.map((n) => JSON.stringify(n)).join(", ")}`;
  return new Error(`MCP server ${JSON.stringify(clientName)} is not configured (${known})`);
}

/**
 * The model-facing id of `tool` of `server`: `<server>_<tool>` with every character outside
 * `[a-zA-Z0-9_-]` replaced by `_` on each side (OpenCode's naming), e.g. `everything_get-sum`.
 */
export function mcpToolId(server: string, tool: string): string {
  const clean = (s: string) => s.replace(/[^a-zA-Z0-9_-]/g, "_");
  return `${clean(server)}_${clean(tool)}`;
}
