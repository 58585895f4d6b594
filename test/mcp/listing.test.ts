import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { McpReader } from "../../src/mcp/client.js";
import { mcpReaders } from "../support/mcp-servers.js";
import { waitFor } from "../support/wait.js";

// What a running server's listings leave in its status, and how long they are reused: a stdio
// server built with the MCP SDK whose first tool listing fails, whose resource listing names the
// how-many-th listing it is, and whose tool `change` says its resources changed.

const FLAKY_SERVER = `
import { Server } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/index.js"))};
import { StdioServerTransport } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/stdio.js"))};
import {
  CallToolRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
} from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/types.js"))};

let toolListings = 0;
let resourceListings = 0;
const server = new Server({ name: "flaky", version: "1.0.0" }, { capabilities: { tools: {}, resources: { listChanged: true } } });
server.setRequestHandler(ListToolsRequestSchema, async () => {
  if (++toolListings === 1) throw new Error("no tools today");
  return { tools: [{ name: "change", description: "Changes the resources", inputSchema: { type: "object" } }] };
});
server.setRequestHandler(CallToolRequestSchema, async (request) => {
  if (request.params.name === "exit") process.exit(0);
  await server.sendResourceListChanged();
  return { content: [{ type: "text", text: "changed" }] };
});
server.setRequestHandler(ListResourcesRequestSchema, async () => ({
  resources: [{ uri: "flaky://listing", name: "listing " + ++resourceListings }],
}));
server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: [] }));
await server.connect(new StdioServerTransport());
`;

/** A server that takes 1.5 s to list its one tool. */
const SLOW_SERVER = `
import { Server } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/index.js"))};
import { StdioServerTransport } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/stdio.js"))};
import { ListToolsRequestSchema } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/types.js"))};
const server = new Server({ name: "slow", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => {
  await new Promise((resolve) => setTimeout(resolve, 1500));
  return { tools: [{ name: "ping", description: "Pings", inputSchema: { type: "object" } }] };
});
await server.connect(new StdioServerTransport());
`;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "ledger-mcp-listing-"));
  await writeFile(path.join(dir, "flaky.mjs"), FLAKY_SERVER);
  await writeFile(path.join(dir, "slow.mjs"), SLOW_SERVER);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const mcpOf = mcpReaders();

function flaky(): Promise<McpReader> {
  return mcpOf({ flaky: { type: "local", command: [process.execPath, path.join(dir, "flaky.mjs")] } });
}

describe("a running server whose tool listing fails", () => {
  it("is FAILED with the listing's error while its tools are left out; a listing that succeeds makes it CONNECTED again", async () => {
    const mcp = await flaky();
    expect(await mcp.tools()).toEqual([]);
    const failed = { status: "failed", error: "MCP error -32603: no tools today" };
    expect(mcp.status()).toEqual({ flaky: failed });
    expect(await mcp.servers()).toEqual([{ name: "flaky", type: "local", status: failed }]);
    // Left out of the next steps (TOOLS_RETRY_MS), still FAILED.
    expect(await mcp.tools()).toEqual([]);
    expect(mcp.status()).toEqual({ flaky: failed });
    // ListMcpServers{connect} lists its tools again: this time they come.
    expect(await mcp.servers({ connect: true })).toEqual([
      { name: "flaky", type: "local", status: { status: "connected" }, toolCount: 1, resourceCount: 1, resourceTemplateCount: 0 },
    ]);
    expect(mcp.status()).toEqual({ flaky: { status: "connected" } });
    expect((await mcp.tools()).map((t) => t.id)).toEqual(["flaky_change"]);
  });
});

describe("a listing failure and the process's end", () => {
  it("is forgotten when the process ends: the server is idle again, not FAILED with its last process's listing error", async () => {
    const mcp = await flaky();
    expect(await mcp.tools()).toEqual([]);
    expect(mcp.status()).toEqual({ flaky: { status: "failed", error: "MCP error -32603: no tools today" } });
    await expect(mcp.callTool("flaky", "exit", {})).rejects.toThrow('MCP server "flaky": Connection closed');
    await waitFor("the status after the process ended", () => mcp.status().flaky?.status === "idle");
  });
});

describe("a tool listing shared by two callers", () => {
  it("is not ended by the first caller's abort: the other gets the tools and the server stays CONNECTED", async () => {
    const reader = await mcpOf({ slow: { type: "local", command: [process.execPath, path.join(dir, "slow.mjs")] } });
    await reader.servers({ connect: false });
    const a = new AbortController();
    const first = reader.tools(a.signal);
    const second = reader.tools();
    setTimeout(() => a.abort(new Error("run cancelled")), 800);
    expect((await first).map((t) => t.id)).toEqual([]);
    expect((await second).map((t) => t.id)).toEqual(["slow_ping"]);
    expect(reader.status()).toEqual({ slow: { status: "connected" } });
  });
});

describe("a server's resource listing", () => {
  it("is read once per connection and reused (ListMcpServers counts, ListMcpResources pages) until the server says it changed", async () => {
    const mcp = await flaky();
    const listing = (n: number) => ({ resources: [{ uri: "flaky://listing", name: `listing ${n}` }], templates: [] });
    expect(await mcp.resources("flaky")).toEqual(listing(1));
    await mcp.servers();
    await mcp.servers();
    expect(await mcp.resources("flaky")).toEqual(listing(1));
    // The server sends notifications/resources/list_changed: the next use lists again.
    await mcp.callTool("flaky", "change", {});
    expect(await mcp.resources("flaky")).toEqual(listing(2));
    expect(await mcp.resources("flaky")).toEqual(listing(2));
  });
});
