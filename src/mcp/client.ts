import type { LedgerConfig } from "../config/config.js";
import { Connection } from "./connection.js";
import { notConfigured, type McpContent, type McpReader, type McpServerInfo, type McpServerStatus, type McpTool } from "./reader.js";

export type { McpContent, McpReader, McpTool } from "./reader.js";

/**
 * A running server whose tool listing failed is not asked again for its tools (each loop step)
 * before this many ms. A server that could not start waits only for its start backoff
 * (`reconnectDelayMs`, 1 s … 30 s), like every other use.
 */
export const TOOLS_RETRY_MS = 60_000;

/**
 * Makes the MCP reader for `config.mcp`. Servers are started (local) or connected to (remote)
 * lazily, on their first use (a resource read, or a loop listing tools), so a broken or
 * unreachable server never stops the ledger from starting; disabled servers are never started.
 * See {@link Connection} for the transports, timeouts and reconnection. Call `close()` on shutdown.
 */
export async function startMcp(config: Pick<LedgerConfig, "mcp" | "limits">): Promise<McpReader> {
  const servers = Object.entries(config.mcp);
  const connections = new Map(servers.flatMap(([name, server]) => (server.enabled ? [[name, new Connection(name, server)] as const] : [])));
  let closed = false;
  const connectionOf = (name: string): Connection => {
    if (closed) throw new Error("MCP is shut down");
    const connection = connections.get(name);
    if (connection) return connection;
    const server = Object.hasOwn(config.mcp, name) ? config.mcp[name] : undefined;
    if (!server) throw notConfigured(name, Object.keys(config.mcp));
    throw new Error(`MCP server ${JSON.stringify(name)} is disabled ("enabled": false)`);
  };
  const statusOf = (name: string): McpServerStatus => {
    const server = config.mcp[name]!;
    if (!server.enabled) return { status: "disabled" };
    return connections.get(name)!.status;
  };
  return {
    async read(clientName, uri, signal) {
      const contents = await connectionOf(clientName).read(uri, signal);
      return contents.flatMap((item): McpContent[] => {
        if ("text" in item) return [{ text: item.text }];
        return item.blob ? [{ blob: true, mime: item.mimeType ?? "" }] : [];
      });
    },
    async tools(signal) {
      if (closed) return [];
      // A server that could not start is asked again once its start backoff is over (it fails at
      // once meanwhile), so its tools come back within seconds of the server; one that runs but
      // failed to list its tools is asked again after TOOLS_RETRY_MS.
      const wanted = [...connections.values()].filter((c) => !c.failure?.listing || Date.now() - c.failure.at >= TOOLS_RETRY_MS);
      // A server that cannot start or list adds no tools: its status says why (`failed`).
      const lists = await Promise.all(wanted.map((c) => c.listTools(signal).catch((): McpTool[] => [])));
      return lists.flat();
    },
    async callTool(server, tool, args, signal) {
      return connectionOf(server).callTool(tool, args, signal);
    },
    status() {
      return Object.fromEntries(servers.map(([name]): [string, McpServerStatus] => [name, statusOf(name)]));
    },
    async servers(options = {}, signal) {
      if (options.connect && !closed)
        // A server that cannot start records its failure: its status says why. One whose starts
        // failed is not started again before its wait (`reconnectDelayMs`) is over.
        await Promise.all([...connections.values()].map((c) => c.listTools(signal).catch(() => undefined)));
      return Promise.all(
        servers.map(async ([name, server]): Promise<McpServerInfo> => {
          const info: McpServerInfo = { name, type: server.type, status: statusOf(name) };
          const connection = connections.get(name);
          if (!connection || info.status.status !== "connected" || closed) return info;
          const [tools, listing] = await Promise.all([
            connection.listTools(signal).catch(() => undefined),
            connection.listResources(signal).catch(() => undefined),
          ]);
          return {
            ...info,
            ...(tools ? { toolCount: tools.length } : {}),
            ...(listing ? { resourceCount: listing.resources.length, resourceTemplateCount: listing.templates.length } : {}),
          };
        }),
      );
    },
    async resources(server, signal) {
      return connectionOf(server).listResources(signal);
    },
    async close() {
      closed = true;
      await Promise.all([...connections.values()].map((c) => c.close()));
    },
  };
}

/**
 * `text` cut to at most `maxBytes` of UTF-8 (on a character boundary), the cut noted at its end:
 * `[<what> truncated: N bytes, over limits.<limit> (M bytes)]`.
 */
export function truncateText(text: string, maxBytes: number, what = "MCP tool output", limit = "mcp_item_bytes"): string {
  const bytes = Buffer.from(text, "utf8");
  if (bytes.byteLength <= maxBytes) return text;
  const notice = `\n\n[${what} truncated: ${bytes.byteLength} bytes, over limits.${limit} (${maxBytes} bytes)]`;
  let keep = Math.max(0, maxBytes - Buffer.byteLength(notice, "utf8"));
  while (keep > 0 && (bytes[keep]! & 0xc0) === 0x80) keep--;
  return bytes.subarray(0, keep).toString("utf8") + notice;
}
