import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import { buildConfig, configFileSchema, ConfigError, parseConfigText, type LedgerConfig } from "../../src/config/config.js";
import { startMcp, type McpReader } from "../../src/mcp/client.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { promptOnce, shape, text, type Draft } from "../support/prompt.js";

/** A real stdio MCP server built with the same SDK the ledger uses (its ESM build, by absolute URL). */
const SERVER_SCRIPT = `
import { McpServer } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/mcp.js"))};
import { StdioServerTransport } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/stdio.js"))};

const server = new McpServer({ name: "docs", version: "1.0.0" });
const texts = (uri, ...items) => ({ contents: items.map((text) => ({ uri: uri.href, text })) });
server.registerResource("readme", "docs://readme", { mimeType: "text/markdown" }, async (uri) => texts(uri, "# Docs", "Second section."));
server.registerResource("logo", "docs://logo", { mimeType: "image/png" }, async (uri) => ({
  contents: [{ uri: uri.href, mimeType: "image/png", blob: "iVBORw0KGgoAAAANSUhEUg==" }],
}));
server.registerResource("broken", "docs://broken", {}, async () => {
  throw new Error("disk on fire");
});
server.registerResource("mixed", "docs://mixed", {}, async (uri) => ({
  contents: [{ uri: uri.href, text: "" }, { uri: uri.href, blob: "AAEC" }, { uri: uri.href, blob: "" }, { uri: uri.href, text: "after" }],
}));
server.registerResource("skill", "skill://writer/SKILL.md", { mimeType: "text/markdown" }, async (uri) => texts(uri, "# Writer skill"));
server.registerResource("memory", "mem:notes", {}, async (uri) => texts(uri, "remembered"));
server.registerResource("big", "docs://big", {}, async (uri) => texts(uri, "é".repeat(1000)));
server.registerResource("pid", "docs://pid", {}, async (uri) => texts(uri, String(process.pid)));
server.registerResource("exit", "docs://exit", {}, async () => process.exit(3));
server.registerResource("hang", "docs://hang", {}, () => new Promise(() => {}));
server.registerResource("env", "docs://env", {}, async (uri) => texts(uri, (process.env.DOCS_GREETING ?? "unset") + "|" + (process.env.LEDGER_SECRET ?? "unset")));
await server.connect(new StdioServerTransport());
`;

let scriptDir: string;
let script: string;
beforeAll(async () => {
  scriptDir = await mkdtemp(path.join(os.tmpdir(), "ledger-mcp-"));
  script = path.join(scriptDir, "docs-server.mjs");
  await writeFile(script, SERVER_SCRIPT);
});
afterAll(() => rm(scriptDir, { recursive: true, force: true }));

/** A file draft whose source is an MCP resource; its URL (stored as given) defaults to a file: URL. */
function resource(clientName: string, uri: string, filename: string, mime = "text/plain", url = `file:///${filename}`): Draft {
  return { kind: { case: "file", value: { mime, filename, url, source: { kind: { case: "resource", value: { clientName, uri } } } } } };
}

const reading = (filename: string, uri: string) => ({ kind: "text", synthetic: true, text: `Reading MCP resource: ${filename} (${uri})` });
const note = (value: string) => ({ kind: "text", synthetic: true, text: value });

function config(raw: Record<string, unknown>, baseDir = scriptDir): LedgerConfig {
  return buildConfig(configFileSchema.parse(raw), undefined, baseDir);
}

describe("MCP resources in prompts", () => {
  let t: TestLedger;
  let mcp: McpReader;
  beforeAll(async () => {
    t = await startTestLedger({ mcp: { docs: { command: [process.execPath, script] } } });
    // Until app.ts starts MCP itself, give the running ledger a reader made from its config.
    mcp = t.ledger.deps.mcp ?? (t.ledger.deps.mcp = await startMcp(t.ledger.deps.config));
  });
  afterAll(async () => {
    await t?.close();
    await mcp?.close();
  });

  it("keeps the resource's own URI scheme (skill://, mem:) as the file part's URL", async () => {
    const { message } = await promptOnce(t.client, t.dir, [
      text("use these"),
      resource("docs", "skill://writer/SKILL.md", "SKILL.md", "text/markdown", "skill://writer/SKILL.md"),
      resource("docs", "mem:notes", "notes", "text/plain", "mem:notes"),
    ]);
    expect(message.parts.slice(1).map(shape)).toEqual([
      reading("SKILL.md", "skill://writer/SKILL.md"),
      note("# Writer skill"),
      { kind: "file", mime: "text/markdown", filename: "SKILL.md", url: "skill://writer/SKILL.md" },
      reading("notes", "mem:notes"),
      note("remembered"),
      { kind: "file", mime: "text/plain", filename: "notes", url: "mem:notes" },
    ]);
  });

  it("without an MCP source the URL scheme rule stays: skill:// → INVALID_ARGUMENT on parts[1].file.url", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const error = await t.client
      .prompt({
        sessionId,
        noReply: true,
        parts: [text("x"), { kind: { case: "file", value: { mime: "text/markdown", url: "skill://writer/SKILL.md" } } }],
      })
      .catch((e: unknown) => e as Error);
    expect(String(error)).toContain(
      'parts[1].file.url: has the unsupported scheme "skill:" (expected a data:, file:, http: or https: URL)',
    );
  });

  it("stores the reading note, each text item in order, then the file part", async () => {
    const { message } = await promptOnce(t.client, t.dir, [
      text("summarize"),
      resource("docs", "docs://readme", "README.md", "text/markdown"),
    ]);
    expect(message.parts.map(shape)).toEqual([
      { kind: "text", synthetic: false, text: "summarize" },
      reading("README.md", "docs://readme"),
      note("# Docs"),
      note("Second section."),
      { kind: "file", mime: "text/markdown", filename: "README.md", url: "file:///README.md" },
    ]);
    const filePart = message.parts[4]!;
    expect(filePart.kind.case === "file" && filePart.kind.value.source?.kind).toEqual({
      case: "resource",
      value: expect.objectContaining({ clientName: "docs", uri: "docs://readme" }),
    });
  });

  it("notes a binary resource without inlining it", async () => {
    const { message } = await promptOnce(t.client, t.dir, [resource("docs", "docs://logo", "logo.png", "image/png")]);
    expect(message.parts.map(shape)).toEqual([
      reading("logo.png", "docs://logo"),
      note("[Binary content: image/png]"),
      { kind: "file", mime: "image/png", filename: "logo.png", url: "file:///logo.png" },
    ]);
    expect(JSON.stringify(message.parts.map(shape))).not.toContain("iVBORw0KGgo");
  });

  it("skips empty items and names a blob without a mime by the draft's mime", async () => {
    const { message } = await promptOnce(t.client, t.dir, [resource("docs", "docs://mixed", "mixed.bin", "application/octet-stream")]);
    expect(message.parts.map(shape)).toEqual([
      reading("mixed.bin", "docs://mixed"),
      note("[Binary content: application/octet-stream]"),
      note("after"),
      { kind: "file", mime: "application/octet-stream", filename: "mixed.bin", url: "file:///mixed.bin" },
    ]);
  });

  it("answers a resource whose read fails with the failure text and no file part", async () => {
    const { message } = await promptOnce(t.client, t.dir, [text("read"), resource("docs", "docs://broken", "broken.txt")]);
    expect(message.parts.slice(1).map(shape)).toEqual([
      reading("broken.txt", "docs://broken"),
      note("Failed to read MCP resource broken.txt: MCP error -32603: disk on fire"),
    ]);
  });

  it("answers an unknown resource and an unknown server with the failure text", async () => {
    const { message } = await promptOnce(t.client, t.dir, [
      resource("docs", "docs://missing", "missing.md"),
      resource("wiki", "wiki://home", "home.md"),
      resource("docs", "docs://readme", "README.md"),
    ]);
    expect(message.parts.map(shape)).toEqual([
      reading("missing.md", "docs://missing"),
      note("Failed to read MCP resource missing.md: MCP error -32602: Resource docs://missing not found"),
      reading("home.md", "wiki://home"),
      note('Failed to read MCP resource home.md: MCP server "wiki" is not configured (configured: "docs")'),
      reading("README.md", "docs://readme"),
      note("# Docs"),
      note("Second section."),
      { kind: "file", mime: "text/plain", filename: "README.md", url: "file:///README.md" },
    ]);
    expect(message.parts.filter((p: Part) => p.kind.case === "text" && p.kind.value.synthetic)).toHaveLength(7);
  });
});

describe("McpReader", () => {
  it("returns a text item whole, whatever text_part_bytes says (a prompt bounds it: mcp_item_bytes, test/mcp/limits.test.ts)", async () => {
    const mcp = await startMcp(config({ limits: { text_part_bytes: 300 }, mcp: { docs: { command: [process.execPath, script] } } }));
    try {
      expect(await mcp.read("docs", "docs://big")).toEqual([{ text: "é".repeat(1000) }]);
    } finally {
      await mcp.close();
    }
  });

  it("passes the configured env but not the ledger's own environment", async () => {
    process.env.LEDGER_SECRET = "do-not-leak";
    const mcp = await startMcp(
      config({ mcp: { docs: { type: "local", command: [process.execPath, script], environment: { DOCS_GREETING: "hello" } } } }),
    );
    try {
      expect(await mcp.read("docs", "docs://env")).toEqual([{ text: "hello|unset" }]);
    } finally {
      delete process.env.LEDGER_SECRET;
      await mcp.close();
    }
  });

  it("starts a new process after the server died", async () => {
    const mcp = await startMcp(config({ mcp: { docs: { command: [process.execPath, script] } } }));
    try {
      const pid = async () => {
        const [item] = await mcp.read("docs", "docs://pid");
        return Number(item && "text" in item ? item.text : NaN);
      };
      const first = await pid();
      expect(await pid()).toBe(first);
      await expect(mcp.read("docs", "docs://exit")).rejects.toThrow(/Connection closed/);
      const second = await pid();
      expect(second).not.toBe(first);
      expect(alive(first)).toBe(false);
    } finally {
      await mcp.close();
    }
  });

  it("gives up on a read after its timeout and keeps the connection usable", async () => {
    // 4 s: starting a node process on a busy CI machine must not hit it on the first read.
    const mcp = await startMcp(config({ mcp: { slow: { command: [process.execPath, script], timeout: 4000 } } }));
    try {
      await mcp.read("slow", "docs://pid"); // started: the timeout below covers the read alone
      const started = Date.now();
      await expect(mcp.read("slow", "docs://hang")).rejects.toThrow('MCP server "slow" did not answer within 4000 ms');
      expect(Date.now() - started).toBeLessThan(20_000);
      expect(await mcp.read("slow", "docs://readme")).toEqual([{ text: "# Docs" }, { text: "Second section." }]);
    } finally {
      await mcp.close();
    }
  });

  it("stops waiting when the caller's signal aborts", async () => {
    const mcp = await startMcp(config({ mcp: { docs: { command: [process.execPath, script] } } }));
    try {
      await expect(mcp.read("docs", "docs://hang", AbortSignal.timeout(200))).rejects.toThrow(/aborted|timed out|timeout/i);
    } finally {
      await mcp.close();
    }
  });

  it("reports a server that cannot start, and unknown names with the configured ones", async () => {
    const mcp = await startMcp(
      config({ mcp: { broken: { command: [path.join(scriptDir, "no-such-server")] }, docs: { command: [process.execPath, script] } } }),
    );
    try {
      await expect(mcp.read("broken", "docs://readme")).rejects.toThrow(/^MCP server "broken" could not start: .*ENOENT/);
      await expect(mcp.read("nope", "docs://readme")).rejects.toThrow('MCP server "nope" is not configured (configured: "broken", "docs")');
      const none = await startMcp(config({}));
      await expect(none.read("docs", "docs://readme")).rejects.toThrow(
        'MCP server "docs" is not configured (no MCP servers are configured)',
      );
      await none.close();
    } finally {
      await mcp.close();
    }
  });

  it("stops its processes on close; later reads fail", async () => {
    const mcp = await startMcp(config({ mcp: { docs: { command: [process.execPath, script] } } }));
    const [item] = await mcp.read("docs", "docs://pid");
    const pid = Number(item && "text" in item ? item.text : NaN);
    expect(alive(pid)).toBe(true);
    await mcp.close();
    expect(alive(pid)).toBe(false);
    await expect(mcp.read("docs", "docs://pid")).rejects.toThrow("MCP is shut down");
  });
});

describe("mcp config (the old keys)", () => {
  it("reads env and timeout_ms as environment and timeout, and resolves a ./ command against the config directory", () => {
    const loaded = config(
      { mcp: { a: { command: ["./bin/server", "--stdio"] }, b: { command: ["npx", "x"], env: { K: "v" }, timeout_ms: 500 } } },
      "/etc/ledger",
    );
    expect(loaded.mcp).toEqual({
      a: { type: "local", command: ["/etc/ledger/bin/server", "--stdio"], environment: {}, enabled: true, timeoutMs: 10_000 },
      b: { type: "local", command: ["npx", "x"], environment: { K: "v" }, enabled: true, timeoutMs: 500 },
    });
    expect(config({}).mcp).toEqual({});
  });

  it("refuses an empty command", () => {
    expect(() => parseConfigText('{ "mcp": { "a": { "command": [] } } }', "ledger.json")).toThrow(ConfigError);
    expect(() => parseConfigText('{ "mcp": { "a": { "command": [] } } }', "ledger.json")).toThrow(/ledger\.json: mcp\.a\.command: /);
  });
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
