import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { afterEach } from "vitest";
import { buildConfig, configFileSchema } from "../../src/config/config.js";
import { startMcp, type McpReader } from "../../src/mcp/client.js";

/** The published reference server `@modelcontextprotocol/server-everything` (a devDependency), run over stdio. */
export const EVERYTHING = path.join(
  path.dirname(createRequire(import.meta.url).resolve("@modelcontextprotocol/server-everything/package.json")),
  "dist/index.js",
);

/** The server-everything entry of ledger.json as an OpenCode user writes it (node instead of npx: no download in tests). */
export const everything = (extra: Record<string, unknown> = {}) => ({
  type: "local",
  command: [process.execPath, EVERYTHING, "stdio"],
  ...extra,
});

/** Pids of this process's live child processes (from /proc). */
export function childPids(): number[] {
  return readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
        // pid (comm) state ppid ...: comm may hold spaces, so read after the last ")".
        const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
        return Number(fields[1]) === process.pid && fields[0] !== "Z";
      } catch {
        return false;
      }
    })
    .map(Number);
}

/**
 * The MCP readers of a test file: the returned function starts one from an `mcp` config entry
 * (as ledger.json has it; defaults applied, paths relative to the working directory), and every
 * reader started is closed after each test (its servers stopped).
 */
export function mcpReaders(): (mcp: Record<string, unknown>) => Promise<McpReader> {
  const opened: McpReader[] = [];
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((m) => m.close()));
  });
  return async (mcp) => {
    const reader = await startMcp(buildConfig(configFileSchema.parse({ mcp }), undefined, process.cwd()));
    opened.push(reader);
    return reader;
  };
}
