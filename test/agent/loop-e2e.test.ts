import { writeFile } from "node:fs/promises";
import path from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { assistantOf, storedEvents } from "../support/stored.js";
import { text } from "../support/prompt.js";
import { compatibleProvider } from "../support/mock-models.js";
import { waitFor } from "../support/wait.js";

// The loop end to end: the real service, @ai-sdk/openai-compatible pointed at a local server
// speaking the OpenAI streaming protocol, and a gRPC client (h2c) reading PromptStream.

let t: TestLedger;
let fake: FakeOpenAI;
let other: FakeOpenAI;
let grpc: Client<typeof SessionService>;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  other = await startFakeOpenAI();
  t = await startTestLedger({
    model: "local/qwen",
    provider: {
      local: compatibleProvider(fake.url, { qwen: { cost: { input: 1, output: 2 } } }, "test"),
      second: compatibleProvider(other.url, { small: {} }),
    },
    retry: { attempts: 2, initial_ms: 10, max_ms: 50 },
  });
  await writeFile(path.join(t.dir, "notes.txt"), "hello from notes\n");
  grpc = createClient(SessionService, createGrpcTransport({ baseUrl: t.ledger.url }));
});
afterAll(async () => {
  await t?.close();
  await fake?.close();
  await other?.close();
});

const newSession = async () => (await t.client.createSession({ directory: t.dir })).session!.id;

async function streamPrompt(sessionId: string, words: string): Promise<SessionEvent[]> {
  const events: SessionEvent[] = [];
  for await (const res of grpc.promptStream({ sessionId, parts: [text(words)] })) events.push(res.event!);
  return events;
}

describe("streaming a text answer", () => {
  it("streams deltas that add up to the stored text, each part announced before its first delta", async () => {
    fake.push({
      kind: "stream",
      chunks: [{ text: "Hello" }, { text: ", " }, { text: "world" }, { text: "!" }],
      delayMs: 5,
      usage: { prompt_tokens: 10, completion_tokens: 4 },
    });
    const sessionId = await newSession();
    const events = await streamPrompt(sessionId, "say hello");
    const kinds = events.map((e) => e.kind.case);
    expect(kinds.at(-1)).toBe("sessionStatus");
    expect(events.at(-1)!.kind.value).toMatchObject({ status: { case: "idle" } });
    expect(kinds).toContain("partDelta");

    const { messages } = await t.client.listMessages({ sessionId });
    expect(messages).toHaveLength(2);
    const answer = messages[1]!;
    const a = assistantOf(answer)!;
    expect(a.parentId).toBe(messages[0]!.message!.kind.value!.id);
    expect(a.finish).toBe("stop");
    expect(a.time?.completed).toBeDefined();
    expect(a.tokens).toMatchObject({ input: 10n, output: 4n });
    expect(a.cost).toBeCloseTo((10 * 1 + 4 * 2) / 1e6);
    expect(answer.parts.map((p) => p.kind.case)).toEqual(["stepStart", "text", "stepFinish"]);
    const textPart = answer.parts[1]!;
    const deltas = events
      .filter((e) => e.kind.case === "partDelta" && e.kind.value.partId === textPart.id)
      .map((e) => (e.kind.value as { delta: string }).delta);
    expect(deltas.join("")).toBe("Hello, world!");
    expect(textPart.kind.value).toMatchObject({ text: "Hello, world!" });

    const firstUpdate = new Map<string, number>();
    events.forEach((e, i) => {
      if (e.kind.case === "partUpdated" && !firstUpdate.has(e.kind.value.part!.id)) firstUpdate.set(e.kind.value.part!.id, i);
    });
    events.forEach((e, i) => {
      if (e.kind.case === "partDelta") expect(firstUpdate.get(e.kind.value.partId)).toBeLessThan(i);
    });
    const stored = events.filter((e) => e.kind.case !== "partDelta").map((e) => Number(e.seq));
    expect(stored).toEqual(stored.map((_, i) => stored[0]! + i));
  });
});

describe("text snapshots while streaming", () => {
  /** part_updated events of non-synthetic text parts, in order (the user's own text part first). */
  const textUpdates = (events: SessionEvent[]) =>
    events.filter(
      (e) => e.kind.case === "partUpdated" && e.kind.value.part?.kind.case === "text" && !e.kind.value.part.kind.value.synthetic,
    );

  it("stores the full text while a slow part streams, not only at its end", async () => {
    fake.push({ kind: "stream", chunks: [{ text: "one " }, { text: "two " }, { text: "three" }], delayMs: 150 });
    const events = await streamPrompt(await newSession(), "slowly");
    const updates = textUpdates(events).slice(1); // the first is the user's own text part
    expect(updates.length).toBeGreaterThanOrEqual(3);
    expect(updates.at(-1)!.kind.value).toMatchObject({ part: { kind: { value: { text: "one two three" } } } });
  });

  it("does not store a fast part once per token", async () => {
    fake.push({ kind: "stream", chunks: Array.from({ length: 60 }, (_, i) => ({ text: `t${i} ` })) });
    const events = await streamPrompt(await newSession(), "quickly");
    expect(events.filter((e) => e.kind.case === "partDelta")).toHaveLength(60);
    expect(textUpdates(events).slice(1).length).toBeLessThan(10);
  });
});

describe("tools", () => {
  it("runs read, then answers with the file's content in the history", async () => {
    fake.push(
      { kind: "stream", chunks: [{ toolCall: { id: "call_1", name: "read", arguments: JSON.stringify({ filePath: "notes.txt" }) } }] },
      { kind: "stream", chunks: [{ text: "The notes say hello." }] },
    );
    const sessionId = await newSession();
    const before = fake.requests.length;
    const res = await t.client.prompt({ sessionId, parts: [text("what do the notes say?")] });
    expect(res.message?.parts.map((p) => p.kind.case)).toEqual(["stepStart", "text", "stepFinish"]);
    const { messages } = await t.client.listMessages({ sessionId });
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant"]);
    const toolStep = messages[1]!;
    expect(assistantOf(toolStep)!.finish).toBe("tool-calls");
    const tool = toolStep.parts.find((p) => p.kind.case === "tool")!;
    expect(tool.kind.value).toMatchObject({ callId: "call_1", tool: "read" });
    const state = tool.kind.case === "tool" ? tool.kind.value.state?.status : undefined;
    expect(state?.case).toBe("completed");
    expect(state?.case === "completed" && state.value.output).toContain("1: hello from notes");
    const second = fake.requests[before + 1]!.body.messages as Array<{ role: string; content: unknown }>;
    expect(second.find((m) => m.role === "tool")?.content).toContain("hello from notes");
  });
});

describe("errors", () => {
  it("records a 401 as a provider auth error on the assistant message", async () => {
    fake.push({ kind: "error", status: 401 });
    const sessionId = await newSession();
    const res = await t.client.prompt({ sessionId, parts: [text("hi")] });
    const a = assistantOf(res.message)!;
    expect(a.error?.kind.case).toBe("providerAuth");
    expect(a.time?.completed).toBeDefined();
  });

  it("retries a 429 and records a retry part before the answer", async () => {
    fake.push({ kind: "error", status: 429, headers: { "retry-after": "0" } }, { kind: "stream", chunks: [{ text: "after retry" }] });
    const sessionId = await newSession();
    const res = await t.client.prompt({ sessionId, parts: [text("hi")] });
    expect(res.message?.parts.map((p) => p.kind.case)).toEqual(["retry", "stepStart", "text", "stepFinish"]);
    expect(assistantOf(res.message)!.error).toBeUndefined();
  });

  it("answers an unknown model with an error naming the configured ones and a session_error", async () => {
    const sessionId = await newSession();
    const res = await t.client.prompt({ sessionId, model: { providerId: "local", modelId: "nope" }, parts: [text("hi")] });
    const a = assistantOf(res.message)!;
    expect(a.error?.kind.case).toBe("modelNotFound");
    expect(a.error?.message).toContain("local/qwen");
    expect(await storedEvents(t.ledger.deps.db, sessionId, { kind: "session_error" })).toHaveLength(1);
  });
});

describe("abort", () => {
  it("cancels a hanging stream and leaves a usable session, five times in a row", async () => {
    const sessionId = await newSession();
    for (let i = 0; i < 5; i++) {
      fake.push({ kind: "stream", chunks: [{ text: `partial ${i}` }, { hang: true }] });
      const call = t.client.prompt({ sessionId, parts: [text(`question ${i}`)] });
      // Abort once this question's answer is streaming (its text part exists).
      await waitFor(
        "this question's answer to stream",
        async () => {
          const answers = (await t.client.listMessages({ sessionId })).messages.filter((m) => assistantOf(m));
          return answers.length === i + 1 && answers[i]!.parts.some((p) => p.kind.case === "text");
        },
        5000,
      );
      expect((await t.client.abort({ sessionId })).aborted).toBe(true);
      const res = await call;
      const a = assistantOf(res.message)!;
      expect(a.error?.kind.case).toBe("aborted");
      expect(a.time?.completed).toBeDefined();
    }
    fake.push({ kind: "stream", chunks: [{ text: "fine again" }] });
    const res = await t.client.prompt({ sessionId, parts: [text("still there?")] });
    expect(res.message?.parts.find((p) => p.kind.case === "text")?.kind.value).toMatchObject({ text: "fine again" });
    expect((await t.client.abort({ sessionId })).aborted).toBe(false);
  });
});

describe("one runner per session", () => {
  it("answers two prompts sent at once, each in its own messages", async () => {
    fake.push(
      { kind: "stream", chunks: [{ text: "first answer" }], delayMs: 10 },
      { kind: "stream", chunks: [{ text: "second answer" }], delayMs: 10 },
    );
    const sessionId = await newSession();
    const [a, b] = await Promise.all([
      t.client.prompt({ sessionId, parts: [text("one")] }),
      t.client.prompt({ sessionId, parts: [text("two")] }),
    ]);
    const { messages } = await t.client.listMessages({ sessionId });
    const users = messages.filter((m) => m.message?.kind.case === "user").map((m) => m.message!.kind.value!.id);
    const answers = messages.filter((m) => assistantOf(m)).map((m) => assistantOf(m)!);
    expect(users).toHaveLength(2);
    // Each user message answered once, in order, by one runner: the second answer starts after the first completed.
    expect(answers.map((x) => x.parentId)).toEqual(users);
    expect(timestampMs(answers[1]!.time!.created!)).toBeGreaterThanOrEqual(timestampMs(answers[0]!.time!.completed!));
    for (const m of messages) for (const p of m.parts) expect(p.messageId).toBe(m.message!.kind.value!.id);
    expect(assistantOf(a.message)!.parentId).not.toBe(assistantOf(b.message)!.parentId);
  });
});

describe("subtasks", () => {
  it("runs every subtask part in order in child sessions, then answers", async () => {
    fake.push(
      { kind: "stream", chunks: [{ text: "found A" }] },
      { kind: "stream", chunks: [{ text: "found B" }] },
      { kind: "stream", chunks: [{ text: "summary" }] },
    );
    const sessionId = await newSession();
    const subtask = (prompt: string) => ({
      kind: { case: "subtask" as const, value: { prompt, description: `look ${prompt}`, agent: "explore" } },
    });
    const res = await t.client.prompt({ sessionId, parts: [text("investigate"), subtask("A"), subtask("B")] });
    expect(res.message?.parts.find((p) => p.kind.case === "text")?.kind.value).toMatchObject({ text: "summary" });
    const { messages } = await t.client.listMessages({ sessionId });
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant", "assistant"]);
    const outputs = messages.slice(1, 3).map((m) => {
      const tool = m.parts.find((p) => p.kind.case === "tool");
      const state = tool?.kind.case === "tool" ? tool.kind.value.state?.status : undefined;
      return {
        call: tool?.kind.case === "tool" ? tool.kind.value.callId : "",
        status: state?.case,
        output: state?.case === "completed" ? state.value.output : "",
      };
    });
    const subtaskIds = messages[0]!.parts.filter((p) => p.kind.case === "subtask").map((p) => p.id);
    expect(outputs.map((o) => [o.call, o.status])).toEqual(subtaskIds.map((id) => [id, "completed"]));
    expect(outputs[0]!.output).toContain("found A");
    expect(outputs[1]!.output).toContain("found B");
    const children = await t.ledger.deps.db.selectFrom("session").select("id").where("parent_id", "=", sessionId).execute();
    expect(children).toHaveLength(2);
  });
});

describe("structured output", () => {
  const format = {
    kind: {
      case: "jsonSchema" as const,
      value: { schema: { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] }, retryCount: 1 },
    },
  };

  it("stores JSON matching the schema on the assistant message, retrying an invalid answer", async () => {
    fake.push({ kind: "stream", chunks: [{ text: "not json" }] }, { kind: "stream", chunks: [{ text: '{"answer":"42"}' }] });
    const sessionId = await newSession();
    const res = await t.client.prompt({ sessionId, format, parts: [text("the answer?")] });
    const a = assistantOf(res.message)!;
    expect(a.error).toBeUndefined();
    expect(a.structured?.kind).toEqual({
      case: "structValue",
      value: expect.objectContaining({ fields: { answer: expect.objectContaining({ kind: { case: "stringValue", value: "42" } }) } }),
    });
    expect(res.message?.parts.map((p) => p.kind.case)).toEqual([
      "stepStart",
      "text",
      "stepFinish",
      "retry",
      "stepStart",
      "text",
      "stepFinish",
    ]);
  });

  it("fails with a structured output error after the configured retries", async () => {
    fake.push({ kind: "stream", chunks: [{ text: "nope" }] }, { kind: "stream", chunks: [{ text: "still nope" }] });
    const sessionId = await newSession();
    const res = await t.client.prompt({ sessionId, format, parts: [text("the answer?")] });
    expect(assistantOf(res.message)!.error?.kind).toEqual({ case: "structuredOutput", value: expect.objectContaining({ retries: 1 }) });
  });
});

describe("model switch", () => {
  it("answers turn one with provider A and turn two with provider B", async () => {
    fake.push({ kind: "stream", chunks: [{ reasoning: "thinking" }, { text: "from A" }] });
    other.push({ kind: "stream", chunks: [{ text: "from B" }] });
    const sessionId = await newSession();
    await t.client.prompt({ sessionId, parts: [text("a?")] });
    const res = await t.client.prompt({ sessionId, model: { providerId: "second", modelId: "small" }, parts: [text("b?")] });
    expect(res.message?.parts.find((p) => p.kind.case === "text")?.kind.value).toMatchObject({ text: "from B" });
    const sent = other.requests.at(-1)!.body.messages as Array<{ role: string; content: unknown }>;
    expect(sent.map((m) => m.role)).toEqual(["system", "user", "assistant", "user"]);
  });
});

function timestampMs(t: { seconds: bigint; nanos: number }): number {
  return Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6);
}
