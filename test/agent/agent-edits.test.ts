import { mkdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part, ToolPart } from "../../gen/ledger/v1/part_pb.js";
import { PermissionReply, type PermissionRequest } from "../../gen/ledger/v1/permission_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { watchUntil } from "../support/event-stream.js";
import type { FakeOpenAI, ScriptedReply } from "../support/openai-server.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { waitFor } from "../support/wait.js";
import { pgrep } from "../support/pgrep.js";

// Agent edits end to end (issue 15): the real service, @ai-sdk/openai-compatible against the
// local SSE server, a second client (gRPC) watching and answering permission requests.

let t: FakeModelLedger;
let fake: FakeOpenAI;
let grpc: Client<typeof SessionService>;

beforeAll(async () => {
  t = await startFakeModelLedger({
    retry: { attempts: 0 },
    agent: {
      build: { permission: { write: "ask", edit: "ask", bash: { "*": "allow", "rm *": "deny", "git push*": "ask" } } },
      free: { mode: "primary", permission: { "*": "allow" } },
    },
  });
  fake = t.fake;
  grpc = createClient(SessionService, createGrpcTransport({ baseUrl: t.ledger.url }));
});
afterAll(async () => {
  await t?.close();
});

/** A session in a fresh subdirectory of the test directory (its own snapshot repository). */
async function newSession(name: string, agent?: string): Promise<{ sessionId: string; dir: string }> {
  const dir = path.join(t.dir, name);
  await mkdir(dir, { recursive: true });
  return { sessionId: (await t.client.createSession({ directory: dir, agent })).session!.id, dir };
}

const call = (id: string, name: string, args: unknown): ScriptedReply => ({
  kind: "stream",
  chunks: [{ toolCall: { id, name, arguments: JSON.stringify(args) } }],
});
const say = (words: string): ScriptedReply => ({ kind: "stream", chunks: [{ text: words }] });

const asked = (e: SessionEvent) => e.kind.case === "permissionAsked";
const idle = (e: SessionEvent) => e.kind.case === "sessionStatus" && e.kind.value.status.case === "idle";

async function nextAsk(sessionId: string, afterSeq = 0n): Promise<PermissionRequest> {
  const events = await watchUntil(grpc, sessionId, asked, afterSeq);
  const event = events.at(-1)!;
  if (event.kind.case !== "permissionAsked") throw new Error("no permission_asked");
  return event.kind.value.permission!;
}

async function untilIdle(sessionId: string): Promise<MessageWithParts[]> {
  await waitFor("the session to go idle", async () => (await t.client.getStatus({})).statuses[sessionId] === undefined);
  return (await t.client.listMessages({ sessionId })).messages;
}

const tools = (messages: MessageWithParts[]): ToolPart[] =>
  messages.flatMap((m) => m.parts.flatMap((p) => (p.kind.case === "tool" ? [p.kind.value] : [])));
const state = (tool: ToolPart | undefined) => tool?.state?.status;
const kinds = (m: MessageWithParts | undefined) => m?.parts.map((p: Part) => p.kind.case);

describe("permission asks on write", () => {
  it("ONCE: a second client sees permission_asked, approves, the file is written, a patch part lists it, GetDiff counts lines", async () => {
    const { sessionId, dir } = await newSession("once");
    await writeFile(path.join(dir, "keep.txt"), "old\n");
    fake.push(call("call_w1", "write", { filePath: "hello.txt", content: "one\ntwo\nthree\n" }), say("Written."));
    await t.client.promptAsync({ sessionId, parts: [text("write hello.txt")] });

    const request = await nextAsk(sessionId);
    expect(request).toMatchObject({ sessionId, callId: "call_w1", permission: "write", patterns: ["hello.txt"] });
    expect(request.id).toMatch(/^per_[0-9A-HJKMNP-TV-Z]{26}$/);
    expect(String(request.metadata?.diff)).toContain("+one");
    expect((await grpc.listPermissions({ sessionId })).permissions.map((p) => p.id)).toEqual([request.id]);
    await expect(stat(path.join(dir, "hello.txt"))).rejects.toThrow(/ENOENT/);

    await grpc.replyPermission({ sessionId, permissionId: request.id, reply: PermissionReply.ONCE });
    const messages = await untilIdle(sessionId);
    expect(await readFile(path.join(dir, "hello.txt"), "utf8")).toBe("one\ntwo\nthree\n");
    expect((await grpc.listPermissions({ sessionId })).permissions).toEqual([]);

    const step = messages[1]!;
    expect(kinds(step)).toEqual(["stepStart", "tool", "stepFinish", "patch"]);
    const [start, , finish, patch] = step.parts;
    expect(start!.kind.case === "stepStart" && start!.kind.value.snapshot).toMatch(/^[0-9a-f]{40}$/);
    expect(finish!.kind.case === "stepFinish" && finish!.kind.value.snapshot).toMatch(/^[0-9a-f]{40}$/);
    expect(patch!.kind.value).toMatchObject({ hash: (start!.kind.value as { snapshot: string }).snapshot, files: ["hello.txt"] });
    expect(state(tools(messages)[0])).toMatchObject({
      case: "completed",
      value: { output: "Wrote file successfully.", title: "hello.txt" },
    });

    const user = messages[0]!.message!.kind.value!.id;
    const { diffs } = await grpc.getDiff({ sessionId, messageId: user });
    expect(diffs.map(({ file, before, after, additions, deletions }) => ({ file, before, after, additions, deletions }))).toEqual([
      { file: "hello.txt", before: "", after: "one\ntwo\nthree\n", additions: 3, deletions: 0 },
    ]);
    expect((await grpc.getDiff({ sessionId })).diffs.map((d) => d.file)).toEqual(["hello.txt"]);
    // The turn's summary: the prompt's first line, the final answer, the changed files.
    const summary = messages[0]!.message!.kind.case === "user" ? messages[0]!.message!.kind.value.summary : undefined;
    expect(summary && { title: summary.title, body: summary.body }).toEqual({ title: "write hello.txt", body: "Written." });
    expect(summary?.diffs.map((d) => [d.file, d.before, d.after, d.additions, d.deletions])).toEqual([
      ["hello.txt", "", "one\ntwo\nthree\n", 3, 0],
    ]);

    // The event order a watcher sees: asked before replied, replied before the tool completes.
    const events = await watchUntil(grpc, sessionId, idle);
    const order = events.map((e) => e.kind.case).filter((k) => k === "permissionAsked" || k === "permissionReplied");
    expect(order).toEqual(["permissionAsked", "permissionReplied"]);
    const replied = events.find((e) => e.kind.case === "permissionReplied")!;
    expect(replied.kind.value).toMatchObject({ permissionId: request.id, reply: PermissionReply.ONCE, message: "" });
  });

  it("REJECT: the call ends with a tool error carrying the feedback, the file is unchanged, the loop answers", async () => {
    const { sessionId, dir } = await newSession("reject");
    await writeFile(path.join(dir, "a.txt"), "first\nsecond\n");
    fake.push(call("call_w2", "write", { filePath: "a.txt", content: "replaced\n" }), say("OK, I left it alone."));
    await t.client.promptAsync({ sessionId, parts: [text("overwrite a.txt")] });
    const request = await nextAsk(sessionId);
    await grpc.replyPermission({ sessionId, permissionId: request.id, reply: PermissionReply.REJECT, message: "keep the file" });
    const messages = await untilIdle(sessionId);
    expect(await readFile(path.join(dir, "a.txt"), "utf8")).toBe("first\nsecond\n");
    expect(state(tools(messages)[0])).toMatchObject({
      case: "error",
      value: { error: "The user rejected permission to use this specific tool call with the following feedback: keep the file" },
    });
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant"]);
    expect(kinds(messages[1])).toEqual(["stepStart", "tool", "stepFinish"]);
    expect(messages[2]!.parts.find((p) => p.kind.case === "text")?.kind.value).toMatchObject({ text: "OK, I left it alone." });

    // Answered already, unknown, or another session's: the right codes.
    await expect(grpc.replyPermission({ sessionId, permissionId: request.id, reply: PermissionReply.ONCE })).rejects.toThrow(
      /already answered/,
    );
    await expect(
      grpc.replyPermission({ sessionId, permissionId: "per_01JAAAAAAAAAAAAAAAAAAAAAAA", reply: PermissionReply.ONCE }),
    ).rejects.toMatchObject({ code: 5 });
    const other = await newSession("reject-other");
    await expect(
      grpc.replyPermission({ sessionId: other.sessionId, permissionId: request.id, reply: PermissionReply.ONCE }),
    ).rejects.toMatchObject({
      code: 5,
      rawMessage: `permission_id: permission request ${request.id} not found in this session`,
    });
    await expect(grpc.replyPermission({ sessionId, permissionId: request.id, reply: PermissionReply.UNSPECIFIED })).rejects.toMatchObject({
      code: 3,
      rawMessage: "reply: must be PERMISSION_REPLY_ONCE, PERMISSION_REPLY_ALWAYS or PERMISSION_REPLY_REJECT (in JSON, the full enum name)",
    });
    // Over Connect JSON, a short name ("ONCE") is an unknown enum name: read as 0, the same answer.
    const json = await fetch(`${t.ledger.url}/ledger.v1.SessionService/ReplyPermission`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ sessionId, permissionId: request.id, reply: "ONCE" }),
    });
    expect(json.status).toBe(400);
    expect(((await json.json()) as { message: string }).message).toBe(
      "reply: must be PERMISSION_REPLY_ONCE, PERMISSION_REPLY_ALWAYS or PERMISSION_REPLY_REJECT (in JSON, the full enum name)",
    );
  });

  it("ALWAYS: the call runs and a second call on the same pattern runs without asking", async () => {
    const { sessionId, dir } = await newSession("always");
    fake.push(
      call("call_w3", "write", { filePath: "log.txt", content: "1\n" }),
      call("call_w4", "write", { filePath: "log.txt", content: "1\n2\n" }),
      say("Done twice."),
    );
    await t.client.promptAsync({ sessionId, parts: [text("write log twice")] });
    const request = await nextAsk(sessionId);
    await grpc.replyPermission({ sessionId, permissionId: request.id, reply: PermissionReply.ALWAYS });
    const messages = await untilIdle(sessionId);
    expect(await readFile(path.join(dir, "log.txt"), "utf8")).toBe("1\n2\n");
    expect(tools(messages).map((tool) => state(tool)?.case)).toEqual(["completed", "completed"]);
    const events = await watchUntil(grpc, sessionId, idle);
    expect(events.filter(asked)).toHaveLength(1);
    const session = (await t.client.getSession({ sessionId })).session!;
    expect(session.permission.map((r) => ({ permission: r.permission, pattern: r.pattern, action: r.action }))).toEqual([
      { permission: "write", pattern: "log.txt", action: 1 },
    ]);
  });
});

describe("ALWAYS and the other pending requests", () => {
  it("answers a second pending request that the new rule allows; one it does not allow stays pending", async () => {
    const { sessionId } = await newSession("always-pending");
    fake.push(
      {
        kind: "stream",
        chunks: [
          { toolCall: { id: "call_p1", name: "bash", arguments: JSON.stringify({ command: "git push nowhere-a" }) } },
          { toolCall: { id: "call_p2", name: "bash", arguments: JSON.stringify({ command: "git push nowhere-a" }) } },
          { toolCall: { id: "call_p3", name: "bash", arguments: JSON.stringify({ command: "git push nowhere-b" }) } },
        ],
      },
      say("Pushed."),
    );
    await t.client.promptAsync({ sessionId, parts: [text("push thrice")] });
    await waitFor("three asks", async () => (await grpc.listPermissions({ sessionId })).permissions.length === 3);
    const pending = (await grpc.listPermissions({ sessionId })).permissions;
    const byCall = new Map(pending.map((p) => [p.callId, p]));
    await grpc.replyPermission({ sessionId, permissionId: byCall.get("call_p1")!.id, reply: PermissionReply.ALWAYS });
    // The identical command was answered with it; the other command still waits.
    await waitFor("one request left", async () => (await grpc.listPermissions({ sessionId })).permissions.length === 1);
    expect((await grpc.listPermissions({ sessionId })).permissions.map((p) => p.callId)).toEqual(["call_p3"]);
    const replies = (
      await watchUntil(
        grpc,
        sessionId,
        (e) => e.kind.case === "permissionReplied" && e.kind.value.permissionId === byCall.get("call_p2")!.id,
      )
    ).flatMap((e) => (e.kind.case === "permissionReplied" ? [[e.kind.value.permissionId, e.kind.value.reply]] : []));
    expect(replies).toEqual([
      [byCall.get("call_p1")!.id, PermissionReply.ALWAYS],
      [byCall.get("call_p2")!.id, PermissionReply.ONCE],
    ]);
    await grpc.replyPermission({ sessionId, permissionId: byCall.get("call_p3")!.id, reply: PermissionReply.REJECT });
    const messages = await untilIdle(sessionId);
    expect(tools(messages).map((tool) => [tool.callId, state(tool)?.case])).toEqual([
      ["call_p1", "completed"],
      ["call_p2", "completed"],
      ["call_p3", "error"],
    ]);
  });
});

describe("the summary of a turn", () => {
  it("titles it with the prompt's first non-blank line and holds the final answer, cut at 80 and 2,000 characters; no model call", async () => {
    const { sessionId } = await newSession("summary");
    const long = `${"word ".repeat(30)}end`;
    const answer = `${"ab".repeat(1100)}tail`;
    fake.push(say("Short answer."), say(answer));
    const requests = fake.requests.length;
    await t.client.prompt({ sessionId, parts: [text("\n  Explain the layout  \nsecond line")] });
    await t.client.prompt({ sessionId, parts: [text(long), text("not the title")] });
    const messages = await untilIdle(sessionId);
    expect(fake.requests.length - requests).toBe(2);
    const summaries = messages.flatMap((m) => (m.message?.kind.case === "user" ? [m.message.kind.value.summary] : []));
    expect(summaries.map((s) => s && { title: s.title, body: s.body, diffs: s.diffs.length })).toEqual([
      { title: "Explain the layout", body: "Short answer.", diffs: 0 },
      { title: `${long.slice(0, 79)}…`, body: `${answer.slice(0, 1999)}…`, diffs: 0 },
    ]);
  });
});

describe("Abort while a call waits", () => {
  it("rejects the pending request: none is left, the call ends in error, the file is not written", async () => {
    const { sessionId, dir } = await newSession("abort-ask");
    fake.push(call("call_w5", "write", { filePath: "late.txt", content: "no\n" }));
    await t.client.promptAsync({ sessionId, parts: [text("write late.txt")] });
    const request = await nextAsk(sessionId);
    expect((await t.client.abort({ sessionId })).aborted).toBe(true);
    const messages = await untilIdle(sessionId);
    expect((await grpc.listPermissions({ sessionId })).permissions).toEqual([]);
    const events = await watchUntil(grpc, sessionId, (e) => e.kind.case === "permissionReplied");
    expect(events.at(-1)!.kind.value).toMatchObject({ permissionId: request.id, reply: PermissionReply.REJECT });
    expect(state(tools(messages)[0])?.case).toBe("error");
    await expect(stat(path.join(dir, "late.txt"))).rejects.toThrow(/ENOENT/);
    await expect(grpc.replyPermission({ sessionId, permissionId: request.id, reply: PermissionReply.ONCE })).rejects.toMatchObject({
      code: 9,
    });
  });
});

describe("edit", () => {
  it("explains a missing oldString with the closest match, and an ambiguous one with the lines", async () => {
    const { sessionId, dir } = await newSession("edit", "free");
    await writeFile(path.join(dir, "code.ts"), "const a = 1;\nconst b = 2;\nconst a = 1;\n");
    fake.push(
      call("call_e1", "edit", { filePath: "code.ts", oldString: "const c = 2;", newString: "const c = 3;" }),
      call("call_e2", "edit", { filePath: "code.ts", oldString: "const a = 1;", newString: "const a = 9;" }),
      call("call_e3", "edit", { filePath: "code.ts", oldString: "const b = 2;", newString: "const b = 20;" }),
      say("Edited."),
    );
    const messages = (await t.client.prompt({ sessionId, parts: [text("edit code.ts")] }), await untilIdle(sessionId));
    const [missing, ambiguous, ok] = tools(messages);
    expect(state(missing)).toMatchObject({
      case: "error",
      value: {
        error:
          "Could not find oldString in the file. It must match exactly, including whitespace, indentation, and line endings.\nThe closest match (line 2):\nconst b = 2;",
      },
    });
    expect(state(ambiguous)).toMatchObject({
      case: "error",
      value: {
        error: "Found 2 matches for oldString (lines 1, 3). Provide more surrounding context to make the match unique, or set replaceAll.",
      },
    });
    expect(state(ok)).toMatchObject({ case: "completed", value: { output: "Edit applied successfully." } });
    expect(await readFile(path.join(dir, "code.ts"), "utf8")).toBe("const a = 1;\nconst b = 20;\nconst a = 1;\n");
    const { diffs } = await grpc.getDiff({ sessionId });
    expect(diffs.map((d) => [d.file, d.additions, d.deletions])).toEqual([["code.ts", 1, 1]]);
  });
});

describe("confinement of file tools", () => {
  it("refuses a write outside the session directory and through a symlink that leads out", async () => {
    const { sessionId, dir } = await newSession("confined", "free");
    const outside = path.join(t.dir, "outside-target");
    await mkdir(outside, { recursive: true });
    await symlink(outside, path.join(dir, "escape"));
    await symlink(path.join(outside, "nothing-yet.txt"), path.join(dir, "dangling.txt"));
    fake.push(
      call("call_c1", "write", { filePath: path.join(outside, "x.txt"), content: "no" }),
      call("call_c2", "write", { filePath: "escape/y.txt", content: "no" }),
      call("call_c3", "write", { filePath: "dangling.txt", content: "no" }),
      call("call_c4", "edit", { filePath: "../outside-target/z.txt", oldString: "", newString: "no" }),
      say("Refused."),
    );
    const messages = (await t.client.prompt({ sessionId, parts: [text("write outside")] }), await untilIdle(sessionId));
    const errors = tools(messages).map((tool) => {
      const s = state(tool);
      return s?.case === "error" ? s.value.error : s?.case;
    });
    expect(errors).toEqual([
      `filePath: ${path.join(outside, "x.txt")} is outside the session directory and the configured roots`,
      `filePath: ${path.join(dir, "escape/y.txt")} leads through a symlink outside the session directory and the configured roots`,
      `filePath: ${path.join(dir, "dangling.txt")} is a symbolic link; refusing to write through it`,
      `filePath: ${path.join(outside, "z.txt")} is outside the session directory and the configured roots`,
    ]);
    await expect(stat(path.join(outside, "x.txt"))).rejects.toThrow(/ENOENT/);
    await expect(stat(path.join(outside, "y.txt"))).rejects.toThrow(/ENOENT/);
    await expect(stat(path.join(outside, "nothing-yet.txt"))).rejects.toThrow(/ENOENT/);
  });
});

describe("bash", () => {
  it("cuts output over the read limits with a note, and reports the exit code", async () => {
    const { sessionId } = await newSession("bash-limit", "free");
    fake.push(
      call("call_b1", "bash", { command: "seq 1 5000", description: "count" }),
      call("call_b2", "bash", { command: "echo out; echo err >&2; exit 3" }),
      say("Counted."),
    );
    const messages = (await t.client.prompt({ sessionId, parts: [text("count")] }), await untilIdle(sessionId));
    const [long, failing] = tools(messages);
    const s = state(long);
    expect(s?.case).toBe("completed");
    const output = s?.case === "completed" ? s.value.output : "";
    expect(output.startsWith("1\n2\n3\n")).toBe(true);
    expect(output).toContain(
      "\n2000\n\n\n<bash_metadata>\nOutput truncated: showed the first 2000 lines or 50 KB of 23893 bytes.\n</bash_metadata>",
    );
    expect(output).not.toContain("\n2001\n");
    expect(s?.case === "completed" && s.value.metadata).toMatchObject({ exit: 0, truncated: true, description: "count" });
    expect(state(failing)).toMatchObject({
      case: "completed",
      value: { output: "out\nerr\n\n\n<bash_metadata>\nexit code: 3\n</bash_metadata>", metadata: { exit: 3 } },
    });
  });

  it("kills a command at its timeout", async () => {
    const { sessionId } = await newSession("bash-timeout", "free");
    fake.push(call("call_b3", "bash", { command: "echo start; sleep 30; echo never", timeout: 300 }), say("Timed out."));
    const started = Date.now();
    const messages = (await t.client.prompt({ sessionId, parts: [text("sleep")] }), await untilIdle(sessionId));
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(state(tools(messages)[0])).toMatchObject({
      case: "completed",
      value: { output: "start\n\n\n<bash_metadata>\nbash tool terminated command after exceeding timeout 300 ms\n</bash_metadata>" },
    });
  });

  it("kills the command's whole process group on Abort: no process is left", async () => {
    const { sessionId, dir } = await newSession("bash-abort", "free");
    const marker = `ledger-abort-${Date.now()}`;
    fake.push(call("call_b4", "bash", { command: `sh -c 'sleep 60 # ${marker}' & sleep 61 # ${marker}\nwait` }));
    await t.client.promptAsync({ sessionId, parts: [text("hang")] });
    await waitFor("the command to run", async () => (await pgrep(marker)).length >= 2);
    await t.client.abort({ sessionId });
    await waitFor("every process of the command to be gone", async () => (await pgrep(marker)).length === 0, 5000);
    const messages = await untilIdle(sessionId);
    expect(state(tools(messages)[0])?.case).toBe("error");
    expect(messages[1]!.message!.kind.value).toMatchObject({ error: { kind: { case: "aborted" } } });
    void dir;
  });

  it("a step aborted after changing a file: a snapshot part records the tree after it, and GetDiff and the turn's summary show the change", async () => {
    const { sessionId, dir } = await newSession("bash-abort-diff", "free");
    await writeFile(path.join(dir, "a.txt"), "before\n");
    fake.push(call("call_b5", "bash", { command: "echo started; echo CHANGED > a.txt; sleep 30" }));
    await t.client.promptAsync({ sessionId, parts: [text("change and hang")] });
    await waitFor("the command to change a.txt", async () => (await readFile(path.join(dir, "a.txt"), "utf8")) === "CHANGED\n");
    await t.client.abort({ sessionId });
    const messages = await untilIdle(sessionId);
    expect(kinds(messages[1])).toEqual(["stepStart", "tool", "snapshot", "patch"]);
    // The aborted call keeps the output it had printed.
    expect(tools(messages)[0]?.state?.status).toMatchObject({ case: "error", value: { metadata: { output: "started\n" } } });
    const [start, , snap] = messages[1]!.parts;
    expect(start!.kind.case === "stepStart" && start!.kind.value.snapshot).toMatch(/^[0-9a-f]{40}$/);
    expect(snap!.kind.case === "snapshot" && snap!.kind.value.snapshot).toMatch(/^[0-9a-f]{40}$/);
    const expected = [{ file: "a.txt", before: "before\n", after: "CHANGED\n", additions: 1, deletions: 1 }];
    expect((await grpc.getDiff({ sessionId })).diffs).toMatchObject(expected);
    expect((await grpc.getDiff({ sessionId, messageId: messages[0]!.message!.kind.value!.id })).diffs).toMatchObject(expected);
    const user = messages[0]!.message!.kind;
    expect(user.case === "user" && user.value.summary?.diffs).toMatchObject(expected);
  });

  it("refuses a denied pattern, asks for an ask pattern", async () => {
    const { sessionId, dir } = await newSession("bash-deny");
    await writeFile(path.join(dir, "precious.txt"), "x");
    fake.push(call("call_b5", "bash", { command: "rm precious.txt" }), call("call_b6", "bash", { command: "ls" }), say("Not removed."));
    const messages = (await t.client.prompt({ sessionId, parts: [text("remove")] }), await untilIdle(sessionId));
    const [denied, allowed] = tools(messages);
    expect(state(denied)).toMatchObject({
      case: "error",
      value: { error: 'permission denied: the build agent may not use the bash tool on "rm precious.txt"' },
    });
    expect(state(allowed)).toMatchObject({ case: "completed", value: { output: "precious.txt\n" } });
    expect(await readFile(path.join(dir, "precious.txt"), "utf8")).toBe("x");
  });
});

describe("revert restores files", () => {
  it("Revert puts back a written file and a deleted one, Unrevert brings the changes back", async () => {
    const { sessionId, dir } = await newSession("revert", "free");
    await writeFile(path.join(dir, "edited.txt"), "before\n");
    await writeFile(path.join(dir, "doomed.txt"), "keep me\n");
    const first = await t.client.prompt({ sessionId, noReply: true, parts: [text("context")] });
    void first;
    fake.push(
      call("call_r1", "write", { filePath: "edited.txt", content: "after\n" }),
      call("call_r2", "bash", { command: "rm doomed.txt && echo new > created.txt" }),
      say("Changed."),
    );
    await t.client.prompt({ sessionId, parts: [text("change things")] });
    const messages = await untilIdle(sessionId);
    expect(await readFile(path.join(dir, "edited.txt"), "utf8")).toBe("after\n");
    await expect(stat(path.join(dir, "doomed.txt"))).rejects.toThrow(/ENOENT/);
    const patches = messages.flatMap((m) => m.parts.flatMap((p) => (p.kind.case === "patch" ? [p.kind.value.files] : [])));
    expect(patches).toEqual([["edited.txt"], ["created.txt", "doomed.txt"]]);

    const turn = messages[1]!.message!.kind.value!.id;
    const reverted = await grpc.revert({ sessionId, messageId: turn });
    expect(reverted.session?.revert?.snapshot).toMatch(/^[0-9a-f]{40}$/);
    expect(await readFile(path.join(dir, "edited.txt"), "utf8")).toBe("before\n");
    expect(await readFile(path.join(dir, "doomed.txt"), "utf8")).toBe("keep me\n");
    await expect(stat(path.join(dir, "created.txt"))).rejects.toThrow(/ENOENT/);
    // The session's diff leaves out the hidden turn (its files are back as they were); the
    // turn's own diff still shows what it did.
    expect((await grpc.getDiff({ sessionId })).diffs).toEqual([]);
    expect((await grpc.getDiff({ sessionId, messageId: turn })).diffs.map((d) => d.file)).toEqual([
      "created.txt",
      "doomed.txt",
      "edited.txt",
    ]);

    await grpc.unrevert({ sessionId });
    expect(await readFile(path.join(dir, "edited.txt"), "utf8")).toBe("after\n");
    await expect(stat(path.join(dir, "doomed.txt"))).rejects.toThrow(/ENOENT/);
    expect(await readFile(path.join(dir, "created.txt"), "utf8")).toBe("new\n");
    expect((await grpc.getDiff({ sessionId })).diffs.map((d) => d.file)).toEqual(["created.txt", "doomed.txt", "edited.txt"]);

    // Revert again, then a new prompt: the cleanup keeps the files as reverted.
    await grpc.revert({ sessionId, messageId: turn });
    fake.push(say("Fresh start."));
    await t.client.prompt({ sessionId, parts: [text("again")] });
    expect(await readFile(path.join(dir, "edited.txt"), "utf8")).toBe("before\n");
    expect(await readFile(path.join(dir, "doomed.txt"), "utf8")).toBe("keep me\n");
    await rm(path.join(dir, "edited.txt"));
  });
});

describe("a revert inside a turn", () => {
  /** A turn of two writes and a final text; returns its user message id and its three answers' ids. */
  async function turnOfTwoWrites(sessionId: string, tag: string): Promise<{ user: string; answers: string[] }> {
    fake.push(
      call(`call_${tag}1`, "write", { filePath: `${tag}1.txt`, content: "1\n" }),
      call(`call_${tag}2`, "write", { filePath: `${tag}2.txt`, content: "2\n" }),
      say("Turn one done."),
    );
    await t.client.prompt({ sessionId, parts: [text("write two files")] });
    const messages = await untilIdle(sessionId);
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant", "assistant"]);
    const ids = messages.map((m) => m.message!.kind.value!.id);
    return { user: ids[0]!, answers: ids.slice(1) };
  }

  /** The roles and texts the model was sent in the last request. */
  const lastRequestRoles = () =>
    (fake.requests.at(-1)!.body.messages as { role: string; content: unknown }[]).map((m) =>
      m.role === "user" ? `user:${JSON.stringify(m.content)}` : m.role,
    );

  it("at a later step of the turn: the next prompt is answered at once, the cut turn is not taken up again and its files stay reverted", async () => {
    const { sessionId, dir } = await newSession("revert-mid-turn", "free");
    const turn = await turnOfTwoWrites(sessionId, "m");
    await grpc.revert({ sessionId, messageId: turn.answers[1]! });
    await expect(stat(path.join(dir, "m2.txt"))).rejects.toThrow(/ENOENT/);
    expect(await readFile(path.join(dir, "m1.txt"), "utf8")).toBe("1\n");

    const before = fake.requests.length;
    fake.push(say("Answered the new prompt."));
    const answer = await t.client.prompt({ sessionId, parts: [text("now something else")] });
    expect(answer.message?.parts.map((p) => (p.kind.case === "text" ? p.kind.value.text : p.kind.case))).toContain(
      "Answered the new prompt.",
    );
    // One model call, for the new prompt, with the kept step (its tool call and result) before it.
    expect(fake.requests.length).toBe(before + 1);
    expect(lastRequestRoles().slice(1)).toEqual(['user:"write two files"', "assistant", "tool", 'user:"now something else"']);
    const messages = await untilIdle(sessionId);
    expect(messages.map((m) => [m.message?.kind.case, m.message?.kind.case === "user" ? m.message.kind.value.noReply : undefined])).toEqual(
      [
        ["user", true],
        ["assistant", undefined],
        ["user", false],
        ["assistant", undefined],
      ],
    );
    expect(messages[1]!.message!.kind.value!.id).toBe(turn.answers[0]);
    await expect(stat(path.join(dir, "m2.txt"))).rejects.toThrow(/ENOENT/);
    // The cut turn's summary no longer speaks of the removed steps (their answer, m2.txt).
    expect(messages[0]!.message).toMatchObject({
      kind: { case: "user", value: { summary: { title: "write two files", body: "", diffs: [] } } },
    });
  });

  it("at the turn's first step: the question stays as context (no_reply, message_updated) and is not answered again", async () => {
    const { sessionId, dir } = await newSession("revert-first-step", "free");
    const turn = await turnOfTwoWrites(sessionId, "f");
    await grpc.revert({ sessionId, messageId: turn.answers[0]! });
    await expect(stat(path.join(dir, "f1.txt"))).rejects.toThrow(/ENOENT/);

    const before = fake.requests.length;
    fake.push(say("Fresh."));
    await t.client.prompt({ sessionId, parts: [text("something new")] });
    expect(fake.requests.length).toBe(before + 1);
    expect(lastRequestRoles().slice(1)).toEqual(['user:"write two files"', 'user:"something new"']);
    const messages = await untilIdle(sessionId);
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "user", "assistant"]);
    expect(messages[0]!.message).toMatchObject({ kind: { case: "user", value: { id: turn.user, noReply: true } } });
    await expect(stat(path.join(dir, "f1.txt"))).rejects.toThrow(/ENOENT/);
    // The mark came as a message_updated in the prompt's transaction, after the removals.
    let prompts = 0;
    const events = await watchUntil(grpc, sessionId, (e) => e.kind.case === "prompted" && ++prompts === 2);
    const kinds = events.map((e) => e.kind.case);
    const marked = events.findIndex(
      (e) => e.kind.case === "messageUpdated" && e.kind.value.message?.kind.case === "user" && e.kind.value.message.kind.value.noReply,
    );
    expect(marked).toBeGreaterThan(kinds.lastIndexOf("messageRemoved"));
  });
});

describe("the diff of a reverted session", () => {
  it("keeps the turns before the revert point and leaves out the hidden ones", async () => {
    const { sessionId, dir } = await newSession("revert-diff", "free");
    fake.push(call("call_d1", "write", { filePath: "kept.txt", content: "kept\n" }), say("One."));
    await t.client.prompt({ sessionId, parts: [text("first")] });
    await untilIdle(sessionId);
    fake.push(call("call_d2", "write", { filePath: "hidden.txt", content: "hidden\n" }), say("Two."));
    await t.client.prompt({ sessionId, parts: [text("second")] });
    const messages = await untilIdle(sessionId);
    expect((await grpc.getDiff({ sessionId })).diffs.map((d) => d.file)).toEqual(["hidden.txt", "kept.txt"]);

    const second = messages.filter((m) => m.message?.kind.case === "user").at(-1)!.message!.kind.value!.id;
    await grpc.revert({ sessionId, messageId: second });
    expect(await readFile(path.join(dir, "kept.txt"), "utf8")).toBe("kept\n");
    await expect(stat(path.join(dir, "hidden.txt"))).rejects.toThrow(/ENOENT/);
    expect((await grpc.getDiff({ sessionId })).diffs.map((d) => [d.file, d.after])).toEqual([["kept.txt", "kept\n"]]);
    await grpc.unrevert({ sessionId });
  });
});

describe("Shell", () => {
  it("runs echo hi as a user message and an assistant message with one bash tool part", async () => {
    const { sessionId } = await newSession("shell");
    const res = await grpc.shell({ sessionId, agent: "build", command: "echo hi" });
    const answer = res.message!;
    expect(answer.message?.kind.case).toBe("assistant");
    expect(kinds(answer)).toEqual(["tool"]);
    const tool = answer.parts[0]!.kind.value as ToolPart;
    expect(tool.tool).toBe("bash");
    expect(state(tool)).toMatchObject({
      case: "completed",
      value: { output: "hi\n", title: "echo hi", metadata: { output: "hi\n", exit: 0, description: "" } },
    });
    const { messages } = await t.client.listMessages({ sessionId });
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant"]);
    expect(messages[0]!.parts.map((p) => p.kind.value)).toMatchObject([
      { text: "The following tool was executed by the user", synthetic: true },
    ]);
    expect(messages[1]!.message!.kind.value).toMatchObject({
      parentId: messages[0]!.message!.kind.value!.id,
      finish: "stop",
      agent: "build",
    });
  });

  it("refuses a command holding a NUL with INVALID_ARGUMENT on command; nothing stored", async () => {
    const { sessionId } = await newSession("shell-nul");
    const error = await grpc.shell({ sessionId, agent: "build", command: "echo a\u0000b" }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect([error?.code, error?.rawMessage]).toEqual([
      Code.InvalidArgument,
      "command: contains a NUL character (U+0000), which no shell command can hold",
    ]);
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
  });

  // A trial, 2026-12-02: a blank command was run, and under an ask rule left a permission request for it.
  it("refuses a blank command (spaces, zero-width space) with INVALID_ARGUMENT on command; nothing stored, nothing asked", async () => {
    const { sessionId } = await newSession("shell-blank");
    for (const command of ["  ", "\t\u200b\n"]) {
      const error = await grpc.shell({ sessionId, agent: "build", command }).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect([error?.code, error?.rawMessage]).toEqual([Code.InvalidArgument, "command: is blank: send the command line to run"]);
    }
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
    expect((await t.client.listPermissions({ sessionId })).permissions).toEqual([]);
  });

  it("asks for a command an ask rule matches, and ends the part in error when rejected", async () => {
    const { sessionId } = await newSession("shell-ask");
    const call = grpc.shell({ sessionId, agent: "build", command: "git push origin main" });
    const request = await nextAsk(sessionId);
    expect(request).toMatchObject({ permission: "bash", patterns: ["git push origin main"] });
    await grpc.replyPermission({ sessionId, permissionId: request.id, reply: PermissionReply.REJECT });
    const answer = (await call).message!;
    expect(state(answer.parts[0]!.kind.value as ToolPart)).toMatchObject({
      case: "error",
      value: { error: "The user rejected permission to use this specific tool call. You may try again with different parameters." },
    });
  });
});
