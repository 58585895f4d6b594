import type { LanguageModelV3, LanguageModelV3CallOptions, LanguageModelV3FunctionTool } from "@ai-sdk/provider";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { ToolPart } from "../../gen/ledger/v1/part_pb.js";
import { create } from "@bufbuild/protobuf";
import { SessionSchema } from "../../gen/ledger/v1/session_pb.js";
import { newId } from "../../src/ids.js";
import { insertSession } from "../../src/storage/session-store.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { mockResolver, NO_RETRY, scriptedModel, textReply, toolCallReply, type ModelKey } from "../support/mock-models.js";
import { PermissionReply } from "../../gen/ledger/v1/permission_pb.js";
import { text } from "../support/prompt.js";
import { waitFor } from "../support/wait.js";
import { everything } from "../support/mcp-servers.js";

// The model calling the tools of the published reference server `server-everything` (started
// over stdio by the ledger) through the real service and database, with a scripted model.

const models: Partial<Record<ModelKey, LanguageModelV3>> = {};
let t: TestLedger;

beforeAll(async () => {
  t = await startTestLedger(
    {
      model: "mock/model",
      retry: NO_RETRY,
      mcp: {
        everything: everything(),
        off: everything({ enabled: false }),
        remote: { type: "remote", url: "https://mcp.example.com/mcp" },
      },
      agent: {
        guarded: { mode: "primary", permission: { "everything_*": "deny", everything_echo: "allow" } },
        asking: { mode: "primary", permission: { "everything_*": "ask" } },
      },
    },
    { models: mockResolver(models) },
  );
});
afterAll(async () => {
  await t?.close();
});

async function prompt(script: Parameters<typeof scriptedModel>[0], words: string, agent?: string, tools?: Record<string, boolean>) {
  const mock = scriptedModel(script);
  models["mock/model"] = mock;
  const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  await t.client.prompt({ sessionId, parts: [text(words)], agent, tools });
  const { messages } = await t.client.listMessages({ sessionId });
  return { mock, messages, sessionId };
}

const offered = (call: LanguageModelV3CallOptions) => (call.tools ?? []) as LanguageModelV3FunctionTool[];
const toolOf = (m: MessageWithParts | undefined) => m?.parts.find((p) => p.kind.case === "tool")?.kind.value as ToolPart | undefined;

describe("MCP tools for the model", () => {
  it("offers every enabled server's tools after the built-in ones, as <server>_<tool> with their JSON schemas", async () => {
    const { mock } = await prompt([textReply("ok")], "hi");
    const tools = offered(mock.doStreamCalls[0]!);
    const names = tools.map((tool) => tool.name);
    expect(names.slice(0, 7)).toEqual(["read", "list", "glob", "grep", "write", "edit", "bash"]);
    expect(names).toEqual(expect.arrayContaining(["everything_echo", "everything_get-sum", "everything_get-env"]));
    expect(names.findIndex((n) => n.startsWith("everything_"))).toBeGreaterThan(names.indexOf("bash"));
    expect(names.filter((n) => n.startsWith("off_") || n.startsWith("remote_"))).toEqual([]);
    expect(tools.find((tool) => tool.name === "everything_get-sum")).toEqual({
      type: "function",
      name: "everything_get-sum",
      description: "Returns the sum of two numbers",
      inputSchema: {
        $schema: "http://json-schema.org/draft-07/schema#",
        type: "object",
        properties: { a: { type: "number", description: "First number" }, b: { type: "number", description: "Second number" } },
        required: ["a", "b"],
        additionalProperties: false,
      },
      providerOptions: undefined,
    });
  });

  it("runs a call on the server and stores its result as a completed tool part the model sees", async () => {
    const { mock, messages } = await prompt(
      [toolCallReply("call_1", "everything_get-sum", { a: 2, b: 40 }), textReply("42")],
      "add 2 and 40",
    );
    const tool = toolOf(messages[1])!;
    expect(tool).toMatchObject({ callId: "call_1", tool: "everything_get-sum" });
    expect(tool.state!.status).toEqual({
      case: "completed",
      value: expect.objectContaining({
        input: { a: 2, b: 40 },
        output: "The sum of 2 and 40 is 42.",
        title: "get-sum",
        metadata: { server: "everything", tool: "get-sum", truncated: false },
        attachments: [],
      }),
    });
    const result = mock.doStreamCalls[1]!.prompt.at(-1)!;
    expect(result).toEqual({
      role: "tool",
      content: [
        {
          type: "tool-result",
          toolCallId: "call_1",
          toolName: "everything_get-sum",
          output: { type: "text", value: "The sum of 2 and 40 is 42." },
          providerOptions: undefined,
        },
      ],
      providerOptions: undefined,
    });
  });

  it("describes an image instead of storing its bytes", async () => {
    const { messages } = await prompt([toolCallReply("call_1", "everything_get-tiny-image", {}), textReply("seen")], "an image");
    const state = toolOf(messages[1])!.state!.status;
    expect(state.case).toBe("completed");
    const output = state.case === "completed" ? state.value.output : "";
    expect(output).toMatch(/^Here's the image you requested:\n\n\[Image: image\/png, \d+ bytes, not shown\]\n\nThe image above is/);
    expect(output).not.toContain("iVBORw0KGgo");
  });

  it("does not offer the tools an agent's rule denies (`everything_*`: deny) and offers the one its later rule allows", async () => {
    const { mock, messages } = await prompt(
      [toolCallReply("call_1", "everything_get-env", {}), toolCallReply("call_2", "everything_echo", { message: "hi" }), textReply("done")],
      "env then echo",
      "guarded",
    );
    const names = offered(mock.doStreamCalls[0]!).map((tool) => tool.name);
    expect(names.filter((n) => n.startsWith("everything_"))).toEqual(["everything_echo"]);
    expect(toolOf(messages[1])!.state!.status).toEqual({
      case: "error",
      value: expect.objectContaining({
        input: {},
        error: `Model tried to call unavailable tool 'everything_get-env'. Available tools: ${names.join(", ")}.`,
      }),
    });
    expect(toolOf(messages[2])!.state!.status).toEqual({
      case: "completed",
      value: expect.objectContaining({ input: { message: "hi" }, output: "Echo: hi", title: "echo" }),
    });
  });

  it('asks through the permission flow on "everything_*": "ask", and runs the call once allowed', async () => {
    models["mock/model"] = scriptedModel([toolCallReply("call_1", "everything_echo", { message: "may I?" }), textReply("done")]);
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    await t.client.promptAsync({ sessionId, parts: [text("echo")], agent: "asking" });
    const request = await waitFor("the permission request", async () => (await t.client.listPermissions({ sessionId })).permissions[0]);
    expect(request).toMatchObject({ sessionId, permission: "everything_echo", patterns: ["*"], callId: "call_1" });
    await t.client.replyPermission({ sessionId, permissionId: request.id, reply: PermissionReply.ONCE });
    await waitFor("the session to go idle", async () => (await t.client.getStatus({})).statuses[sessionId] === undefined);
    const { messages } = await t.client.listMessages({ sessionId });
    expect(toolOf(messages[1])!.state!.status).toEqual({
      case: "completed",
      value: expect.objectContaining({ input: { message: "may I?" }, output: "Echo: may I?" }),
    });
  });

  it("does not offer a tool the session's rules deny (a prompt's tools map)", async () => {
    const { mock, messages } = await prompt(
      [toolCallReply("call_1", "everything_echo", { message: "hi" }), textReply("denied")],
      "echo",
      undefined,
      { everything_echo: false },
    );
    const names = offered(mock.doStreamCalls[0]!).map((tool) => tool.name);
    expect(names).not.toContain("everything_echo");
    expect(names).toContain("everything_get-sum");
    expect(toolOf(messages[1])!.state!.status).toEqual({
      case: "error",
      value: expect.objectContaining({
        error: `Model tried to call unavailable tool 'everything_echo'. Available tools: ${names.join(", ")}.`,
      }),
    });
  });

  it("cancels a running call on Abort: the tool part ends in error and the answer is aborted, promptly", async () => {
    const mock = scriptedModel([toolCallReply("call_1", "everything_trigger-long-running-operation", { duration: 60, steps: 60 })]);
    models["mock/model"] = mock;
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const answered = t.client.prompt({ sessionId, parts: [text("run long")] });
    await waitFor("the running call", async () => {
      const { messages } = await t.client.listMessages({ sessionId });
      return toolOf(messages[1])?.state?.status.case === "running";
    });
    const started = Date.now();
    expect((await t.client.abort({ sessionId })).aborted).toBe(true);
    await answered.catch(() => undefined);
    expect(Date.now() - started).toBeLessThan(15_000);
    const { messages } = await t.client.listMessages({ sessionId });
    const assistant = messages[1]!.message!.kind;
    expect(assistant.case === "assistant" && assistant.value.error?.kind.case).toBe("aborted");
    expect(toolOf(messages[1])!.state!.status.case).toBe("error");
  });
});

describe("MCP tools and tenants", () => {
  it("offers them (and reads resources) for a tenant's sessions only with tenants.<name>.mcp, and for sessions without a tenant", async () => {
    const tenantModels: Partial<Record<ModelKey, LanguageModelV3>> = {};
    const tt = await startTestLedger(
      {
        model: "mock/model",
        retry: NO_RETRY,
        mcp: { everything: everything() },
        auth: { jwt: { secret: "a-shared-secret-of-at-least-32-bytes!!", tenant_claim: "org" } },
        tenants: { acme: { roots: ["."] }, globex: { roots: ["."], mcp: true } },
      },
      { models: mockResolver(tenantModels) },
    );
    try {
      const session = async (tenant: string | null) => {
        const id = newId("ses");
        const ownership = tenant ? { owner: "alice", tenant } : { owner: null, tenant: null };
        await insertSession(tt.ledger.deps.db, create(SessionSchema, { id, directory: tt.dir, title: "t" }), new Date(), ownership);
        return id;
      };
      const resourceNotes = async (tenant: string) => {
        const uri = "demo://resource/static/document/architecture.md";
        const source = { kind: { case: "resource" as const, value: { clientName: "everything", uri } } };
        const { message } = await tt.client.prompt({
          sessionId: await session(tenant),
          noReply: true,
          parts: [{ kind: { case: "file", value: { mime: "text/markdown", filename: "architecture.md", url: uri, source } } }],
        });
        return message!.parts.map((p) => (p.kind.case === "text" ? p.kind.value.text : p.kind.case));
      };
      const offeredTo = async (tenant: string | null) => {
        const id = await session(tenant);
        const mock = scriptedModel([textReply("ok")]);
        tenantModels["mock/model"] = mock;
        await tt.client.prompt({ sessionId: id, parts: [text("hi")] });
        return offered(mock.doStreamCalls[0]!)
          .map((tool) => tool.name)
          .filter((name) => name.startsWith("everything_"));
      };
      expect(await offeredTo("acme")).toEqual([]);
      expect(await resourceNotes("acme")).toEqual([
        "Reading MCP resource: architecture.md (demo://resource/static/document/architecture.md)",
        "Failed to read MCP resource architecture.md: MCP servers are not available to sessions of tenant acme (tenants.acme.mcp)",
      ]);
      expect((await resourceNotes("globex"))[1]).toContain("Architecture");
      expect(await offeredTo("globex")).toEqual(expect.arrayContaining(["everything_echo", "everything_get-sum"]));
      expect(await offeredTo(null)).toEqual(expect.arrayContaining(["everything_echo"]));
    } finally {
      await tt.close();
    }
  });
});
