import { writeFile } from "node:fs/promises";
import path from "node:path";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { LanguageModelV3, LanguageModelV3CallOptions, LanguageModelV3StreamResult } from "@ai-sdk/provider";
import type { MockLanguageModelV3 } from "ai/test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import type { MessageWithParts, OutputFormatSchema } from "../../gen/ledger/v1/message_pb.js";
import type { Part, ReasoningPart, TextPart, ToolPart } from "../../gen/ledger/v1/part_pb.js";
import { prompt } from "../../src/ledger/prompt.js";
import { readTool } from "../../src/tools/read.js";
import { PromptRequestSchema } from "../../gen/ledger/v1/service_pb.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import {
  lengthReply,
  mockResolver,
  reasoningParts,
  reasoningReply,
  reply,
  scriptedModel,
  textParts,
  textReply,
  toolCallParts,
  toolCallReply,
  usage,
  type ModelKey,
  NO_RETRY,
} from "../support/mock-models.js";
import { text, type Draft } from "../support/prompt.js";
import { assistantOf } from "../support/stored.js";

// The agent loop through the real service (Connect JSON client, real database, real tools in the
// temp dir), with the AI SDK's MockLanguageModelV3 injected as the model: every case checks
// the exact stored messages and parts, and what the model was sent.

const PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

const models: Partial<Record<ModelKey, LanguageModelV3>> = {};
const configs = {
  "mock/model": { cost: { input: 1, output: 2 } },
  "mock/vision": { modalities: { input: ["text", "image"], output: ["text"] } },
};
let t: TestLedger;
let notes: string;

beforeAll(async () => {
  t = await startTestLedger({ model: "mock/model", retry: NO_RETRY }, { models: mockResolver(models, configs) });
  await writeFile(path.join(t.dir, "notes.txt"), "hello from notes\nsecond line\n");
  await writeFile(path.join(t.dir, "todo.txt"), "buy milk\n");
  notes = (await readTool({ filePath: "notes.txt" }, { directory: t.dir, roots: [] })).output;
});
afterAll(async () => {
  await t?.close();
});

/** What a test prompt sets. */
interface Prompt {
  parts: Draft[];
  agent?: string;
  model?: { providerId: string; modelId: string };
  tools?: Record<string, boolean>;
  format?: MessageInitShape<typeof OutputFormatSchema>;
}

/** Puts a model scripted with `script` under `key`, prompts a new session and lists its messages. */
async function run(ledger: TestLedger, script: LanguageModelV3StreamResult[], request: Prompt, key: ModelKey = "mock/model") {
  const mock = scriptedModel(script);
  models[key] = mock;
  const sessionId = (await ledger.client.createSession({ directory: ledger.dir })).session!.id;
  const res = await ledger.client.prompt({ sessionId, ...request });
  const { messages } = await ledger.client.listMessages({ sessionId });
  return { mock, res, messages, sessionId, userId: messages[0]!.message!.kind.value!.id };
}

/** A part as a compact string: its kind, the tool name and state for tools, the reason for step_finish. */
function partShape(p: Part): string {
  if (p.kind.case === "tool") return `tool:${p.kind.value.tool}:${p.kind.value.state?.status.case}`;
  if (p.kind.case === "stepFinish") return `stepFinish:${p.kind.value.reason}`;
  return p.kind.case ?? "";
}

/** Messages as compact shapes: role, parent, finish, error kind, completed, part shapes. */
function shapes(messages: MessageWithParts[]) {
  return messages.map((m) => {
    const kind = m.message!.kind;
    if (kind.case === "user") return { role: "user", parts: m.parts.map(partShape) };
    const a = kind.value!;
    return {
      role: "assistant",
      parentId: a.parentId,
      finish: a.finish,
      error: a.error?.kind.case,
      completed: a.time?.completed !== undefined,
      parts: m.parts.map(partShape),
    };
  });
}

/** The shape of the user message of a text-only prompt. */
const userText = { role: "user", parts: ["text"] };

/** The shape of a completed assistant step answering the user message `parentId`; `error` is the error's kind, if any. */
const step = (parentId: string, finish: string, parts: string[], error?: string) => ({
  role: "assistant",
  parentId,
  finish,
  error,
  completed: true,
  parts,
});

/** The shape of a step that ran `tool` (ending in `status`) and asked for another step. */
const toolStep = (parentId: string, tool: string, status = "completed") =>
  step(parentId, "tool-calls", ["stepStart", `tool:${tool}:${status}`, "stepFinish:tool-calls"]);

/** The shape of a step that answered with text and stopped. */
const textStep = (parentId: string) => step(parentId, "stop", ["stepStart", "text", "stepFinish:stop"]);

/** A scripted step calling read on notes.txt. */
const readNotes = (callId = "call_1") => toolCallReply(callId, "read", { filePath: "notes.txt" });

const toolOf = (m: MessageWithParts) => m.parts.find((p) => p.kind.case === "tool")!.kind.value as ToolPart;
const textOf = (m: MessageWithParts) => m.parts.find((p) => p.kind.case === "text")!.kind.value as TextPart;
const toolNames = (call: LanguageModelV3CallOptions) => (call.tools ?? []).map((tool) => tool.name);
const systemOf = (call: LanguageModelV3CallOptions) => {
  const first = call.prompt[0]!;
  return first.role === "system" ? first.content : "";
};
/** The prompt sent to the model without the system message. */
const conversation = (mock: MockLanguageModelV3, call: number) => mock.doStreamCalls[call]!.prompt.slice(1);

const user = (words: string) => ({ role: "user", content: [{ type: "text", text: words }] });
const toolCall = (toolCallId: string, toolName: string, input: unknown) => ({
  role: "assistant",
  content: [{ type: "tool-call", toolCallId, toolName, input }],
});
const toolResult = (toolCallId: string, toolName: string, output: { type: "text" | "error-text"; value: string }) => ({
  role: "tool",
  content: [{ type: "tool-result", toolCallId, toolName, output }],
});

describe("a text answer", () => {
  it("stores one completed assistant message with step_start, text, step_finish, tokens and cost", async () => {
    const { mock, res, messages, userId } = await run(t, [textReply("Hello there, friend.", usage(8, 5, { cacheRead: 2 }))], {
      parts: [text("say hello")],
    });
    expect(shapes(messages)).toEqual([userText, textStep(userId)]);
    const a = assistantOf(messages[1])!;
    expect(a).toMatchObject({ agent: "build", model: { providerId: "mock", modelId: "model" }, path: { cwd: t.dir, root: t.dir } });
    expect(a.tokens).toMatchObject({ input: 8n, output: 5n, reasoning: 0n, cache: { read: 2n, write: 0n }, total: 15n });
    expect(a.cost).toBeCloseTo((8 * 1 + 5 * 2) / 1e6, 12);
    expect(timestampMs(a.time!.completed!)).toBeGreaterThanOrEqual(timestampMs(a.time!.created!));
    const [, textPart, finishPart] = messages[1]!.parts;
    expect(textPart!.kind.value).toMatchObject({ text: "Hello there, friend.", synthetic: false });
    const time = (textPart!.kind.value as TextPart).time!;
    expect(timestampMs(time.end!)).toBeGreaterThanOrEqual(timestampMs(time.start!));
    expect(finishPart!.kind.value).toMatchObject({ reason: "stop", tokens: { input: 8n, output: 5n, cache: { read: 2n }, total: 15n } });
    expect((finishPart!.kind.value as { cost: number }).cost).toBeCloseTo(a.cost, 12);
    // The RPC answers with the final assistant message; every part belongs to it.
    expect(res.message?.message?.kind.value?.id).toBe(a.id);
    for (const m of messages) for (const p of m.parts) expect(p.messageId).toBe(m.message!.kind.value!.id);

    expect(mock.doStreamCalls).toHaveLength(1);
    expect(systemOf(mock.doStreamCalls[0]!)).toContain(t.dir);
    expect(conversation(mock, 0)).toEqual([user("say hello")]);
    expect(toolNames(mock.doStreamCalls[0]!)).toEqual(expect.arrayContaining(["read", "list", "glob", "grep"]));
  });
});

describe("tools", () => {
  it("runs read on a real file, then answers: the second call sees the numbered content", async () => {
    const { mock, messages, userId } = await run(t, [readNotes(), textReply("The notes say hello.")], {
      parts: [text("what do the notes say?")],
    });
    expect(notes).toContain("1: hello from notes\n2: second line");
    expect(shapes(messages)).toEqual([userText, toolStep(userId, "read"), textStep(userId)]);
    const tool = toolOf(messages[1]!);
    expect(tool.callId).toBe("call_1");
    const state = tool.state!.status;
    expect(state.case).toBe("completed");
    if (state.case !== "completed") return;
    expect(state.value).toMatchObject({
      input: { filePath: "notes.txt" },
      output: notes,
      title: "notes.txt",
      metadata: { truncated: false, totalLines: 2 },
    });
    expect(timestampMs(state.value.timeEnd!)).toBeGreaterThanOrEqual(timestampMs(state.value.timeStart!));

    expect(mock.doStreamCalls).toHaveLength(2);
    expect(conversation(mock, 1)).toEqual([
      user("what do the notes say?"),
      toolCall("call_1", "read", { filePath: "notes.txt" }),
      toolResult("call_1", "read", { type: "text", value: notes }),
    ]);
  });

  it("takes two tool steps, then answers: three assistant messages, each call sees all earlier results", async () => {
    const { mock, messages, userId } = await run(
      t,
      [readNotes(), toolCallReply("call_2", "glob", { pattern: "*.txt" }), textReply("Two text files.")],
      { parts: [text("which text files are there?")] },
    );
    expect(shapes(messages)).toEqual([userText, toolStep(userId, "read"), toolStep(userId, "glob"), textStep(userId)]);
    const glob = toolOf(messages[2]!).state!.status;
    const globOutput = glob.case === "completed" ? glob.value.output : "";
    expect(globOutput).toContain("notes.txt");
    expect(globOutput).toContain("todo.txt");
    expect(textOf(messages[3]!).text).toBe("Two text files.");

    expect(mock.doStreamCalls).toHaveLength(3);
    expect(conversation(mock, 2)).toEqual([
      user("which text files are there?"),
      toolCall("call_1", "read", { filePath: "notes.txt" }),
      toolResult("call_1", "read", { type: "text", value: notes }),
      toolCall("call_2", "glob", { pattern: "*.txt" }),
      toolResult("call_2", "glob", { type: "text", value: globOutput }),
    ]);
  });

  it("turns a tool call streamed as tool-input-start/delta/end into one tool part (no extra step_start parts)", async () => {
    const { messages, userId } = await run(
      t,
      [toolCallReply("call_s", "read", { filePath: "notes.txt" }, { streamInput: true }), textReply("done")],
      {
        parts: [text("read the notes")],
      },
    );
    expect(shapes(messages)).toEqual([userText, toolStep(userId, "read"), textStep(userId)]);
  });

  it("does not offer a tool the session denies (deprecated tools map); a call of it anyway is a tool error the model sees next", async () => {
    const { mock, messages, userId, sessionId } = await run(t, [readNotes(), textReply("I may not read files.")], {
      parts: [text("read the notes")],
      tools: { read: false },
    });
    expect(shapes(messages)).toEqual([userText, toolStep(userId, "read", "error"), textStep(userId)]);
    const offered = toolNames(mock.doStreamCalls[0]!);
    expect(offered).not.toContain("read");
    const state = toolOf(messages[1]!).state!.status;
    const error = state.case === "error" ? state.value.error : "";
    expect(error).toBe(`Model tried to call unavailable tool 'read'. Available tools: ${offered.join(", ")}.`);
    expect(state.value).toMatchObject({ input: { filePath: "notes.txt" } });
    expect(conversation(mock, 1)).toEqual([
      user("read the notes"),
      toolCall("call_1", "read", { filePath: "notes.txt" }),
      toolResult("call_1", "read", { type: "error-text", value: error }),
    ]);
    const { session } = await t.client.getSession({ sessionId });
    expect(session?.permission).toEqual([expect.objectContaining({ permission: "read", action: expect.anything() })]);
  });

  it("lets the read-only plan agent read", async () => {
    const { mock, messages, userId } = await run(t, [readNotes(), textReply("Plan: nothing to change.")], {
      agent: "plan",
      parts: [text("plan something")],
    });
    expect(shapes(messages)).toEqual([userText, toolStep(userId, "read"), textStep(userId)]);
    expect(messages.slice(1).map((m) => assistantOf(m)!.agent)).toEqual(["plan", "plan"]);
    const state = toolOf(messages[1]!).state!.status;
    expect(state.case === "completed" && state.value.output).toBe(notes);
    expect(systemOf(mock.doStreamCalls[0]!)).toContain("read-only");
    expect(toolNames(mock.doStreamCalls[0]!)).toContain("read");
  });
});

describe("reasoning and provider metadata", () => {
  it("stores the reasoning part (with start and end time) before the text part", async () => {
    const { messages, userId } = await run(t, [reasoningReply("Let me think about it.", "Forty-two.", usage(10, 9, { reasoning: 4 }))], {
      parts: [text("the answer?")],
    });
    expect(shapes(messages)).toEqual([userText, step(userId, "stop", ["stepStart", "reasoning", "text", "stepFinish:stop"])]);
    const reasoning = messages[1]!.parts[1]!.kind.value as ReasoningPart;
    const answer = messages[1]!.parts[2]!.kind.value as TextPart;
    expect(reasoning.text).toBe("Let me think about it.");
    expect(answer.text).toBe("Forty-two.");
    expect(reasoning.time?.start).toBeDefined();
    expect(reasoning.time?.end).toBeDefined();
    expect(timestampMs(reasoning.time!.end!)).toBeGreaterThanOrEqual(timestampMs(reasoning.time!.start!));
    expect(timestampMs(answer.time!.start!)).toBeGreaterThanOrEqual(timestampMs(reasoning.time!.end!));
    expect(assistantOf(messages[1])!.tokens).toMatchObject({ input: 10n, output: 9n, reasoning: 4n, total: 19n });
  });

  const meta = (value: string) => ({ mock: { signature: value } });

  it("sends reasoning and text provider metadata back to the same provider only", async () => {
    const first = reply([...reasoningParts("thinking", "r1", meta("sig-reasoning")), ...textParts("Yes.", "t1", meta("sig-text"))], "stop");
    const { mock, sessionId } = await run(t, [first, textReply("again")], { parts: [text("one")] });
    await t.client.prompt({ sessionId, parts: [text("two")] });
    expect(conversation(mock, 1)).toEqual([
      user("one"),
      {
        role: "assistant",
        content: [
          { type: "reasoning", text: "thinking", providerOptions: meta("sig-reasoning") },
          { type: "text", text: "Yes.", providerOptions: meta("sig-text") },
        ],
      },
      user("two"),
    ]);
    const other = scriptedModel([textReply("from the other provider")], { provider: "other" });
    models["other/model"] = other;
    await t.client.prompt({ sessionId, model: { providerId: "other", modelId: "model" }, parts: [text("three")] });
    expect(conversation(other, 0).slice(0, 2)).toEqual([
      user("one"),
      {
        role: "assistant",
        content: [
          { type: "reasoning", text: "thinking" },
          { type: "text", text: "Yes." },
        ],
      },
    ]);
    for (const part of other.doStreamCalls[0]!.prompt[2]!.content as Array<{ providerOptions?: unknown }>)
      expect(part.providerOptions).toBeUndefined();
  });

  it("keeps a tool call's provider metadata and sends it back with the call", async () => {
    const first = reply(toolCallParts("call_1", "read", { filePath: "notes.txt" }, { providerMetadata: meta("sig-call") }), "tool-calls");
    const { mock, messages } = await run(t, [first, textReply("ok")], { parts: [text("go")] });
    expect.soft(toolOf(messages[1]!).metadata).toEqual(meta("sig-call"));
    expect(conversation(mock, 1)[1]).toEqual({
      role: "assistant",
      content: [
        { type: "tool-call", toolCallId: "call_1", toolName: "read", input: { filePath: "notes.txt" }, providerOptions: meta("sig-call") },
      ],
    });
  });
});

describe("stops and errors", () => {
  it("stops at the output token limit: finish length, an output_length error, no further call", async () => {
    const { mock, messages, userId } = await run(t, [lengthReply("The answer is", usage(3, 4)), textReply("never sent")], {
      parts: [text("long answer please")],
    });
    expect(shapes(messages)).toEqual([userText, step(userId, "length", ["stepStart", "text", "stepFinish:length"], "outputLength")]);
    expect(textOf(messages[1]!).text).toBe("The answer is");
    expect(assistantOf(messages[1])!.tokens).toMatchObject({ input: 3n, output: 4n });
    expect(mock.doStreamCalls).toHaveLength(1);
  });

  it("answers an unknown model with a model_not_found error naming the configured ones", async () => {
    const { messages, userId } = await run(t, [], { model: { providerId: "mock", modelId: "nope" }, parts: [text("hi")] });
    expect(shapes(messages)).toEqual([userText, step(userId, "error", [], "modelNotFound")]);
    expect(assistantOf(messages[1])!.error?.message).toContain("mock/model");
  });
});

describe("structured output", () => {
  const format = {
    kind: {
      case: "jsonSchema" as const,
      value: { schema: { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] }, retryCount: 1 },
    },
  };

  it("stores the JSON answer on the assistant message and asks the model for JSON", async () => {
    const { mock, messages } = await run(t, [textReply('{"answer":"42"}')], { format, parts: [text("the answer?")] });
    const a = assistantOf(messages[1])!;
    expect(a.error).toBeUndefined();
    expect(a.structured?.kind.case).toBe("structValue");
    expect(a.structured?.kind.value).toMatchObject({ fields: { answer: { kind: { case: "stringValue", value: "42" } } } });
    expect(mock.doStreamCalls[0]!.responseFormat).toMatchObject({ type: "json" });
  });

  it("retries an answer that is not JSON, then fails with structured_output after the configured retries", async () => {
    const { mock, messages } = await run(t, [textReply("no json"), textReply("still none")], { format, parts: [text("the answer?")] });
    expect(mock.doStreamCalls).toHaveLength(2);
    const a = assistantOf(messages[1])!;
    expect(a.error?.kind).toMatchObject({ case: "structuredOutput", value: { retries: 1 } });
    expect(messages[1]!.parts.map(partShape)).toEqual([
      "stepStart",
      "text",
      "stepFinish:stop",
      "retry",
      "stepStart",
      "text",
      "stepFinish:stop",
    ]);
  });

  it("holds a retry_count stored before it was bounded to 10 retries (the domain call skips the proto's rule, as old rows do)", async () => {
    const mock = scriptedModel(Array.from({ length: 12 }, () => textReply("no json")));
    models["mock/model"] = mock;
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const unbounded = { kind: { case: "jsonSchema" as const, value: { schema: { type: "object" }, retryCount: 4294967295 } } };
    const answer = await prompt(t.ledger.deps, create(PromptRequestSchema, { sessionId, format: unbounded, parts: [text("json?")] }));
    expect(mock.doStreamCalls).toHaveLength(11);
    expect(assistantOf(answer)!.error?.kind).toMatchObject({ case: "structuredOutput", value: { retries: 10 } });
  });
});

describe("attachments", () => {
  it("sends an image attachment as a file to a model that accepts images", async () => {
    const { mock } = await run(
      t,
      [textReply("A pixel.")],
      {
        model: { providerId: "mock", modelId: "vision" },
        parts: [
          text("what is this?"),
          { kind: { case: "file", value: { url: `data:image/png;base64,${PNG_1X1}`, mime: "image/png", filename: "dot.png" } } },
        ],
      },
      "mock/vision",
    );
    expect(conversation(mock, 0)).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "what is this?" },
          { type: "file", data: PNG_1X1, mediaType: "image/png", filename: "dot.png" },
        ],
      },
    ]);
  });
});

describe("an agent step limit", () => {
  let limited: TestLedger;
  beforeAll(async () => {
    limited = await startTestLedger({ model: "mock/model", agent: { build: { steps: 2 } } }, { models: mockResolver(models) });
    await writeFile(path.join(limited.dir, "notes.txt"), "hello from notes\n");
  });
  afterAll(async () => {
    await limited?.close();
  });

  it("sends the last allowed step without tools", async () => {
    const { mock, messages, userId } = await run(limited, [readNotes(), textReply("Done.")], { parts: [text("read")] });
    expect(shapes(messages)).toEqual([userText, toolStep(userId, "read"), textStep(userId)]);
    expect(mock.doStreamCalls).toHaveLength(2);
    expect(toolNames(mock.doStreamCalls[0]!)).toContain("read");
    expect(mock.doStreamCalls[1]!.tools ?? []).toEqual([]);
    expect(systemOf(mock.doStreamCalls[1]!)).toContain("last step");
    expect(systemOf(mock.doStreamCalls[0]!)).not.toContain("last step");
  });

  it("never takes more steps than the limit, even when the model calls a tool on the last one", async () => {
    const { mock, messages } = await run(limited, [readNotes(), readNotes("call_2"), textReply("third step")], {
      parts: [text("read forever")],
    });
    expect(mock.doStreamCalls).toHaveLength(2);
    expect(messages.filter((m) => assistantOf(m))).toHaveLength(2);
  });
});
