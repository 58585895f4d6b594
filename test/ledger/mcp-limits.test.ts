import { readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { STDIO_DEFAULT_MAX_BUFFER_SIZE } from "@modelcontextprotocol/sdk/shared/stdio.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LanguageModelV3 } from "@ai-sdk/provider";
import type { ToolPart } from "../../gen/ledger/v1/part_pb.js";
import { DEFAULT_LIMITS } from "../../src/config/limits.js";
import { MCP_READS_AT_ONCE } from "../../src/parts/mcp-budget.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { everything } from "../support/mcp-servers.js";
import { mockResolver, NO_RETRY, scriptedModel, textReply, toolCallReply, type ModelKey } from "../support/mock-models.js";
import { promptOnce, shape, text, type Draft } from "../support/prompt.js";

// Bounded MCP answers (docs/configuration.md "Limits"): a resource item over mcp_item_bytes, a
// prompt's resources over mcp_prompt_bytes and a message over the SDK's stdio buffer each give
// the draft a failure text naming the limit; the prompt is still stored.

const DOCS_DIR = path.join(
  path.dirname(createRequire(import.meta.url).resolve("@modelcontextprotocol/server-everything/package.json")),
  "dist/docs",
);
const docText = (name: string) => readFileSync(path.join(DOCS_DIR, name), "utf8");
const docBytes = (name: string) => Buffer.byteLength(docText(name), "utf8");

/** A stdio server (the MCP SDK's) with resources of 2 MiB and of 11 MiB (over the stdio buffer), small ones, and 1 MiB ones that count their reads. */
const BIG_SERVER = `
import { McpServer, ResourceTemplate } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/mcp.js"))};
import { StdioServerTransport } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/stdio.js"))};
const server = new McpServer({ name: "big", version: "1.0.0" });
const text = (uri, value) => ({ contents: [{ uri: uri.href, text: value }] });
server.registerResource("two", "big://two-mib", {}, async (uri) => text(uri, "x".repeat(2 * 1024 * 1024)));
server.registerResource("huge", "big://eleven-mib", {}, async (uri) => text(uri, "x".repeat(11 * 1024 * 1024)));
server.registerResource("pid", "big://pid", {}, async (uri) => text(uri, String(process.pid)));
// 1 MiB a read (exactly mcp_item_bytes), 50 ms each; big://stats tells how many were read and most at once.
let reads = 0, reading = 0, most = 0;
server.registerResource("mib", new ResourceTemplate("big://mib/{n}", { list: undefined }), {}, async (uri) => {
  reads++;
  most = Math.max(most, ++reading);
  await new Promise((resolve) => setTimeout(resolve, 50));
  reading--;
  return text(uri, "y".repeat(1024 * 1024));
});
server.registerResource("stats", "big://stats", {}, async (uri) => {
  const stats = { reads, most };
  reads = 0;
  most = 0;
  return text(uri, JSON.stringify(stats));
});
await server.connect(new StdioServerTransport());
`;

function resource(server: string, uri: string, filename: string): Draft {
  return {
    kind: {
      case: "file",
      value: { mime: "text/markdown", filename, url: uri, source: { kind: { case: "resource", value: { clientName: server, uri } } } },
    },
  };
}
const note = (value: string) => ({ kind: "text", synthetic: true, text: value });
const reading = (filename: string, uri: string) => note(`Reading MCP resource: ${filename} (${uri})`);
const doc = (name: string) => `demo://resource/static/document/${name}`;

describe("mcp_item_bytes and mcp_prompt_bytes", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger({ mcp: { everything: everything() }, limits: { mcp_item_bytes: 10_000, mcp_prompt_bytes: 12_000 } });
  });
  afterAll(() => t?.close());

  it("fails an item over mcp_item_bytes, then the drafts that would pass mcp_prompt_bytes in draft order; the prompt is stored", async () => {
    const [architecture, structure, features, howItWorks] = ["architecture.md", "structure.md", "features.md", "how-it-works.md"].map(
      docBytes,
    );
    expect({ architecture, structure, features, howItWorks }).toEqual({
      architecture: 1616,
      structure: 12324,
      features: 9889,
      howItWorks: 2772,
    });
    const dynamic = "demo://resource/dynamic/text/1";
    const { sessionId, message } = await promptOnce(t.client, t.dir, [
      text("read these"),
      resource("everything", doc("architecture.md"), "architecture.md"),
      resource("everything", doc("structure.md"), "structure.md"),
      resource("everything", doc("features.md"), "features.md"),
      resource("everything", doc("how-it-works.md"), "how-it-works.md"),
      resource("everything", dynamic, "1.txt"),
    ]);
    const fileOf = (filename: string, url: string) => ({ kind: "file", mime: "text/markdown", filename, url });
    const expected = [
      { kind: "text", synthetic: false, text: "read these" },
      reading("architecture.md", doc("architecture.md")),
      note(docText("architecture.md")),
      fileOf("architecture.md", doc("architecture.md")),
      reading("structure.md", doc("structure.md")),
      note(
        `Failed to read MCP resource structure.md: item 1 of ${doc("structure.md")} is 12324 bytes of text, over limits.mcp_item_bytes (10000 bytes)`,
      ),
      reading("features.md", doc("features.md")),
      note(docText("features.md")),
      fileOf("features.md", doc("features.md")),
      reading("how-it-works.md", doc("how-it-works.md")),
      note(
        "Failed to read MCP resource how-it-works.md: its 2772 bytes of text would bring the prompt's MCP resources to 14277 bytes, over limits.mcp_prompt_bytes (12000 bytes)",
      ),
      reading("1.txt", dynamic),
      note(expect.stringMatching(/^Resource 1: This is a plaintext resource created at .+$/) as unknown as string),
      fileOf("1.txt", dynamic),
    ];
    expect(message.parts.map(shape)).toEqual(expected);
    // As stored: read back, the same parts.
    const stored = await t.client.getMessage({ sessionId, messageId: message.parts[0]!.messageId });
    expect(stored.message!.parts.map(shape)).toEqual(expected);
  });

  it("counts each prompt on its own: the next prompt gets the whole budget again", async () => {
    const { message } = await promptOnce(t.client, t.dir, [resource("everything", doc("features.md"), "features.md")]);
    expect(message.parts.map(shape)).toEqual([
      reading("features.md", doc("features.md")),
      note(docText("features.md")),
      { kind: "file", mime: "text/markdown", filename: "features.md", url: doc("features.md") },
    ]);
  });
});

describe("default limits and the stdio buffer", () => {
  let t: TestLedger;
  let scriptDir: string;
  beforeAll(async () => {
    scriptDir = await mkdtemp(path.join(os.tmpdir(), "ledger-mcp-limits-"));
    await writeFile(path.join(scriptDir, "big.mjs"), BIG_SERVER);
    t = await startTestLedger({ mcp: { big: { type: "local", command: [process.execPath, path.join(scriptDir, "big.mjs")] } } });
  });
  afterAll(async () => {
    await t?.close();
    await rm(scriptDir, { recursive: true, force: true });
  });

  it("the default mcp_item_bytes (1 MiB) fails a 2 MiB item, naming it", async () => {
    expect(DEFAULT_LIMITS.mcp_item_bytes).toBe(1024 * 1024);
    const { message } = await promptOnce(t.client, t.dir, [text("read"), resource("big", "big://two-mib", "two.txt")]);
    expect(message.parts.slice(1).map(shape)).toEqual([
      reading("two.txt", "big://two-mib"),
      note(
        "Failed to read MCP resource two.txt: item 1 of big://two-mib is 2097152 bytes of text, over limits.mcp_item_bytes (1048576 bytes)",
      ),
    ]);
  });

  it("names the stdio limit when an answer is over the SDK's buffer; the server starts again for the next read", async () => {
    expect(STDIO_DEFAULT_MAX_BUFFER_SIZE).toBe(10 * 1024 * 1024);
    const pid = async () => {
      const { message } = await promptOnce(t.client, t.dir, [resource("big", "big://pid", "pid.txt")]);
      return Number(message.parts[1]?.kind.case === "text" ? message.parts[1].kind.value.text : NaN);
    };
    const before = await pid();
    const { message } = await promptOnce(t.client, t.dir, [text("read"), resource("big", "big://eleven-mib", "huge.txt")]);
    expect(message.parts.slice(1).map(shape)).toEqual([
      reading("huge.txt", "big://eleven-mib"),
      note(
        'Failed to read MCP resource huge.txt: MCP server "big" sent a message larger than the stdio limit (10485760 bytes); the connection was closed and the server starts again on its next use',
      ),
    ]);
    const after = await pid();
    expect(after).toBeGreaterThan(0);
    expect(after).not.toBe(before);
  });

  it("reads a prompt's resources at most MCP_READS_AT_ONCE at a time, and none once the budget is full: 8 of 12 MiB drafts fit the default 8 MiB", async () => {
    expect(MCP_READS_AT_ONCE).toBe(4);
    expect(DEFAULT_LIMITS.mcp_prompt_bytes).toBe(8 * 1024 * 1024);
    const drafts = Array.from({ length: 12 }, (_, i) => resource("big", `big://mib/${i + 1}`, `${i + 1}.txt`));
    const { message } = await promptOnce(t.client, t.dir, [text("read them"), ...drafts]);
    const mib = "y".repeat(1024 * 1024);
    const fits = (i: number) => [
      reading(`${i}.txt`, `big://mib/${i}`),
      note(mib),
      { kind: "file", mime: "text/markdown", filename: `${i}.txt`, url: `big://mib/${i}` },
    ];
    const over = (i: number) => [
      reading(`${i}.txt`, `big://mib/${i}`),
      note(
        `Failed to read MCP resource ${i}.txt: its 1048576 bytes of text would bring the prompt's MCP resources to 9437184 bytes, over limits.mcp_prompt_bytes (8388608 bytes)`,
      ),
    ];
    // Each draft holds its slot from its read to its take, slots go in draft order: draft 12 gets
    // one once draft 8 has taken the last MiB, and is not read at all.
    const notRead = [
      reading("12.txt", "big://mib/12"),
      note("Failed to read MCP resource 12.txt: not read: the prompt's MCP resources already fill limits.mcp_prompt_bytes (8388608 bytes)"),
    ];
    expect(message.parts.slice(1).map(shape)).toEqual([
      ...[1, 2, 3, 4, 5, 6, 7, 8].flatMap(fits),
      ...[9, 10, 11].flatMap(over),
      ...notRead,
    ]);
    const stats = await promptOnce(t.client, t.dir, [resource("big", "big://stats", "stats.txt")]);
    const { reads, most } = JSON.parse((stats.message.parts[1]!.kind.value as { text: string }).text) as { reads: number; most: number };
    expect({ reads, most }).toEqual({ reads: 11, most: MCP_READS_AT_ONCE });
  });
});

describe("an MCP tool's output and mcp_item_bytes", () => {
  const models: Partial<Record<ModelKey, LanguageModelV3>> = {};
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger(
      { model: "mock/model", retry: NO_RETRY, mcp: { everything: everything() }, limits: { mcp_item_bytes: 200 } },
      { models: mockResolver(models) },
    );
  });
  afterAll(() => t?.close());

  it("stores the output cut to mcp_item_bytes with a note naming the limit, and the model sees the same", async () => {
    const mock = scriptedModel([toolCallReply("call_1", "everything_echo", { message: "x".repeat(500) }), textReply("done")]);
    models["mock/model"] = mock;
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    await t.client.prompt({ sessionId, parts: [text("echo it")] });
    const { messages } = await t.client.listMessages({ sessionId });
    const tool = messages[1]!.parts.find((p) => p.kind.case === "tool")!.kind.value as ToolPart;
    const notice = "\n\n[MCP tool output truncated: 506 bytes, over limits.mcp_item_bytes (200 bytes)]";
    const output = `Echo: ${"x".repeat(200 - notice.length - "Echo: ".length)}${notice}`;
    expect(Buffer.byteLength(output)).toBe(200);
    expect(tool.state!.status).toEqual({
      case: "completed",
      value: expect.objectContaining({ output, title: "echo", metadata: { server: "everything", tool: "echo", truncated: true } }),
    });
    expect(mock.doStreamCalls[1]!.prompt.at(-1)!.content).toEqual([
      expect.objectContaining({ type: "tool-result", toolName: "everything_echo", output: { type: "text", value: output } }),
    ]);
  });
});
