import { spawn, type ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { parse as parseJsonc } from "jsonc-parser";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { finished, runCli, waitForOutput, type CliRun } from "../support/cli.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { everything } from "../support/mcp-servers.js";

// docs/walkthrough.md "MCP", for real: the scripted model of examples/ (spawned), a ledger with
// examples/scripted-mcp.json (its baseURL pointed at that model's port, and server-everything
// started with node instead of npx: no download in tests), then `ledger mcp`, a prompt whose
// scripted model calls an MCP tool, and `ledger prompt --resource`.

const EXAMPLES = path.resolve(import.meta.dirname, "../../examples");

let model: ChildProcess | undefined;
let modelExit: Promise<CliRun> | undefined;
let t: TestLedger;

beforeAll(async () => {
  model = spawn(process.execPath, [path.join(EXAMPLES, "scripted-model.mjs"), "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
  modelExit = finished(model);
  const [, url] = await waitForOutput(model, /^scripted model on (http:\/\/127\.0\.0\.1:\d+\/v1)\n/, modelExit);
  const config = parseJsonc(await readFile(path.join(EXAMPLES, "scripted-mcp.json"), "utf8")) as {
    provider: { scripted: { options: { baseURL: string } } };
    mcp: { everything: { command: string[] } };
  };
  expect(config.mcp.everything.command).toEqual(["npx", "-y", "@modelcontextprotocol/server-everything"]);
  config.provider.scripted.options.baseURL = url!;
  config.mcp.everything = { ...config.mcp.everything, command: everything().command };
  t = await startTestLedger(config, { transport: "http" });
});
afterAll(async () => {
  model?.kill();
  await modelExit;
  await t?.close();
});

const ledger = (...args: string[]) => runCli([...args, "--url", t.ledger.url], { cwd: t.dir, env: {} });

describe("the MCP walkthrough (docs/walkthrough.md)", () => {
  it("lists the server, the scripted model calls everything_echo, and the stored step holds the call and its result", async () => {
    expect(await ledger("mcp")).toEqual({
      code: 0,
      stderr: "",
      stdout: "everything  local  connected  13 tools, 7 resources, 2 resource templates\n",
    });

    const run = await ledger("prompt", 'call everything_echo {"message": "hello over MCP"}');
    expect(run.code, run.stderr).toBe(0);
    const sessionId = /^session (ses_\w{26})$/m.exec(run.stdout)?.[1];
    expect(run.stdout).toContain("everything_echo answered: Echo: hello over MCP");

    const { messages } = await t.client.listMessages({ sessionId });
    expect(messages.map((m) => m.parts.map((p) => p.kind.case))).toEqual([
      ["text"],
      ["stepStart", "tool", "stepFinish"],
      ["stepStart", "text", "stepFinish"],
    ]);
    expect(messages[1]!.parts[1]!.kind.value).toMatchObject({
      tool: "everything_echo",
      state: { status: { case: "completed", value: { input: { message: "hello over MCP" }, output: "Echo: hello over MCP" } } },
    });
    expect(messages[2]!.parts[1]!.kind.value).toMatchObject({ text: "everything_echo answered: Echo: hello over MCP" });
  });

  it("attaches a resource with --resource: the stored message holds the file part from the server", async () => {
    const uri = "demo://resource/static/document/architecture.md";
    const run = await ledger("prompt", "--no-reply", "summarize this", "--resource", `everything:${uri}`);
    expect(run.code, run.stderr).toBe(0);
    const sessionId = /^session (ses_\w{26})$/m.exec(run.stdout)?.[1];
    const { messages } = await t.client.listMessages({ sessionId });
    const parts = messages[0]!.parts;
    const file = parts.find((p) => p.kind.case === "file")?.kind.value as
      { url?: string; source?: { kind: { case?: string } } } | undefined;
    expect(file?.url).toBe(uri);
    expect(file?.source?.kind.case).toBe("resource");
  });
});
