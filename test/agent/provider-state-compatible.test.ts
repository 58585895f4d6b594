import { writeFile } from "node:fs/promises";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { NO_RETRY, compatibleProvider } from "../support/mock-models.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { assistantOf, partView, storedMessages } from "../support/stored.js";

// A reasoning model behind @ai-sdk/openai-compatible (DeepSeek-style `reasoning_content`) through
// the real service, against the local chat-completions server in thinking mode: every assistant
// tool-call message must come back with its `reasoning_content`, as DeepSeek requires.

let t: TestLedger;
let deepseek: FakeOpenAI;

beforeAll(async () => {
  deepseek = await startFakeOpenAI({ thinking: true });
  t = await startTestLedger({
    model: "deepseek/reasoner",
    provider: {
      deepseek: compatibleProvider(deepseek.url, { reasoner: {} }, "test"),
    },
    retry: NO_RETRY,
  });
  await writeFile(path.join(t.dir, "notes.txt"), "hello from notes\n");
});
afterEach(() => deepseek.reset());
afterAll(async () => {
  await t?.close();
  await deepseek?.close();
});

type Message = { role: string; content?: unknown; reasoning_content?: string; tool_calls?: unknown[] };
const READ = { id: "call_1", name: "read", arguments: JSON.stringify({ filePath: "notes.txt" }) };
const newSession = async () => (await t.client.createSession({ directory: t.dir })).session!.id;
const sent = (i: number) => deepseek.requests[i]!.body.messages as Message[];
const reasoningSent = (i: number) =>
  sent(i)
    .filter((m) => m.role === "assistant")
    .map((m) => m.reasoning_content);

async function prompt(sessionId: string, words: string) {
  return assistantOf((await t.client.prompt({ sessionId, parts: [text(words)] })).message);
}

describe("reasoning_content across steps and turns", () => {
  it("stores the reasoning and sends it back as reasoning_content with each tool-call step", async () => {
    const before = deepseek.requests.length;
    deepseek.push(
      { kind: "stream", chunks: [{ reasoning: "Need the notes." }, { toolCall: READ }] },
      { kind: "stream", chunks: [{ reasoning: "It greets." }, { text: "The notes say hello." }] },
      { kind: "stream", chunks: [{ reasoning: "Done." }, { text: "Nothing more." }] },
    );
    const sessionId = await newSession();
    expect((await prompt(sessionId, "what do the notes say?"))?.error).toBeUndefined();
    expect((await prompt(sessionId, "anything else?"))?.error).toBeUndefined();
    expect(deepseek.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined, undefined]);

    const messages = await storedMessages(t.client, sessionId);
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant", "user", "assistant"]);
    expect(messages[1]!.parts.map(partView)).toEqual([
      { kind: "stepStart" },
      { kind: "reasoning", text: "Need the notes.", metadata: undefined },
      { kind: "tool", callId: "call_1", tool: "read", status: "completed", metadata: undefined },
      { kind: "stepFinish" },
    ]);
    expect(messages[2]!.parts.map(partView)).toEqual([
      { kind: "stepStart" },
      { kind: "reasoning", text: "It greets.", metadata: undefined },
      { kind: "text", text: "The notes say hello.", metadata: undefined },
      { kind: "stepFinish" },
    ]);

    expect(sent(before + 1).slice(2)).toEqual([
      {
        role: "assistant",
        content: null,
        reasoning_content: "Need the notes.",
        tool_calls: [{ id: "call_1", type: "function", function: { name: "read", arguments: READ.arguments } }],
      },
      { role: "tool", tool_call_id: "call_1", content: expect.stringContaining("1: hello from notes") },
    ]);
    expect(reasoningSent(before + 2)).toEqual(["Need the notes.", "It greets."]);
  });

  it("answers the next prompt after the step following a tool call failed", async () => {
    const before = deepseek.requests.length;
    deepseek.push(
      { kind: "stream", chunks: [{ reasoning: "Read it." }, { toolCall: READ }] },
      { kind: "error", status: 503 },
      { kind: "stream", chunks: [{ reasoning: "Again." }, { text: "Hello." }] },
    );
    const sessionId = await newSession();
    expect((await prompt(sessionId, "what do the notes say?"))?.error?.kind.case).toBe("api");
    expect((await prompt(sessionId, "try again"))?.error).toBeUndefined();
    expect(deepseek.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined, undefined]);
    expect(
      sent(before + 2)
        .slice(1)
        .map((m) => [m.role, m.reasoning_content]),
    ).toEqual([
      ["user", undefined],
      ["assistant", "Read it."],
      ["tool", undefined],
      ["user", undefined],
    ]);
  });

  it("the fake rejects a tool-call message sent back without its reasoning_content, as DeepSeek does", async () => {
    const res = await fetch(`${deepseek.url}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "reasoner",
        messages: [
          { role: "user", content: "hi" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "call_9", type: "function", function: { name: "read", arguments: "{}" } }],
          },
          { role: "tool", tool_call_id: "call_9", content: "x" },
        ],
      }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(
      /^Missing `reasoning_content` field in the assistant message at message index 1\./,
    );
  });
});
