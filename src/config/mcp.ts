import path from "node:path";
import { z } from "zod";

/** How long (ms) a server may take to start or connect, to list its tools, to answer a resource read or (between progress notifications) a tool call, unless `timeout` says otherwise. */
export const DEFAULT_MCP_TIMEOUT_MS = 10_000;

const environment = z.record(z.string(), z.string());
const timeout = z.number().int().positive();

/**
 * A local server (`"type": "local"`, as in opencode.json). The old keys of this file, `env` and
 * `timeout_ms`, are still read as `environment` and `timeout`; an entry without `type` is local.
 */
const localSchema = z
  .object({
    type: z.literal("local"),
    command: z.array(z.string().min(1)).min(1),
    environment: environment.optional(),
    env: environment.optional(),
    enabled: z.boolean().default(true),
    timeout: timeout.optional(),
    timeout_ms: timeout.optional(),
  })
  .strict()
  .superRefine((entry, ctx) => {
    if (entry.env && entry.environment)
      ctx.addIssue({ code: "custom", path: ["env"], message: 'give "environment" only ("env" is its old name)' });
    if (entry.timeout_ms !== undefined && entry.timeout !== undefined)
      ctx.addIssue({ code: "custom", path: ["timeout_ms"], message: 'give "timeout" only ("timeout_ms" is its old name)' });
  });

/** A remote server (`"type": "remote"`, as in opencode.json); OAuth is not supported, `"oauth": false` is accepted. */
const remoteSchema = z
  .object({
    type: z.literal("remote"),
    url: z.url({ protocol: /^https?$/, error: "expected an http(s) URL" }),
    headers: z.record(z.string(), z.string()).default({}),
    enabled: z.boolean().default(true),
    timeout: timeout.optional(),
    oauth: z.literal(false, { error: 'OAuth is not supported yet: give "oauth": false and put a token in "headers"' }).optional(),
  })
  .strict();

const entrySchema = z.preprocess(
  (value) => (value && typeof value === "object" && !Array.isArray(value) && !("type" in value) ? { type: "local", ...value } : value),
  z.discriminatedUnion("type", [localSchema, remoteSchema], { error: 'expected "type": "local" or "remote"' }),
);

/**
 * The `mcp` key of ledger.json, in the opencode.json style: MCP servers by name, each
 * `{"type": "local", "command": [...], "environment": {...}, "enabled": true, "timeout": 5000}`
 * or `{"type": "remote", "url": "https://…", "headers": {...}, "enabled": true, "timeout": 5000}`.
 * Unknown keys are errors naming them (docs/configuration.md#mcp).
 */
export const mcpSchema = z.record(z.string().min(1), entrySchema).default({});

/** `mcp` as parsed from ledger.json. */
export type McpFile = z.infer<typeof mcpSchema>;

/**
 * A local (stdio) MCP server: `command` is the executable and its arguments; the process gets
 * the SDK's safe default environment (HOME, PATH, ...) plus `environment`.
 */
export interface McpLocalConfig {
  type: "local";
  /** The executable (a `./` path resolved against the config file's directory) and its arguments. */
  command: string[];
  /** Variables added to the server's environment. */
  environment: Record<string, string>;
  /** False: never started; its resources fail and it offers no tools. */
  enabled: boolean;
  /**
   * Bounds (ms) the start (spawn and initialize), the listing of its tools, each resource read,
   * and a tool call's wait for its answer (restarted by each progress notification).
   */
  timeoutMs: number;
}

/**
 * A remote MCP server: Streamable HTTP, or HTTP+SSE for a server that answers Streamable HTTP
 * with a 4xx status (src/mcp/connection.ts). No OAuth yet: a token goes in `headers`.
 */
export interface McpRemoteConfig {
  type: "remote";
  /** The server's http(s) URL. */
  url: string;
  /** Headers of every HTTP request to the server, of both transports (e.g. `Authorization`). */
  headers: Record<string, string>;
  /** False: never connected. */
  enabled: boolean;
  /**
   * Bounds (ms) the connection (both transports together), the listing of its tools, each
   * resource read, and a tool call's wait for its answer (restarted by each progress notification).
   */
  timeoutMs: number;
}

/** One configured MCP server. */
export type McpServerConfig = McpLocalConfig | McpRemoteConfig;

/** The servers of a parsed `mcp` entry, `./` commands resolved against `baseDir`, defaults applied. */
export function buildMcp(file: McpFile, baseDir: string): Record<string, McpServerConfig> {
  return Object.fromEntries(
    Object.entries(file).map(([name, entry]): [string, McpServerConfig] => {
      if (entry.type === "remote")
        return [
          name,
          {
            type: "remote",
            url: entry.url,
            headers: entry.headers,
            enabled: entry.enabled,
            timeoutMs: entry.timeout ?? DEFAULT_MCP_TIMEOUT_MS,
          },
        ];
      const [command, ...args] = entry.command;
      const executable = command!.startsWith(".") ? path.resolve(baseDir, command!) : command!;
      return [
        name,
        {
          type: "local",
          command: [executable, ...args],
          environment: entry.environment ?? entry.env ?? {},
          enabled: entry.enabled,
          timeoutMs: entry.timeout ?? entry.timeout_ms ?? DEFAULT_MCP_TIMEOUT_MS,
        },
      ];
    }),
  );
}
