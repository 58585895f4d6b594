import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { reconnectDelayMs } from "../../src/mcp/connection.js";
import { freePort, recordingProxy, startEverythingHttp, type EverythingHttp } from "../support/mcp-http.js";
import { childPids, everything, mcpReaders } from "../support/mcp-servers.js";
import { waitFor } from "../support/wait.js";

// Remote MCP servers: the published reference server `server-everything` in its Streamable HTTP
// and SSE modes, started by the tests on a loopback port, reached by the ledger's MCP reader.

const ARCHITECTURE = "demo://resource/static/document/architecture.md";

const mcpOf = mcpReaders();

const textOf = (result: { content: Array<{ type: string }> }) => (result.content[0] as unknown as { text: string }).text;

describe("a remote server over Streamable HTTP (server-everything streamableHttp)", () => {
  let server: EverythingHttp;
  beforeAll(async () => {
    server = await startEverythingHttp("streamableHttp");
  });
  afterAll(async () => {
    await server?.stop();
  });

  it("lists its tools as <server>_<tool>, reads a demo:// resource and calls a tool; no child process of ours", async () => {
    const before = childPids();
    const mcp = await mcpOf({ web: { type: "remote", url: server.url } });
    expect(mcp.status()).toEqual({ web: { status: "idle" } });
    const tools = await mcp.tools();
    expect(tools.map((t) => t.id)).toEqual(expect.arrayContaining(["web_echo", "web_get-sum", "web_trigger-long-running-operation"]));
    expect(tools.find((t) => t.name === "get-sum")).toEqual({
      server: "web",
      name: "get-sum",
      id: "web_get-sum",
      description: "Returns the sum of two numbers",
      inputSchema: expect.objectContaining({ type: "object", required: ["a", "b"] }),
    });
    expect(mcp.status()).toEqual({ web: { status: "connected" } });
    expect(await mcp.read("web", ARCHITECTURE)).toEqual([{ text: expect.stringContaining("Architecture") }]);
    expect(textOf(await mcp.callTool("web", "get-sum", { a: 2, b: 40 }))).toBe("The sum of 2 and 40 is 42.");
    expect(childPids()).toEqual(before);
  });

  it("sends the configured headers on every request (initialize, notifications, the event stream, calls, the session's end)", async () => {
    const proxy = await recordingProxy(new URL(server.url).origin);
    try {
      const mcp = await mcpOf({
        web: { type: "remote", url: `${proxy.url}/mcp`, headers: { Authorization: "Bearer t0ken", "X-Tenant": "acme" } },
      });
      await mcp.tools();
      expect(textOf(await mcp.callTool("web", "echo", { message: "hi" }))).toBe("Echo: hi");
      await mcp.close();
      await waitFor("the session's DELETE", () => proxy.requests.some((r) => r.method === "DELETE"));
      expect(new Set(proxy.requests.map((r) => `${r.method} ${r.path}`))).toEqual(new Set(["POST /mcp", "GET /mcp", "DELETE /mcp"]));
      expect(proxy.requests.length).toBeGreaterThanOrEqual(5);
      for (const request of proxy.requests) {
        expect(request.headers.authorization).toBe("Bearer t0ken");
        expect(request.headers["x-tenant"]).toBe("acme");
      }
    } finally {
      await proxy.close();
    }
  });

  it("a tool call honours timeout: progress notifications restart it; without progress it ends the call", async () => {
    const mcp = await mcpOf({ web: { type: "remote", url: server.url, timeout: 2500 } });
    // 5 s in 10 steps: a progress notification every 0.5 s keeps the call alive past 2.5 s.
    expect(textOf(await mcp.callTool("web", "trigger-long-running-operation", { duration: 5, steps: 10 }))).toBe(
      "Long running operation completed. Duration: 5 seconds, Steps: 10.",
    );
    // One step of 20 s: no progress before the end, so the call ends after 2.5 s.
    const started = Date.now();
    await expect(mcp.callTool("web", "trigger-long-running-operation", { duration: 20, steps: 1 })).rejects.toThrow(
      new RegExp(`^MCP server "web" at http://127\\.0\\.0\\.1:${server.port} did not answer within 2500 ms$`),
    );
    expect(Date.now() - started).toBeLessThan(15_000);
    // The connection is still usable.
    expect(textOf(await mcp.callTool("web", "echo", { message: "still here" }))).toBe("Echo: still here");
  });
});

describe("a remote server of the older HTTP+SSE protocol (server-everything sse)", () => {
  it("falls back to SSE after Streamable HTTP gets a 4xx, with the headers on every request", async () => {
    const server = await startEverythingHttp("sse");
    const proxy = await recordingProxy(new URL(server.url).origin);
    try {
      const mcp = await mcpOf({ old: { type: "remote", url: `${proxy.url}/sse`, headers: { Authorization: "Bearer t0ken" } } });
      expect((await mcp.tools()).map((t) => t.id)).toEqual(expect.arrayContaining(["old_echo", "old_get-sum"]));
      expect(mcp.status()).toEqual({ old: { status: "connected" } });
      expect(await mcp.read("old", ARCHITECTURE)).toEqual([{ text: expect.stringContaining("Architecture") }]);
      expect(textOf(await mcp.callTool("old", "echo", { message: "over sse" }))).toBe("Echo: over sse");
      // The Streamable HTTP attempt (POST /sse, 404), then the SSE stream and its message POSTs.
      expect(proxy.requests[0]).toMatchObject({ method: "POST", path: "/sse", status: 404 });
      expect(proxy.requests[1]).toMatchObject({ method: "GET", path: "/sse", status: 200 });
      expect(proxy.requests.slice(2).every((r) => r.method === "POST" && r.path.startsWith("/message?sessionId="))).toBe(true);
      expect(proxy.requests.length).toBeGreaterThanOrEqual(5);
      for (const request of proxy.requests) expect(request.headers.authorization).toBe("Bearer t0ken");
    } finally {
      await proxy.close();
      await server.stop();
    }
  });
});

describe("a remote server that is down or goes away", () => {
  it("a closed port: its uses fail naming the server and the URL's origin; the other servers work", async () => {
    const port = await freePort();
    const mcp = await mcpOf({ down: { type: "remote", url: `http://127.0.0.1:${port}/mcp?token=secret` }, everything: everything() });
    const refused = `MCP server "down" at http://127.0.0.1:${port} could not connect: connect ECONNREFUSED 127.0.0.1:${port}`;
    await expect(mcp.read("down", ARCHITECTURE)).rejects.toThrow(new Error(refused));
    // Within the wait before the next attempt (1 s, then 2 s, …), a use fails at once with the same
    // error. (On a machine so busy that the wait passed, the use tried again: the next wait is longer.)
    const waiting = new RegExp(`^${escape(refused)} \\(next attempt in \\d+ ms\\)$`);
    const errors: string[] = [];
    for (let i = 0; i < 3 && !errors.some((e) => waiting.test(e)); i++)
      errors.push(await mcp.read("down", ARCHITECTURE).then(String, (e: Error) => e.message));
    expect(errors.at(-1)).toMatch(waiting);
    expect(errors.slice(0, -1).every((e) => e === refused)).toBe(true);
    await waitFor("the next attempt", async () => {
      const error = await mcp.callTool("down", "echo", { message: "x" }).catch((e: unknown) => e as Error);
      return error instanceof Error && error.message === refused;
    });
    const tools = await mcp.tools();
    expect(tools.some((t) => t.id === "everything_echo")).toBe(true);
    expect(tools.some((t) => t.server === "down")).toBe(false);
    expect(mcp.status()).toEqual({ down: { status: "failed", error: refused }, everything: { status: "connected" } });
    expect(textOf(await mcp.callTool("everything", "echo", { message: "fine" }))).toBe("Echo: fine");
    expect(JSON.stringify(mcp.status())).not.toContain("secret");
  });

  it("waits longer after each failed attempt: 1 s, 2 s, 4 s … at most 30 s", () => {
    expect([1, 2, 3, 4, 5, 6, 7].map(reconnectDelayMs)).toEqual([1000, 2000, 4000, 8000, 16000, 30000, 30000]);
  });

  it("a server that never answers fails after its timeout", async () => {
    const silent = net.createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const { port } = silent.address() as net.AddressInfo;
    try {
      const mcp = await mcpOf({ mute: { type: "remote", url: `http://127.0.0.1:${port}/mcp`, timeout: 700 } });
      const started = Date.now();
      await expect(mcp.read("mute", ARCHITECTURE)).rejects.toThrow(
        `MCP server "mute" at http://127.0.0.1:${port} did not answer within 700 ms`,
      );
      expect(Date.now() - started).toBeLessThan(5000);
      await waitFor("the failed status", () => mcp.status().mute?.status === "failed");
      expect(mcp.status().mute).toEqual({
        status: "failed",
        error: `MCP server "mute" at http://127.0.0.1:${port} could not connect: timed out after 700 ms`,
      });
    } finally {
      silent.close();
    }
  });

  it("a server that goes away and comes back: the use in between fails, a later one connects again", async () => {
    let server = await startEverythingHttp("streamableHttp");
    const port = server.port;
    try {
      const mcp = await mcpOf({ web: { type: "remote", url: server.url } });
      expect(textOf(await mcp.callTool("web", "echo", { message: "one" }))).toBe("Echo: one");
      await server.stop();
      // Sent on the open connection (which fails and is dropped), or, once the event stream gave up
      // (about 2.5 s later), on a new attempt.
      await expect(mcp.callTool("web", "echo", { message: "two" })).rejects.toThrow(
        new RegExp(
          `^MCP server "web" at http://127\\.0\\.0\\.1:${port}(: the connection failed| could not connect): connect ECONNREFUSED 127\\.0\\.0\\.1:${port}$`,
        ),
      );
      expect(mcp.status().web?.status).not.toBe("connected");
      server = await startEverythingHttp("streamableHttp", port);
      const answer = await waitFor("a call on a new connection", () =>
        mcp.callTool("web", "echo", { message: "three" }).then(textOf, () => undefined),
      );
      expect(answer).toBe("Echo: three");
      expect(mcp.status()).toEqual({ web: { status: "connected" } });
    } finally {
      await server.stop();
    }
  });

  it("a server that was down offers its tools to the model's steps again once its start backoff is over, not a minute later", async () => {
    const port = await freePort();
    const mcp = await mcpOf({ web: { type: "remote", url: `http://127.0.0.1:${port}/mcp` } });
    expect(await mcp.tools()).toEqual([]);
    expect(mcp.status().web?.status).toBe("failed");
    const server = await startEverythingHttp("streamableHttp", port);
    try {
      // Bounded well under TOOLS_RETRY_MS (60 s), which only holds back a running server whose listing failed.
      const tools = await waitFor(
        "the server's tools in a step",
        async () => {
          const ids = (await mcp.tools()).map((tool) => tool.id);
          return ids.length > 0 && ids;
        },
        20_000,
        250,
      );
      expect(tools).toContain("web_echo");
      expect(mcp.status()).toEqual({ web: { status: "connected" } });
    } finally {
      await server.stop();
    }
  });
});

describe("a remote server and discovery", () => {
  it("is listed with its counts once connected (ListMcpServers{connect})", async () => {
    const server = await startEverythingHttp("streamableHttp");
    try {
      const mcp = await mcpOf({ web: { type: "remote", url: server.url } });
      expect(await mcp.servers({ connect: true })).toEqual([
        {
          name: "web",
          type: "remote",
          status: { status: "connected" },
          toolCount: expect.any(Number),
          resourceCount: expect.any(Number),
          resourceTemplateCount: expect.any(Number),
        },
      ]);
      const listing = await mcp.resources("web");
      expect(listing.resources.map((r) => r.uri)).toContain(ARCHITECTURE);
    } finally {
      await server.stop();
    }
  });

  it("a server that answers 401 needs auth: not tried over SSE, status needs_auth with the reason", async () => {
    const server = await startEverythingHttp("streamableHttp");
    const proxy = await recordingProxy(new URL(server.url).origin);
    proxy.answer = () => 401;
    try {
      const mcp = await mcpOf({ locked: { type: "remote", url: `${proxy.url}/mcp` } });
      const error =
        `MCP server "locked" at ${proxy.url} could not connect: it asks for authorization (HTTP 401); ` +
        `OAuth is not supported yet: put a token in "headers" (Streamable HTTP error: Error POSTing to endpoint: ` +
        `{"jsonrpc":"2.0","error":{"code":-32001,"message":"answered 401 by the test proxy"},"id":null})`;
      await expect(mcp.read("locked", ARCHITECTURE)).rejects.toThrow(new Error(error));
      expect(mcp.status()).toEqual({ locked: { status: "needs_auth", error } });
      expect(proxy.requests.map((r) => `${r.method} ${r.path}`)).toEqual(["POST /mcp"]);
    } finally {
      await proxy.close();
      await server.stop();
    }
  });
});

describe("a remote connection that breaks", () => {
  it("a request answered 404 (the session is gone) is sent again on a new session, once", async () => {
    const server = await startEverythingHttp("streamableHttp");
    const proxy = await recordingProxy(new URL(server.url).origin);
    try {
      const mcp = await mcpOf({ web: { type: "remote", url: `${proxy.url}/mcp` } });
      expect(textOf(await mcp.callTool("web", "echo", { message: "one" }))).toBe("Echo: one");
      const sessions = () => new Set(proxy.requests.map((r) => r.headers["mcp-session-id"]).filter(Boolean));
      expect(sessions().size).toBe(1);
      let once = false;
      proxy.answer = (r) => (r.method === "POST" && r.headers["mcp-session-id"] !== undefined && !once ? ((once = true), 404) : undefined);
      expect(textOf(await mcp.callTool("web", "echo", { message: "two" }))).toBe("Echo: two");
      expect(sessions().size).toBe(2);
      expect(mcp.status()).toEqual({ web: { status: "connected" } });
    } finally {
      await proxy.close();
      await server.stop();
    }
  });

  it.each(["streamableHttp", "sse"] as const)(
    "%s: an event stream that breaks for good drops the connection (status idle)",
    async (mode) => {
      const server = await startEverythingHttp(mode);
      try {
        const mcp = await mcpOf({ web: { type: "remote", url: server.url } });
        await mcp.tools();
        expect(mcp.status()).toEqual({ web: { status: "connected" } });
        await server.stop();
        await waitFor("the dropped connection", () => mcp.status().web?.status === "idle");
      } finally {
        await server.stop();
      }
    },
  );
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
