import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { LedgerConfig, McpServerConfig } from "../config/config.js";
import { loadOnce } from "../load-once.js";
import { notConfigured, type McpContent, type McpReader } from "./reader.js";

export type { McpContent, McpReader } from "./reader.js";

/**
 * Makes the MCP reader for `config.mcp`. Servers are started lazily, on their first read, so a
 * broken server never stops the ledger from starting; call `close()` on shutdown.
 */
export async function startMcp(config: Pick<LedgerConfig, "mcp" | "limits">): Promise<McpReader> {
  const connections = new Map(Object.entries(config.mcp).map(([name, server]) => [name, new Connection(name, server)]));
  const maxTextBytes = config.limits.text_part_bytes;
  let closed = false;
  return {
    async read(clientName, uri, signal) {
      if (closed) throw new Error("MCP is shut down");
      const connection = connections.get(clientName);
      if (!connection) throw notConfigured(clientName, [...connections.keys()]);
      const contents = await connection.read(uri, signal);
      return contents.flatMap((item): McpContent[] => {
        if ("text" in item) return [{ text: truncateText(item.text, maxTextBytes) }];
        return item.blob ? [{ blob: true, mime: item.mimeType ?? "" }] : [];
      });
    },
    async close() {
      closed = true;
      await Promise.all([...connections.values()].map((c) => c.close()));
    },
  };
}

type ResourceContents = Awaited<ReturnType<Client["readResource"]>>["contents"];

/** The parts of the MCP SDK the reader uses. */
interface Sdk {
  Client: typeof import("@modelcontextprotocol/sdk/client/index.js").Client;
  StdioClientTransport: typeof import("@modelcontextprotocol/sdk/client/stdio.js").StdioClientTransport;
  McpError: typeof import("@modelcontextprotocol/sdk/types.js").McpError;
  ErrorCode: typeof import("@modelcontextprotocol/sdk/types.js").ErrorCode;
}

/**
 * The MCP SDK (with ajv and zod-to-json-schema), imported on the first MCP read: a ledger
 * without MCP servers, or whose prompts name none, never loads it. A failed load is tried again
 * on the next read, not cached for the process.
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
  })),
);

/** One stdio server: a client connected on demand, dropped when its process ends. */
class Connection {
  private current?: { client: Client; ready: Promise<Client> };
  private closed = false;

  constructor(
    private readonly name: string,
    private readonly server: McpServerConfig,
  ) {}

  async read(uri: string, signal?: AbortSignal): Promise<ResourceContents> {
    const deadline = AbortSignal.timeout(this.server.timeoutMs);
    const abort = signal ? AbortSignal.any([signal, deadline]) : deadline;
    const { McpError, ErrorCode } = await loadSdk();
    try {
      const client = await untilAborted(this.connect(), abort);
      const result = await client.readResource({ uri }, { signal: abort, timeout: this.server.timeoutMs });
      return result.contents;
    } catch (error) {
      const timedOut = deadline.aborted || (error instanceof McpError && error.code === ErrorCode.RequestTimeout);
      if (timedOut && !signal?.aborted)
        throw new Error(`MCP server ${JSON.stringify(this.name)} did not answer within ${this.server.timeoutMs} ms`);
      // The SDK prefixes a server's McpError message with "MCP error <code>: " a second time.
      if (error instanceof McpError) throw new Error(error.message.replace(/^(MCP error -?\d+: )\1+/, "$1"), { cause: error });
      throw error;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const current = this.current;
    this.current = undefined;
    await current?.client.close().catch(() => undefined);
  }

  private async connect(): Promise<Client> {
    if (this.closed) throw new Error("MCP is shut down");
    if (this.current) return this.current.ready;
    const { Client, StdioClientTransport } = await loadSdk();
    if (this.closed) throw new Error("MCP is shut down");
    if (this.current) return (this.current as { ready: Promise<Client> }).ready;
    const [command, ...args] = this.server.command;
    const transport = new StdioClientTransport({ command: command!, args, env: this.server.env, stderr: "inherit" });
    const client = new Client({ name: "session-ledger", version: "0.1.0" }, { capabilities: {} });
    const drop = () => {
      if (this.current?.client === client) this.current = undefined;
    };
    // The process ended (or the connection broke): the next read starts a new one.
    client.onclose = drop;
    const ready = client.connect(transport, { timeout: this.server.timeoutMs }).then(
      () => client,
      async (error: unknown) => {
        drop();
        await client.close().catch(() => undefined);
        throw new Error(
          `MCP server ${JSON.stringify(this.name)} could not start: ${error instanceof Error ? error.message : String(error)}`,
        );
      },
    );
    this.current = { client, ready };
    return ready;
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

/** `text` cut to at most `maxBytes` of UTF-8 (on a character boundary), the cut noted at its end. */
export function truncateText(text: string, maxBytes: number): string {
  const bytes = Buffer.from(text, "utf8");
  if (bytes.byteLength <= maxBytes) return text;
  const notice = `\n\n[MCP resource text truncated: ${bytes.byteLength} bytes, over the ${maxBytes}-byte limit]`;
  let keep = Math.max(0, maxBytes - Buffer.byteLength(notice, "utf8"));
  while (keep > 0 && (bytes[keep]! & 0xc0) === 0x80) keep--;
  return bytes.subarray(0, keep).toString("utf8") + notice;
}
