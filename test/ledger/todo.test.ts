import { toJson } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { ToolPart } from "../../gen/ledger/v1/part_pb.js";
import { TodoSchema } from "../../gen/ledger/v1/todo_pb.js";
import { newId } from "../../src/ids.js";
import { expectConnectError } from "../support/errors.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import type { ScriptedReply } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { storedEvents } from "../support/stored.js";

// The todo list (issue 16 item 5): the model's `todowrite` call (a scripted tool call from the
// fake OpenAI server through @ai-sdk/openai-compatible) stores the list with a `todo_updated`
// event, GetTodo reads it back, `todoread` returns it, and it goes with its session. Runs on
// Postgres and PGlite (vitest projects).

let t: FakeModelLedger;
beforeAll(async () => {
  t = await startFakeModelLedger({ retry: { attempts: 0 } });
});
afterAll(async () => {
  await t?.close();
});

const call = (id: string, name: string, args: unknown): ScriptedReply => ({
  kind: "stream",
  chunks: [{ toolCall: { id, name, arguments: JSON.stringify(args) } }],
});
const say = (words: string): ScriptedReply => ({ kind: "stream", chunks: [{ text: words }] });
const tool = (entry: MessageWithParts | undefined): ToolPart | undefined =>
  entry?.parts.flatMap((p) => (p.kind.case === "tool" ? [p.kind.value] : []))[0];
const plain = (todos: Parameters<typeof toJson<typeof TodoSchema>>[1][]) => todos.map((todo) => toJson(TodoSchema, todo));

const TODOS = [
  { id: "1", content: "Read the parser", status: "completed", priority: "high" },
  { id: "2", content: "Fix the off-by-one", status: "in_progress", priority: "high" },
  { id: "3", content: "Add a test", status: "pending", priority: "medium" },
  { id: "4", content: "Refactor the lexer", status: "cancelled", priority: "low" },
];

describe("todowrite then GetTodo", () => {
  it("stores the list with a todo_updated event in the tool's step, returns it as the tool output, and GetTodo reads it", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    expect((await t.client.getTodo({ sessionId })).todos).toEqual([]);

    t.fake.push(call("call_todo1", "todowrite", { todos: TODOS }), say("Planned."));
    const { message } = await t.client.prompt({ sessionId, agent: "plan", parts: [text("plan the fix")] });
    expect(message!.message!.kind.case).toBe("assistant");

    expect(plain((await t.client.getTodo({ sessionId })).todos)).toEqual(TODOS);

    // What was stored: the user message, the step with the tool call, the answer.
    const { messages } = await t.client.listMessages({ sessionId });
    expect(messages.map((m) => [m.message!.kind.case, m.parts.map((p) => p.kind.case)])).toEqual([
      ["user", ["text"]],
      ["assistant", ["stepStart", "tool", "stepFinish"]],
      ["assistant", ["stepStart", "text", "stepFinish"]],
    ]);
    const part = tool(messages[1]);
    expect(part).toMatchObject({ callId: "call_todo1", tool: "todowrite" });
    const state = part!.state!.status;
    expect(state.case).toBe("completed");
    if (state.case !== "completed") return;
    // OpenCode's output: the list as indented JSON; the title counts what is not completed.
    expect(state.value.title).toBe("3 todos");
    expect(state.value.output).toBe(JSON.stringify(TODOS, null, 2));
    expect(state.value.metadata).toEqual({ todos: TODOS });
    expect(state.value.input).toEqual({ todos: TODOS });

    // The event in the session log: one todo_updated carrying the list, stored before the tool
    // part completed (the AI SDK runs the tool as the call streams in, so the write may come
    // before or after the part's `running` snapshot).
    const events = await storedEvents(t.ledger.deps.db, sessionId);
    const todoEvents = events.filter((e) => e.kind === "todo_updated");
    expect(todoEvents).toHaveLength(1);
    expect(todoEvents[0]!.data).toEqual({
      sessionId,
      seq: String(todoEvents[0]!.seq),
      time: expect.any(String),
      todoUpdated: { todos: TODOS },
    });
    const completed = events.find((e) => {
      const tool = (e.data as { partUpdated?: { part: { tool?: { callId: string; state: { completed?: unknown } } } } }).partUpdated?.part
        .tool;
      return tool?.callId === "call_todo1" && tool.state.completed !== undefined;
    });
    expect(todoEvents[0]!.seq).toBeLessThan(completed!.seq);

    // A watcher replaying the log sees the same event, decoded.
    for await (const res of t.client.watchSession({ sessionId, afterSeq: BigInt(todoEvents[0]!.seq - 1) })) {
      expect(res.event!.kind.case).toBe("todoUpdated");
      if (res.event!.kind.case === "todoUpdated") expect(plain(res.event!.kind.value.todos)).toEqual(TODOS);
      break;
    }
  });

  it("todowrite replaces the whole list; todoread returns it", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const second = [{ id: "a", content: "Only this", status: "pending", priority: "low" }];
    t.fake.push(
      call("call_w1", "todowrite", { todos: TODOS }),
      call("call_w2", "todowrite", { todos: second }),
      call("call_r1", "todoread", {}),
      say("Done."),
    );
    await t.client.prompt({ sessionId, parts: [text("plan, replan, read")] });

    expect(plain((await t.client.getTodo({ sessionId })).todos)).toEqual(second);
    const { messages } = await t.client.listMessages({ sessionId });
    const read = messages.map(tool).find((p) => p?.callId === "call_r1");
    expect(read?.state?.status).toMatchObject({ case: "completed", value: { title: "1 todos", output: JSON.stringify(second, null, 2) } });
    const events = await storedEvents(t.ledger.deps.db, sessionId, { kind: "todo_updated" });
    expect(events.map((e) => (e.data as { todoUpdated: { todos: unknown[] } }).todoUpdated.todos)).toEqual([TODOS, second]);
  });

  it("refuses a bad status or duplicate ids with a tool error the model sees, writing nothing", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const badStatus = [{ id: "1", content: "x", status: "done", priority: "high" }];
    const twice = [
      { id: "1", content: "x", status: "pending", priority: "high" },
      { id: "1", content: "y", status: "pending", priority: "low" },
    ];
    t.fake.push(call("call_b1", "todowrite", { todos: badStatus }), call("call_b2", "todowrite", { todos: twice }), say("Sorry."));
    await t.client.prompt({ sessionId, parts: [text("try")] });

    const { messages } = await t.client.listMessages({ sessionId });
    const errors = messages
      .map(tool)
      .filter((p) => p !== undefined)
      .map((p) => p.state!.status);
    expect(errors.map((s) => s.case)).toEqual(["error", "error"]);
    expect(errors[0]!.case === "error" && errors[0]!.value.error).toMatch(/status/);
    expect(errors[1]!.case === "error" && errors[1]!.value.error).toContain('todos[1].id: "1" is used twice');
    expect((await t.client.getTodo({ sessionId })).todos).toEqual([]);
    expect(await storedEvents(t.ledger.deps.db, sessionId, { kind: "todo_updated" })).toEqual([]);
  });
});

describe("GetTodo errors and deletion", () => {
  it("answers NOT_FOUND for an unknown session and INVALID_ARGUMENT for a malformed id", async () => {
    const unknown = newId("ses");
    await expectConnectError(t.client.getTodo({ sessionId: unknown }), Code.NotFound, `session_id: session ${unknown} not found`);
    await expectConnectError(t.client.getTodo({ sessionId: "nope" }), Code.InvalidArgument);
  });

  it("removes the list with its session", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    t.fake.push(call("call_d1", "todowrite", { todos: TODOS }), say("Planned."));
    await t.client.prompt({ sessionId, parts: [text("plan")] });
    const rows = () => t.ledger.deps.db.selectFrom("session_todo").select("session_id").where("session_id", "=", sessionId).execute();
    expect(await rows()).toHaveLength(1);
    await t.client.deleteSession({ sessionId });
    expect(await rows()).toEqual([]);
    await expectConnectError(t.client.getTodo({ sessionId }), Code.NotFound);
  });
});
