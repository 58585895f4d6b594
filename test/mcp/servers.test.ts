import { getEventListeners } from "node:events";
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { logStderr, STDERR_LINES_PER_WINDOW, STDERR_WINDOW_MS } from "../../src/mcp/stderr-log.js";
import { createLogger, logger } from "../../src/observe/log.js";
import { startTestLedger } from "../support/ledger.js";
import { freePort } from "../support/mcp-http.js";
import { childPids, everything, mcpReaders } from "../support/mcp-servers.js";
import { waitFor } from "../support/wait.js";

const mcpOf = mcpReaders();

describe("MCP servers configured as in opencode.json (server-everything)", () => {
  it('never starts a server with "enabled": false: no child process, its uses fail saying so', async () => {
    const before = childPids();
    const mcp = await mcpOf({ off: everything({ enabled: false }) });
    expect(await mcp.tools()).toEqual([]);
    await expect(mcp.read("off", "demo://resource/static/document/architecture.md")).rejects.toThrow(
      'MCP server "off" is disabled ("enabled": false)',
    );
    await expect(mcp.callTool("off", "echo", { message: "x" })).rejects.toThrow('MCP server "off" is disabled ("enabled": false)');
    expect(mcp.status()).toEqual({ off: { status: "disabled" } });
    expect(childPids()).toEqual(before);
  });

  it("starts an enabled one (one child process), lists its tools as <server>_<tool>, and stops it on close", async () => {
    const before = childPids();
    const mcp = await mcpOf({ off: everything({ enabled: false }), "every thing": everything() });
    expect(mcp.status()).toEqual({ off: { status: "disabled" }, "every thing": { status: "idle" } });
    const tools = await mcp.tools();
    expect(tools.map((t) => t.id)).toEqual(expect.arrayContaining(["every_thing_echo", "every_thing_get-sum", "every_thing_get-env"]));
    expect(tools.find((t) => t.name === "get-sum")).toEqual({
      server: "every thing",
      name: "get-sum",
      id: "every_thing_get-sum",
      description: "Returns the sum of two numbers",
      inputSchema: expect.objectContaining({
        type: "object",
        properties: { a: { type: "number", description: "First number" }, b: { type: "number", description: "Second number" } },
        required: ["a", "b"],
      }),
    });
    expect(mcp.status()).toEqual({ off: { status: "disabled" }, "every thing": { status: "connected" } });
    const started = childPids().filter((pid) => !before.includes(pid));
    expect(started).toHaveLength(1);
    await mcp.close();
    await waitFor("the server process to end", () => childPids().every((pid) => !started.includes(pid)));
  });

  it("passes environment to the server (and not the ledger's own variables)", async () => {
    process.env.LEDGER_SECRET = "do-not-leak";
    try {
      const mcp = await mcpOf({ everything: everything({ environment: { GREETING: "hello from ledger.json" } }) });
      const result = await mcp.callTool("everything", "get-env", {});
      const first = result.content[0] as { type: string; text: string };
      const env = JSON.parse(first.text) as Record<string, string>;
      expect(env.GREETING).toBe("hello from ledger.json");
      expect(env.LEDGER_SECRET).toBeUndefined();
    } finally {
      delete process.env.LEDGER_SECRET;
    }
  });

  it("honours timeout: a server that never answers initialize fails after it, alone, and adds no tools", async () => {
    const mute = { type: "local", command: [process.execPath, "-e", "setInterval(() => {}, 1000)"], timeout: 700 };
    const mcp = await mcpOf({ mute, everything: everything() });
    const started = Date.now();
    const tools = await mcp.tools();
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(tools.some((t) => t.id === "everything_echo")).toBe(true);
    expect(tools.some((t) => t.server === "mute")).toBe(false);
    expect(mcp.status().everything).toEqual({ status: "connected" });
    const failed = await waitFor("the failed status", () => mcp.status().mute?.status === "failed" && mcp.status().mute);
    expect(failed).toEqual({ status: "failed", error: expect.stringMatching(/^MCP server "mute" could not start: .*timed out/i) });
    // Within the wait after the failed start (1 s), a use fails at once with its error; after it, it starts again.
    await expect(mcp.read("mute", "x://y")).rejects.toThrow(/^MCP server "mute" could not start: .* \(next attempt in \d+ ms\)$/);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await expect(mcp.read("mute", "x://y")).rejects.toThrow('MCP server "mute" did not answer within 700 ms');
  });

  it("bounds a tool call by timeout (not the SDK's 60 s)", async () => {
    // 4 s: starting a node process on a busy machine must not hit it.
    const mcp = await mcpOf({ everything: everything({ timeout: 4000 }) });
    await mcp.callTool("everything", "echo", { message: "start" });
    // One step of 20 s: no progress before the end (test/mcp/remote.test.ts has progress restarting it).
    await expect(mcp.callTool("everything", "trigger-long-running-operation", { duration: 20, steps: 1 })).rejects.toThrow(
      new Error('MCP server "everything" did not answer within 4000 ms'),
    );
  });

  it("leaves nothing on the caller's signal once a call, a read or a listing is over (the SDK's listener held each answer as long as the signal lived)", async () => {
    const mcp = await mcpOf({ everything: everything({ timeout: 4000 }) });
    const run = new AbortController();
    await mcp.callTool("everything", "echo", { message: "hi" }, run.signal);
    await mcp.read("everything", "demo://resource/static/document/architecture.md", run.signal);
    await mcp.tools(run.signal);
    expect(getEventListeners(run.signal, "abort")).toEqual([]);
  });

  it("a ledger with an unreachable remote, a disabled and a broken server starts and reads the good one's resources", async () => {
    const t = await startTestLedger({
      mcp: {
        remote: { type: "remote", url: `http://127.0.0.1:${await freePort()}/mcp`, headers: { Authorization: "Bearer x" } },
        off: everything({ enabled: false }),
        broken: { type: "local", command: ["/nonexistent/mcp-server"] },
        everything: everything(),
      },
    });
    try {
      const contents = await t.ledger.deps.mcp!.read("everything", "demo://resource/static/document/architecture.md");
      expect(contents).toEqual([{ text: expect.stringContaining("Architecture") }]);
    } finally {
      await t.close();
    }
  });
});

describe("MCP server stderr", () => {
  it("becomes info log records with the server's name, one per line", async () => {
    const lines: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    const level = logger.level;
    logger.setLevel("info");
    process.stderr.write = ((chunk: string | Uint8Array) => {
      lines.push(String(chunk));
      return true;
    }) as typeof process.stderr.write;
    try {
      const mcp = await mcpOf({ everything: everything() });
      await mcp.tools();
      await waitFor("the server's first stderr line", () => lines.some((l) => l.includes("Starting default (STDIO) server")));
    } finally {
      process.stderr.write = write;
      logger.setLevel(level);
    }
    const records = lines.filter((l) => l.includes('"mcp server stderr"')).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(records[0]).toEqual({
      time: expect.any(String),
      level: "info",
      msg: "mcp server stderr",
      server: "everything",
      line: "Starting default (STDIO) server...",
    });
  });
});

describe("logStderr", () => {
  it(`logs at most ${STDERR_LINES_PER_WINDOW} lines per ${STDERR_WINDOW_MS} ms, then how many it dropped`, async () => {
    const records: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: "info", write: (line) => records.push(JSON.parse(line) as Record<string, unknown>) });
    let now = 0;
    const stream = new PassThrough();
    logStderr("noisy", stream, log, () => now);
    stream.write(Array.from({ length: STDERR_LINES_PER_WINDOW + 5 }, (_, i) => `line ${i}`).join("\n") + "\n");
    await waitFor("the first window's lines", () => records.length === STDERR_LINES_PER_WINDOW);
    now = STDERR_WINDOW_MS;
    stream.end("after the window\n");
    await waitFor("the dropped count and the next line", () => records.length === STDERR_LINES_PER_WINDOW + 2);
    const strip = ({ time: _time, ...rest }: Record<string, unknown>) => rest;
    expect(records.slice(0, 2).map(strip)).toEqual([
      { level: "info", msg: "mcp server stderr", server: "noisy", line: "line 0" },
      { level: "info", msg: "mcp server stderr", server: "noisy", line: "line 1" },
    ]);
    expect(records.slice(-2).map(strip)).toEqual([
      { level: "warn", msg: "mcp server stderr lines dropped", server: "noisy", dropped: 5 },
      { level: "info", msg: "mcp server stderr", server: "noisy", line: "after the window" },
    ]);
  });
});
