import { toJson } from "@bufbuild/protobuf";
import type { LanguageModelV3, LanguageModelV3CallOptions, LanguageModelV3FunctionTool } from "@ai-sdk/provider";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { PartSchema, type ToolPart } from "../../gen/ledger/v1/part_pb.js";
import { freePort, startEverythingHttp, type EverythingHttp } from "../support/mcp-http.js";
import { childPids, everything } from "../support/mcp-servers.js";
import { mockResolver, NO_RETRY, scriptedModel, textReply, toolCallReply, type ModelKey } from "../support/mock-models.js";
import { mcpResource, text } from "../support/prompt.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { waitFor } from "../support/wait.js";

// MCP through the real service and database with a scripted model: a remote server (the
// reference server `server-everything` in its Streamable HTTP mode, on a loopback port), a remote
// server that is down, and a local server whose process dies during a call.

const ARCHITECTURE = "demo://resource/static/document/architecture.md";

const models: Partial<Record<ModelKey, LanguageModelV3>> = {};
let t: TestLedger;
let web: EverythingHttp;
let downPort: number;
let before: number[];

beforeAll(async () => {
  before = childPids();
  web = await startEverythingHttp("streamableHttp");
  downPort = await freePort();
  t = await startTestLedger(
    {
      model: "mock/model",
      retry: NO_RETRY,
      mcp: {
        web: { type: "remote", url: web.url, headers: { Authorization: "Bearer t0ken" } },
        down: { type: "remote", url: `http://127.0.0.1:${downPort}/mcp` },
        everything: everything(),
      },
    },
    { models: mockResolver(models) },
  );
});
afterAll(async () => {
  await t?.close();
  await web?.stop();
  // The local server's processes (the one killed, the one started after it) and the remote one are gone.
  await waitFor("no child process left", () => childPids().filter((pid) => !before.includes(pid)).length === 0);
});

async function prompt(script: Parameters<typeof scriptedModel>[0], words: string) {
  const mock = scriptedModel(script);
  models["mock/model"] = mock;
  const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  await t.client.prompt({ sessionId, parts: [text(words)] });
  const { messages } = await t.client.listMessages({ sessionId });
  return { mock, messages, sessionId };
}

const offered = (call: LanguageModelV3CallOptions) => ((call.tools ?? []) as LanguageModelV3FunctionTool[]).map((tool) => tool.name);
const toolPart = (m: MessageWithParts | undefined) => m?.parts.find((p) => p.kind.case === "tool");
const toolOf = (m: MessageWithParts | undefined) => toolPart(m)?.kind.value as ToolPart | undefined;
const stored = (m: MessageWithParts | undefined) => toJson(PartSchema, toolPart(m)!) as Record<string, unknown>;

describe("MCP tools of a remote server", () => {
  it("are offered as <server>_<tool>; a call runs over Streamable HTTP and its tool part is stored", async () => {
    const { mock, messages } = await prompt([toolCallReply("call_1", "web_get-sum", { a: 2, b: 40 }), textReply("42")], "add");
    const names = offered(mock.doStreamCalls[0]!);
    expect(names).toEqual(expect.arrayContaining(["web_echo", "web_get-sum", "everything_echo"]));
    expect(names.filter((n) => n.startsWith("down_"))).toEqual([]);
    const part = stored(messages[1]);
    expect(part).toEqual({
      id: expect.any(String),
      sessionId: expect.any(String),
      messageId: expect.any(String),
      tool: {
        callId: "call_1",
        tool: "web_get-sum",
        state: {
          completed: {
            input: { a: 2, b: 40 },
            output: "The sum of 2 and 40 is 42.",
            title: "get-sum",
            metadata: { server: "web", tool: "get-sum", truncated: false },
            timeStart: expect.any(String),
            timeEnd: expect.any(String),
          },
        },
      },
    });
    expect(mock.doStreamCalls[1]!.prompt.at(-1)).toEqual({
      role: "tool",
      content: [
        {
          type: "tool-result",
          toolCallId: "call_1",
          toolName: "web_get-sum",
          output: { type: "text", value: "The sum of 2 and 40 is 42." },
          providerOptions: undefined,
        },
      ],
      providerOptions: undefined,
    });
  });

  it("a remote server that is down: its resource draft gets the reason, the other server's is read, the prompt is stored", async () => {
    const draft = (clientName: string, filename: string) => mcpResource(clientName, ARCHITECTURE, filename, "text/markdown");
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const { message } = await t.client.prompt({ sessionId, noReply: true, parts: [draft("down", "a.md"), draft("web", "b.md")] });
    const texts = message!.parts.map((p) => (p.kind.case === "text" ? p.kind.value.text : p.kind.case));
    expect(texts[0]).toBe(`Reading MCP resource: a.md (${ARCHITECTURE})`);
    expect(texts[1]).toMatch(
      new RegExp(
        `^Failed to read MCP resource a\\.md: MCP server "down" at http://127\\.0\\.0\\.1:${downPort} could not connect: connect ECONNREFUSED 127\\.0\\.0\\.1:${downPort}( \\(next attempt in \\d+ ms\\))?$`,
      ),
    );
    expect(texts[2]).toBe(`Reading MCP resource: b.md (${ARCHITECTURE})`);
    expect(texts[3]).toContain("Architecture");
    expect(texts.at(-1)).toBe("file");
  });
});

describe("a local server that dies during a call", () => {
  it("stores a tool error naming the server; the next call starts a new process", async () => {
    // Started (and its pid known) before the call.
    await t.ledger.deps.mcp!.callTool("everything", "echo", { message: "up" });
    const [first] = childPids().filter((pid) => !before.includes(pid) && pid !== web.child.pid);
    expect(first).toBeDefined();
    const mock = scriptedModel([
      toolCallReply("call_1", "everything_trigger-long-running-operation", { duration: 60, steps: 60 }),
      toolCallReply("call_2", "everything_echo", { message: "again" }),
      textReply("done"),
    ]);
    models["mock/model"] = mock;
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const answered = t.client.prompt({ sessionId, parts: [text("run long")] });
    await waitFor("the running call", async () => {
      const { messages } = await t.client.listMessages({ sessionId });
      return toolOf(messages[1])?.state?.status.case === "running";
    });
    process.kill(first!, "SIGKILL");
    await answered;
    const { messages } = await t.client.listMessages({ sessionId });
    expect(stored(messages[1])).toEqual({
      id: expect.any(String),
      sessionId,
      messageId: expect.any(String),
      tool: {
        callId: "call_1",
        tool: "everything_trigger-long-running-operation",
        state: {
          error: {
            input: { duration: 60, steps: 60 },
            error: 'MCP server "everything": Connection closed (its process ended; the next use starts a new one)',
            timeStart: expect.any(String),
            timeEnd: expect.any(String),
          },
        },
      },
    });
    expect(toolOf(messages[2])!.state!.status).toEqual({
      case: "completed",
      value: expect.objectContaining({ input: { message: "again" }, output: "Echo: again", title: "echo" }),
    });
    const now = childPids().filter((pid) => !before.includes(pid) && pid !== web.child.pid);
    expect(now).toHaveLength(1);
    expect(now[0]).not.toBe(first);
  });
});
