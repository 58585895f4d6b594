import type { LedgerConfig } from "../config/config.js";
import { Connection } from "./connection.js";
import { notConfigured, REMOTE_NOT_SUPPORTED, type McpContent, type McpReader, type McpServerStatus, type McpTool } from "./reader.js";

export type { McpContent, McpReader, McpTool } from "./reader.js";

/** A server whose last start failed is not started again for its tools (each loop step) before this many ms. */
export const TOOLS_RETRY_MS = 60_000;

/**
 * Makes the MCP reader for `config.mcp`. Local servers are started lazily, on their first use
 * (a resource read, or a loop listing tools), so a broken server never stops the ledger from
 * starting; disabled servers are never started; remote servers fail their uses with
 * {@link REMOTE_NOT_SUPPORTED}. Call `close()` on shutdown.
 */
export async function startMcp(config: Pick<LedgerConfig, "mcp" | "limits">): Promise<McpReader> {
  const servers = Object.entries(config.mcp);
  const connections = new Map(
    servers.flatMap(([name, server]) => (server.type === "local" && server.enabled ? [[name, new Connection(name, server)] as const] : [])),
  );
  const maxTextBytes = config.limits.text_part_bytes;
  let closed = false;
  const connectionOf = (name: string): Connection => {
    if (closed) throw new Error("MCP is shut down");
    const connection = connections.get(name);
    if (connection) return connection;
    const server = config.mcp[name];
    if (!server) throw notConfigured(name, Object.keys(config.mcp));
    if (!server.enabled) throw new Error(`MCP server ${JSON.stringify(name)} is disabled ("enabled": false)`);
    throw new Error(`MCP server ${JSON.stringify(name)}: ${REMOTE_NOT_SUPPORTED}`);
  };
  return {
    async read(clientName, uri, signal) {
      const contents = await connectionOf(clientName).read(uri, signal);
      return contents.flatMap((item): McpContent[] => {
        if ("text" in item) return [{ text: truncateText(item.text, maxTextBytes) }];
        return item.blob ? [{ blob: true, mime: item.mimeType ?? "" }] : [];
      });
    },
    async tools(signal) {
      if (closed) return [];
      const wanted = [...connections.values()].filter((c) => !c.failure || Date.now() - c.failure.at >= TOOLS_RETRY_MS);
      // A server that cannot start or list adds no tools: its status says why.
      const lists = await Promise.all(
        wanted.map((c) =>
          c.listTools(signal).catch((error: unknown): McpTool[] => {
            // A failed start records its own failure; this is a running server that did not list its tools.
            if (!signal?.aborted && c.status.status === "connected")
              c.failure = { error: error instanceof Error ? error.message : String(error), at: Date.now() };
            return [];
          }),
        ),
      );
      return lists.flat();
    },
    async callTool(server, tool, args, signal) {
      return connectionOf(server).callTool(tool, args, signal);
    },
    status() {
      return Object.fromEntries(
        servers.map(([name, server]): [string, McpServerStatus] => {
          if (!server.enabled) return [name, { status: "disabled" }];
          if (server.type === "remote") return [name, { status: "failed", error: REMOTE_NOT_SUPPORTED }];
          return [name, connections.get(name)!.status];
        }),
      );
    },
    async close() {
      closed = true;
      await Promise.all([...connections.values()].map((c) => c.close()));
    },
  };
}

/**
 * `text` cut to at most `maxBytes` of UTF-8 (on a character boundary), the cut noted at its end:
 * `[<what> truncated: N bytes, over the M-byte limit]`.
 */
export function truncateText(text: string, maxBytes: number, what = "MCP resource text"): string {
  const bytes = Buffer.from(text, "utf8");
  if (bytes.byteLength <= maxBytes) return text;
  const notice = `\n\n[${what} truncated: ${bytes.byteLength} bytes, over the ${maxBytes}-byte limit]`;
  let keep = Math.max(0, maxBytes - Buffer.byteLength(notice, "utf8"));
  while (keep > 0 && (bytes[keep]! & 0xc0) === 0x80) keep--;
  return bytes.subarray(0, keep).toString("utf8") + notice;
}
