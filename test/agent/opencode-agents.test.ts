import { mkdir, readFile, stat } from "node:fs/promises";
import path from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { ToolPart } from "../../gen/ledger/v1/part_pb.js";
import { PermissionReply } from "../../gen/ledger/v1/permission_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { watchUntil } from "../support/event-stream.js";
import type { ScriptedReply } from "../support/openai-server.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { waitFor } from "../support/wait.js";

// Issue 20 through the agent loop: an opencode.json's agent `tools` map and top-level
// `permission` decide what the model's tool calls may do (they were ignored: a reviewer made
// read-only could write, `build` stayed allow-all).

let t: FakeModelLedger;
let grpc: Client<typeof SessionService>;
beforeAll(async () => {
  t = await startFakeModelLedger({
    retry: { attempts: 0 },
    permission: { edit: "ask", bash: { "*": "allow", "git push*": "ask" } },
    agent: { review: { mode: "primary", tools: { write: false, edit: false } } },
  });
  grpc = createClient(SessionService, createGrpcTransport({ baseUrl: t.ledger.url }));
});
afterAll(async () => {
  await t?.close();
});

const call = (id: string, name: string, args: unknown): ScriptedReply => ({
  kind: "stream",
  chunks: [{ toolCall: { id, name, arguments: JSON.stringify(args) } }],
});
const say = (words: string): ScriptedReply => ({ kind: "stream", chunks: [{ text: words }] });

async function newSession(name: string, agent: string): Promise<{ sessionId: string; dir: string }> {
  const dir = path.join(t.dir, name);
  await mkdir(dir, { recursive: true });
  return { sessionId: (await t.client.createSession({ directory: dir, agent })).session!.id, dir };
}

async function untilIdle(sessionId: string): Promise<MessageWithParts[]> {
  await waitFor("the session to go idle", async () => (await t.client.getStatus({})).statuses[sessionId] === undefined);
  return (await t.client.listMessages({ sessionId })).messages;
}

const tools = (messages: MessageWithParts[]): ToolPart[] =>
  messages.flatMap((m) => m.parts.flatMap((p) => (p.kind.case === "tool" ? [p.kind.value] : [])));
const exists = (file: string) =>
  stat(file).then(
    () => true,
    () => false,
  );

describe("an opencode.json's permissions in the agent loop", () => {
  it('agent "tools": {"write": false, "edit": false}: the review agent is not offered write, edit or patch; a write anyway is refused, nothing written', async () => {
    const { sessionId, dir } = await newSession("review", "review");
    t.fake.push(call("call_1", "write", { filePath: "notes.md", content: "x\n" }), say("I may not write."));
    const before = t.fake.requests.length;
    await t.client.prompt({ sessionId, parts: [text("write notes.md")] });
    const [write] = tools(await untilIdle(sessionId));
    const offered = ((t.fake.requests[before]!.body.tools ?? []) as Array<{ function: { name: string } }>).map(
      (tool) => tool.function.name,
    );
    expect(offered.filter((name) => ["write", "edit", "patch"].includes(name))).toEqual([]);
    expect(offered).toContain("read");
    expect(write?.state?.status).toMatchObject({
      case: "error",
      value: { error: `Model tried to call unavailable tool 'write'. Available tools: ${offered.join(", ")}.` },
    });
    expect(await exists(path.join(dir, "notes.md"))).toBe(false);
  });

  it('top-level "edit": "ask" makes build ask before writing (edit covers write); a rejection writes nothing', async () => {
    const { sessionId, dir } = await newSession("build", "build");
    t.fake.push(call("call_2", "write", { filePath: "a.txt", content: "a\n" }), say("Not written."));
    await t.client.promptAsync({ sessionId, parts: [text("write a.txt")] });
    const events = await watchUntil(grpc, sessionId, (e) => e.kind.case === "permissionAsked");
    const asked = events.at(-1)!;
    if (asked.kind.case !== "permissionAsked") throw new Error("no permission_asked");
    expect(asked.kind.value.permission).toMatchObject({ permission: "write", patterns: ["a.txt"] });
    await grpc.replyPermission({ sessionId, permissionId: asked.kind.value.permission!.id, reply: PermissionReply.REJECT });
    const [write] = tools(await untilIdle(sessionId));
    expect(write?.state?.status.case).toBe("error");
    expect(await exists(path.join(dir, "a.txt"))).toBe(false);
  });

  it('a prompt\'s tools: {"edit": false} disables write and patch too (OpenCode disables every edit tool): not offered, a write anyway is refused, nothing written', async () => {
    const { sessionId, dir } = await newSession("session-edit", "build");
    t.fake.push(call("call_4", "write", { filePath: "b.txt", content: "b\n" }), say("I may not write."));
    const before = t.fake.requests.length;
    await t.client.prompt({ sessionId, parts: [text("write b.txt")], tools: { edit: false } });
    const [write] = tools(await untilIdle(sessionId));
    const offered = ((t.fake.requests[before]!.body.tools ?? []) as Array<{ function: { name: string } }>).map(
      (tool) => tool.function.name,
    );
    expect(offered.filter((name) => ["write", "edit", "patch"].includes(name))).toEqual([]);
    expect(offered).toContain("bash");
    expect(write?.state?.status).toMatchObject({
      case: "error",
      value: { error: `Model tried to call unavailable tool 'write'. Available tools: ${offered.join(", ")}.` },
    });
    expect(await exists(path.join(dir, "b.txt"))).toBe(false);
  });

  it("top-level bash patterns reach build: an allowed command runs", async () => {
    const { sessionId, dir } = await newSession("bash", "build");
    t.fake.push(call("call_3", "bash", { command: "echo hi > out.txt" }), say("Done."));
    await t.client.prompt({ sessionId, parts: [text("run it")] });
    const [bash] = tools(await untilIdle(sessionId));
    expect(bash?.state?.status.case).toBe("completed");
    expect(await readFile(path.join(dir, "out.txt"), "utf8")).toBe("hi\n");
  });
});
