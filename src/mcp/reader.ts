/** One item of a read resource: its text, or a note that it is binary (never its bytes). */
export type McpContent = { text: string } | { blob: true; mime: string };

/** Reads resources of the configured MCP servers (`mcp` in ledger.json); made by `startMcp` (./client.ts). */
export interface McpReader {
  /**
   * Reads `uri` from the server named `clientName`: its contents in order, text items cut to
   * `limits.text_part_bytes` (with a notice), binary items as `{ blob, mime }` (mime "" when the
   * server gave none; empty blobs are left out). Connects on first use and again after the
   * server's process died. Throws an `Error` naming the problem: server not configured (listing
   * the configured ones), could not start, no answer within its `timeout_ms`, or the server's
   * own error.
   */
  read(clientName: string, uri: string, signal?: AbortSignal): Promise<McpContent[]>;
  /** Stops every server process. Later reads fail. */
  close(): Promise<void>;
}

/** The error for a server name that is not in `mcp`. */
export function notConfigured(clientName: string, configured: string[]): Error {
  const known =
    configured.length === 0 ? "no MCP servers are configured" : `configured: ${configured.map((n) => JSON.stringify(n)).join(", ")}`;
  return new Error(`MCP server ${JSON.stringify(clientName)} is not configured (${known})`);
}
