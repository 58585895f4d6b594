import { mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../support/cli.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { EVERYTHING, everything } from "../support/mcp-servers.js";

// `ledger mcp` (ListMcpServers with connect, ListMcpResources) and `ledger prompt --resource`,
// in-process (`main(argv, io)`), against a running server (--url) and against the in-process
// server a new user gets from a ledger.json (no --url), with the published server-everything.

const DOCS = ["architecture.md", "extension.md", "features.md", "how-it-works.md", "instructions.md", "startup.md", "structure.md"];
const uri = (name: string) => `demo://resource/static/document/${name}`;
const RESOURCE_LINES = [
  ...DOCS.map((name) => `${uri(name)}  ${name}  text/markdown`),
  "resource templates:",
  "  demo://resource/dynamic/text/{resourceId}  Dynamic Text Resource  text/plain",
  "  demo://resource/dynamic/blob/{resourceId}  Dynamic Blob Resource  application/octet-stream",
];

let t: TestLedger;
let missing: string;
beforeAll(async () => {
  missing = path.join(os.tmpdir(), "ledger-no-such-mcp-server");
  t = await startTestLedger(
    { mcp: { everything: everything(), off: everything({ enabled: false }), broken: { type: "local", command: [missing] } } },
    { transport: "http" },
  );
});
afterAll(() => t?.close());

const place = () => ({ cwd: t.dir, env: { PATH: process.env.PATH } });

describe("ledger mcp", () => {
  it("lists every server with its status (starting them): counts, disabled, the start failure", async () => {
    const run = await runCli(["mcp", "--url", t.ledger.url], place());
    expect(run).toEqual({
      code: 0,
      stderr: "",
      stdout: [
        "everything  local  connected  13 tools, 7 resources, 2 resource templates",
        'off         local  disabled ("enabled": false)',
        `broken      local  failed: MCP server "broken" could not start: spawn ${missing} ENOENT`,
        "",
      ].join("\n"),
    });
  });

  it("--json prints one McpServer per line (proto JSON)", async () => {
    const run = await runCli(["mcp", "--url", t.ledger.url, "--json"], place());
    expect(run.code, run.stderr).toBe(0);
    expect(
      run.stdout
        .trimEnd()
        .split("\n")
        .map((line) => JSON.parse(line) as unknown),
    ).toEqual([
      {
        name: "everything",
        type: "MCP_SERVER_TYPE_LOCAL",
        status: "MCP_SERVER_STATUS_CONNECTED",
        toolCount: 13,
        resourceCount: 7,
        resourceTemplateCount: 2,
      },
      { name: "off", type: "MCP_SERVER_TYPE_LOCAL", status: "MCP_SERVER_STATUS_DISABLED" },
      {
        name: "broken",
        type: "MCP_SERVER_TYPE_LOCAL",
        status: "MCP_SERVER_STATUS_FAILED",
        error: `MCP server "broken" could not start: spawn ${missing} ENOENT`,
      },
    ]);
  });

  it("`ledger mcp SERVER` lists its resources, then its resource templates; --json one message per line", async () => {
    const run = await runCli(["mcp", "everything", "--url", t.ledger.url], place());
    expect(run).toEqual({ code: 0, stderr: "", stdout: `${RESOURCE_LINES.join("\n")}\n` });
    const json = await runCli(["mcp", "everything", "--url", t.ledger.url, "--json"], place());
    const lines = json.stdout
      .trimEnd()
      .split("\n")
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(lines.map((l) => l.uri ?? l.uriTemplate)).toEqual([
      ...DOCS.map(uri),
      "demo://resource/dynamic/text/{resourceId}",
      "demo://resource/dynamic/blob/{resourceId}",
    ]);
    expect(lines[0]).toEqual({
      uri: uri("architecture.md"),
      name: "architecture.md",
      description: "Static document file exposed from /docs: architecture.md",
      mimeType: "text/markdown",
    });
  });

  it("an unknown server, a disabled one, one that cannot start: the RPC's error, exit 1", async () => {
    expect(await runCli(["mcp", "nope", "--url", t.ledger.url], place())).toEqual({
      code: 1,
      stdout: "",
      stderr: 'error: NotFound: server: MCP server "nope" is not configured; configured MCP servers: "everything", "off", "broken"\n',
    });
    expect(await runCli(["mcp", "off", "--url", t.ledger.url], place())).toEqual({
      code: 1,
      stdout: "",
      stderr: 'error: FailedPrecondition: server: MCP server "off" is disabled ("enabled": false)\n',
    });
    // `ledger mcp` started it before: within the wait (1 s, 2 s, …) the use fails at once with its error.
    const broken = await runCli(["mcp", "broken", "--url", t.ledger.url], place());
    expect({ ...broken, stderr: broken.stderr.replace(/ \(next attempt in \d+ ms\)\n$/, "\n") }).toEqual({
      code: 1,
      stdout: "",
      stderr: `error: Unavailable: MCP server "broken" could not start: spawn ${missing} ENOENT\n`,
    });
  });
});

describe("ledger prompt --resource", () => {
  it("attaches a listed resource as a file draft with an MCP source (its name and type from the listing)", async () => {
    const run = await runCli(
      [
        "prompt",
        "--url",
        t.ledger.url,
        "--dir",
        t.dir,
        "--no-reply",
        "--json",
        "--resource",
        `everything:${uri("architecture.md")}`,
        "summarize",
      ],
      place(),
    );
    expect(run.code, run.stderr).toBe(0);
    const message = JSON.parse(run.stdout) as { parts: Array<{ text?: { text: string; synthetic?: boolean }; file?: unknown }> };
    expect(message.parts.map((p) => p.text ?? p.file)).toEqual([
      { text: "summarize" },
      { text: `Reading MCP resource: architecture.md (${uri("architecture.md")})`, synthetic: true },
      { text: expect.stringMatching(/^# Everything Server – Architecture/) as unknown, synthetic: true },
      {
        mime: "text/markdown",
        filename: "architecture.md",
        url: uri("architecture.md"),
        source: { resource: { clientName: "everything", uri: uri("architecture.md") } },
      },
    ]);
  });

  it("attaches a URI the server does not list (from a template) as text/plain named by its last segment", async () => {
    const dynamic = "demo://resource/dynamic/text/7";
    const run = await runCli(
      ["prompt", "--url", t.ledger.url, "--dir", t.dir, "--no-reply", "--json", "--resource", `everything:${dynamic}`, "read"],
      place(),
    );
    expect(run.code, run.stderr).toBe(0);
    const message = JSON.parse(run.stdout) as { parts: Array<{ text?: { text: string }; file?: unknown }> };
    expect(message.parts.at(-1)?.file).toEqual({
      mime: "text/plain",
      filename: "7",
      url: dynamic,
      source: { resource: { clientName: "everything", uri: dynamic } },
    });
    expect(message.parts[2]?.text?.text).toMatch(/^Resource 7: This is a plaintext resource created at /);
  });

  it("refuses a malformed --resource and an unknown server before anything is stored", async () => {
    const before = (await t.client.listSessions({})).sessions.length;
    expect(await runCli(["prompt", "--url", t.ledger.url, "--resource", "everything", "x"], place())).toEqual({
      code: 1,
      stdout: "",
      stderr: "error: --resource everything: expected SERVER:URI, e.g. everything:demo://resource/static/document/architecture.md\n",
    });
    expect(await runCli(["prompt", "--url", t.ledger.url, "--no-reply", "--resource", "nope:demo://x", "x"], place())).toEqual({
      code: 1,
      stdout: "",
      stderr: 'error: NotFound: server: MCP server "nope" is not configured; configured MCP servers: "everything", "off", "broken"\n',
    });
    expect((await t.client.listSessions({})).sessions.length).toBe(before);
  });
});

describe("as a new user: ledger.json with server-everything, no --url", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-cli-mcp-")));
    const config = { mcp: { everything: { type: "local", command: [process.execPath, EVERYTHING, "stdio"] } } };
    await writeFile(path.join(dir, "ledger.json"), JSON.stringify(config, null, 2));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it("`ledger mcp` and `ledger mcp everything` start the in-process server and list it", async () => {
    const where = { cwd: dir, env: { PATH: process.env.PATH } };
    expect(await runCli(["mcp", "--db", ":memory:"], where)).toEqual({
      code: 0,
      stderr: "",
      stdout: "everything  local  connected  13 tools, 7 resources, 2 resource templates\n",
    });
    expect(await runCli(["mcp", "everything", "--db", ":memory:"], where)).toEqual({
      code: 0,
      stderr: "",
      stdout: `${RESOURCE_LINES.join("\n")}\n`,
    });
  });
});
