import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { APICallError, generateText, NoOutputGeneratedError, stepCountIs, streamText, tool, type ToolSet } from "ai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";

// These tests pin down both the fake server and the `fullStream` part sequences that
// ai@6 + @ai-sdk/openai-compatible@2 produce for it, which the agent-loop adapter relies on.

let fake: FakeOpenAI;
beforeAll(async () => {
  fake = await startFakeOpenAI();
});
afterAll(async () => {
  await fake.close();
});
afterEach(() => {
  fake.setFallback({ kind: "error", status: 500 });
  fake.requests.length = 0;
});

const model = () => createOpenAICompatible({ name: "local", baseURL: fake.url, apiKey: "test" }).chatModel("fake-model");

async function collect<P>(stream: AsyncIterable<P>): Promise<P[]> {
  const parts: P[] = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

/** `streamText` on the fake's model with prompt "hi" and no retries (`options` add to them), read to the end. */
async function streamAll<TOOLS extends ToolSet = {}>(options: Partial<Parameters<typeof streamText<TOOLS>>[0]> = {}) {
  const result = streamText<TOOLS>({ model: model(), prompt: "hi", maxRetries: 0, ...options } as Parameters<typeof streamText<TOOLS>>[0]);
  return { result, parts: await collect(result.fullStream) };
}
const types = (parts: Array<{ type: string }>): string[] => parts.map((p) => p.type);

const readTool = tool({
  description: "Read a file",
  inputSchema: z.object({ filePath: z.string() }),
  execute: async ({ filePath }) => `contents of ${filePath}`,
});

describe("fake OpenAI server with streamText", () => {
  it("streams text and reports usage", async () => {
    fake.push({ kind: "stream", chunks: [{ text: "Hello" }, { text: ", world" }], usage: { prompt_tokens: 10, completion_tokens: 3 } });
    const { result, parts } = await streamAll();

    expect(types(parts)).toEqual(["start", "start-step", "text-start", "text-delta", "text-delta", "text-end", "finish-step", "finish"]);
    const text = parts.flatMap((p) => (p.type === "text-delta" ? [p.text] : [])).join("");
    expect(text).toBe("Hello, world");
    expect(await result.text).toBe("Hello, world");

    const finishStep = parts.find((p) => p.type === "finish-step");
    expect(finishStep).toMatchObject({
      finishReason: "stop",
      rawFinishReason: "stop",
      usage: { inputTokens: 10, outputTokens: 3, totalTokens: 13 },
    });
    const finish = parts.at(-1);
    expect(finish).toMatchObject({ type: "finish", finishReason: "stop", totalUsage: { inputTokens: 10, outputTokens: 3 } });
    expect(await result.usage).toMatchObject({ inputTokens: 10, outputTokens: 3, totalTokens: 13 });

    expect(fake.requests).toHaveLength(1);
    const { body, headers } = fake.requests[0];
    expect(body).toMatchObject({ model: "fake-model", stream: true, messages: [{ role: "user", content: "hi" }] });
    expect(headers.authorization).toBe("Bearer test");
  });

  it("streams reasoning_content as reasoning parts, with reasoning and cached token counts", async () => {
    fake.push({
      kind: "stream",
      chunks: [{ reasoning: "think" }, { reasoning: "ing" }, { text: "answer" }],
      usage: { prompt_tokens: 10, completion_tokens: 5, reasoning_tokens: 2, cached_tokens: 4 },
    });
    const { result, parts } = await streamAll();

    expect(types(parts)).toEqual([
      "start",
      "start-step",
      "reasoning-start",
      "reasoning-delta",
      "reasoning-delta",
      "reasoning-end",
      "text-start",
      "text-delta",
      "text-end",
      "finish-step",
      "finish",
    ]);
    const reasoning = parts.flatMap((p) => (p.type === "reasoning-delta" ? [p.text] : [])).join("");
    expect(reasoning).toBe("thinking");
    expect(await result.reasoningText).toBe("thinking");
    expect(await result.text).toBe("answer");
    expect(await result.usage).toMatchObject({
      inputTokens: 10,
      outputTokens: 5,
      inputTokenDetails: { noCacheTokens: 6, cacheReadTokens: 4 },
      outputTokenDetails: { textTokens: 3, reasoningTokens: 2 },
    });
  });

  it("delivers a streamed tool call as a tool-call part with parsed input, then runs execute", async () => {
    const args = JSON.stringify({ filePath: "/a.txt" });
    fake.push({
      kind: "stream",
      chunks: [{ text: "Let me read." }, { toolCall: { id: "call_1", name: "read", arguments: args } }],
      usage: { prompt_tokens: 10, completion_tokens: 3 },
    });
    const { result, parts } = await streamAll({ tools: { read: readTool } });

    // Note: text-end comes after the tool input started (the provider closes text in flush()).
    expect(types(parts)).toEqual([
      "start",
      "start-step",
      "text-start",
      "text-delta",
      "tool-input-start",
      "tool-input-delta",
      "tool-input-delta",
      "text-end",
      "tool-input-end",
      "tool-call",
      "tool-result",
      "finish-step",
      "finish",
    ]);
    const deltas = parts.flatMap((p) => (p.type === "tool-input-delta" ? [p.delta] : []));
    expect(deltas).toHaveLength(2);
    expect(deltas.join("")).toBe(args);
    expect(parts.find((p) => p.type === "tool-input-start")).toMatchObject({ id: "call_1", toolName: "read" });
    expect(parts.find((p) => p.type === "tool-call")).toMatchObject({
      toolCallId: "call_1",
      toolName: "read",
      input: { filePath: "/a.txt" },
    });
    expect(parts.find((p) => p.type === "tool-result")).toMatchObject({
      toolCallId: "call_1",
      toolName: "read",
      input: { filePath: "/a.txt" },
      output: "contents of /a.txt",
    });
    expect(parts.at(-1)).toMatchObject({ type: "finish", finishReason: "tool-calls", rawFinishReason: "tool_calls" });

    // The tool definition was sent as an OpenAI function tool.
    expect(fake.requests[0].body.tools).toEqual([
      expect.objectContaining({ type: "function", function: expect.objectContaining({ name: "read", description: "Read a file" }) }),
    ]);
  });

  it("records the history the model saw on each step of a tool loop", async () => {
    fake.push(
      { kind: "stream", chunks: [{ toolCall: { id: "call_1", name: "read", arguments: '{"filePath":"/a.txt"}' } }] },
      { kind: "stream", chunks: [{ text: "done" }], usage: { prompt_tokens: 20, completion_tokens: 1 } },
    );
    const { result, parts } = await streamAll({
      system: "be brief",
      prompt: "read /a.txt",
      tools: { read: readTool },
      stopWhen: stepCountIs(5),
    });

    expect(types(parts)).toEqual([
      "start",
      "start-step",
      "tool-input-start",
      "tool-input-delta",
      "tool-input-delta",
      "tool-input-end",
      "tool-call",
      "tool-result",
      "finish-step",
      "start-step",
      "text-start",
      "text-delta",
      "text-end",
      "finish-step",
      "finish",
    ]);
    expect(await result.text).toBe("done");
    expect(fake.requests).toHaveLength(2);
    expect(fake.requests[0].body.messages).toEqual([
      { role: "system", content: "be brief" },
      { role: "user", content: "read /a.txt" },
    ]);
    expect(fake.requests[1].body.messages).toEqual([
      { role: "system", content: "be brief" },
      { role: "user", content: "read /a.txt" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: "read", arguments: '{"filePath":"/a.txt"}' } }],
      },
      { role: "tool", tool_call_id: "call_1", content: "contents of /a.txt" },
    ]);
  });

  it("surfaces a 401 as a non-retryable APICallError error part", async () => {
    fake.push({ kind: "error", status: 401 });
    const errors: unknown[] = [];
    const { result, parts } = await streamAll({ onError: ({ error }) => void errors.push(error) });

    expect(types(parts)).toEqual(["start", "error"]);
    const part = parts[1];
    if (part.type !== "error") throw new Error("expected an error part");
    expect(APICallError.isInstance(part.error)).toBe(true);
    expect(part.error).toMatchObject({ statusCode: 401, isRetryable: false, message: "Incorrect API key provided." });
    expect(errors).toEqual([part.error]);
    await expect(result.text).rejects.toSatisfy((e: unknown) => NoOutputGeneratedError.isInstance(e));
  });

  it("surfaces a 429 as a retryable APICallError with its headers", async () => {
    fake.push({ kind: "error", status: 429, headers: { "retry-after": "7" } });
    const { parts } = await streamAll({ onError: () => {} });

    expect(types(parts)).toEqual(["start", "error"]);
    const part = parts[1];
    if (part.type !== "error" || !APICallError.isInstance(part.error)) throw new Error("expected an APICallError part");
    expect(part.error.statusCode).toBe(429);
    expect(part.error.isRetryable).toBe(true);
    expect(part.error.responseHeaders?.["retry-after"]).toBe("7");
  });

  it("returns a custom error body as given", async () => {
    fake.push({
      kind: "error",
      status: 400,
      body: { error: { message: "context too long", type: "invalid_request_error", code: "context_length_exceeded" } },
    });
    const { parts } = await streamAll({ onError: () => {} });
    const part = parts.find((p) => p.type === "error");
    if (part?.type !== "error" || !APICallError.isInstance(part.error)) throw new Error("expected an APICallError part");
    expect(part.error).toMatchObject({ statusCode: 400, isRetryable: false, message: "context too long" });
    expect(part.error.data).toEqual({
      error: { message: "context too long", type: "invalid_request_error", code: "context_length_exceeded" },
    });
  });

  it("ends a hung stream with an abort part when the caller aborts", async () => {
    fake.push({ kind: "stream", chunks: [{ text: "partial" }, { hang: true }] });
    const controller = new AbortController();
    const result = streamText({ model: model(), prompt: "hi", maxRetries: 0, abortSignal: controller.signal });
    const parts = [];
    for await (const part of result.fullStream) {
      parts.push(part);
      if (part.type === "text-delta") controller.abort();
    }

    // No text-end, finish-step or finish after an abort.
    expect(types(parts)).toEqual(["start", "start-step", "text-start", "text-delta", "abort"]);
    expect(parts.at(-1)).toMatchObject({ type: "abort" });
    await expect(result.text).rejects.toMatchObject({ name: "AbortError" });
    expect(fake.requests).toHaveLength(1);
  });

  it("uses the fallback when the queue is empty (a 500 by default)", async () => {
    const { parts: first } = await streamAll({ onError: () => {} });
    expect(first.find((p) => p.type === "error")).toMatchObject({ error: { statusCode: 500, isRetryable: true } });

    fake.setFallback({ kind: "stream", chunks: [{ text: "again" }] });
    for (let i = 0; i < 2; i++) expect(await streamText({ model: model(), prompt: "hi", maxRetries: 0 }).text).toBe("again");
    expect(fake.requests).toHaveLength(3);
  });

  it("waits delayMs between chunks", async () => {
    fake.push({ kind: "stream", chunks: [{ text: "a" }, { text: "b" }], delayMs: 40 });
    const started = Date.now();
    expect(await streamText({ model: model(), prompt: "hi", maxRetries: 0 }).text).toBe("ab");
    // 5 events (2 text, finish, usage, [DONE]) => 4 gaps.
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
  });
});

describe("fake OpenAI server with generateText", () => {
  it("answers a non-streaming request from the same script", async () => {
    fake.push({
      kind: "stream",
      chunks: [{ reasoning: "hmm" }, { text: "Hello" }, { toolCall: { id: "call_9", name: "read", arguments: '{"filePath":"/z"}' } }],
      usage: { prompt_tokens: 5, completion_tokens: 7 },
    });
    const result = await generateText({ model: model(), prompt: "hi", maxRetries: 0, tools: { read: readTool } });

    expect(fake.requests[0].body.stream).not.toBe(true);
    expect(result.text).toBe("Hello");
    expect(result.reasoningText).toBe("hmm");
    expect(result.content.map((c) => c.type)).toEqual(["reasoning", "text", "tool-call", "tool-result"]);
    expect(result.toolCalls).toEqual([expect.objectContaining({ toolCallId: "call_9", toolName: "read", input: { filePath: "/z" } })]);
    expect(result.toolResults).toEqual([expect.objectContaining({ toolCallId: "call_9", output: "contents of /z" })]);
    expect(result.finishReason).toBe("tool-calls");
    expect(result.usage).toMatchObject({ inputTokens: 5, outputTokens: 7 });
  });

  it("throws the APICallError for an error reply", async () => {
    fake.push({ kind: "error", status: 401 });
    await expect(generateText({ model: model(), prompt: "hi", maxRetries: 0 })).rejects.toSatisfy(
      (e: unknown) => APICallError.isInstance(e) && e.statusCode === 401 && !e.isRetryable,
    );
  });
});

describe("close()", () => {
  it("resolves while a hung stream is still open; the client's fullStream then throws", async () => {
    const own = await startFakeOpenAI();
    own.push({ kind: "stream", chunks: [{ text: "partial" }, { hang: true }] });
    const errors: unknown[] = [];
    const local = createOpenAICompatible({ name: "local", baseURL: own.url, apiKey: "test" }).chatModel("m");
    const result = streamText({ model: local, prompt: "hi", maxRetries: 0, onError: ({ error }) => void errors.push(error) });
    const parts = [];
    let thrown: unknown;
    try {
      for await (const part of result.fullStream) {
        parts.push(part);
        if (part.type === "text-delta") await own.close();
      }
    } catch (error) {
      thrown = error;
    }
    // A connection lost mid-body is not an `error` part: iterating fullStream rejects.
    expect(types(parts)).toEqual(["start", "start-step", "text-start", "text-delta"]);
    expect(APICallError.isInstance(thrown)).toBe(true);
    expect(thrown).toMatchObject({ message: "Failed to process successful response", isRetryable: true });
    expect(errors).toEqual([]);
  });
});
