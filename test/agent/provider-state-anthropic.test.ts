import { writeFile } from "node:fs/promises";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { NO_RETRY, compatibleProvider } from "../support/mock-models.js";
import { startFakeAnthropic, type FakeAnthropic } from "../support/anthropic-server.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { assistantOf, partView, storedMessages } from "../support/stored.js";
import { waitFor } from "../support/wait.js";

// Anthropic extended thinking through the real service: @ai-sdk/anthropic against a local server
// speaking the Messages streaming protocol that checks, like the real API, that every thinking
// block comes back with the signature it issued and that a tool loop's assistant turn starts
// with its thinking block.

let t: TestLedger;
let claude: FakeAnthropic;
let local: FakeOpenAI;

beforeAll(async () => {
  claude = await startFakeAnthropic();
  local = await startFakeOpenAI();
  t = await startTestLedger({
    model: "claude/sonnet",
    provider: {
      claude: {
        npm: "@ai-sdk/anthropic",
        options: { baseURL: claude.url, apiKey: "test" },
        models: { sonnet: { options: { thinking: { type: "enabled", budgetTokens: 2048 } } } },
      },
      local: compatibleProvider(local.url, { qwen: {} }, "test"),
    },
    retry: NO_RETRY,
  });
  await writeFile(path.join(t.dir, "notes.txt"), "hello from notes\n");
});
afterEach(() => {
  claude.reset();
  local.reset();
});
afterAll(async () => {
  await t?.close();
  await claude?.close();
  await local?.close();
});

const newSession = async () => (await t.client.createSession({ directory: t.dir })).session!.id;
const READ = { name: "read", input: { filePath: "notes.txt" } };
const signed = (thinking: string) => ({ anthropic: { signature: claude.signature(thinking) } });
type Block = { type: string; [key: string]: unknown };
const sent = (i: number) => claude.requests[i]!.body.messages as Array<{ role: string; content: Block[] }>;

async function prompt(sessionId: string, words: string, model?: { providerId: string; modelId: string }) {
  const res = await t.client.prompt({ sessionId, model, parts: [text(words)] });
  return assistantOf(res.message);
}

describe("thinking with a tool call, across steps and turns", () => {
  it("stores each thinking block's signature and sends it back, so the step after the tool result and the next turn succeed", async () => {
    const before = claude.requests.length;
    claude.push(
      { kind: "stream", blocks: [{ thinking: "I should read the notes." }, { toolUse: { id: "toolu_1", ...READ } }] },
      { kind: "stream", blocks: [{ thinking: "The file greets us." }, { text: "The notes say hello." }] },
      { kind: "stream", blocks: [{ thinking: "Nothing else to read." }, { text: "That is all." }] },
    );
    const sessionId = await newSession();
    expect((await prompt(sessionId, "what do the notes say?"))?.error).toBeUndefined();
    expect((await prompt(sessionId, "anything else?"))?.error).toBeUndefined();
    expect(claude.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined, undefined]);

    const messages = await storedMessages(t.client, sessionId);
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant", "user", "assistant"]);
    expect(messages[1]!.parts.map(partView)).toEqual([
      { kind: "stepStart" },
      { kind: "reasoning", text: "I should read the notes.", metadata: signed("I should read the notes.") },
      { kind: "tool", callId: "toolu_1", tool: "read", status: "completed", metadata: undefined },
      { kind: "stepFinish" },
    ]);
    expect(messages[2]!.parts.map(partView)).toEqual([
      { kind: "stepStart" },
      { kind: "reasoning", text: "The file greets us.", metadata: signed("The file greets us.") },
      { kind: "text", text: "The notes say hello.", metadata: undefined },
      { kind: "stepFinish" },
    ]);
    expect(messages[4]!.parts.map(partView)[1]).toEqual({
      kind: "reasoning",
      text: "Nothing else to read.",
      metadata: signed("Nothing else to read."),
    });

    // The step after the tool result: the tool_use turn starts with its signed thinking block.
    expect(sent(before + 1).slice(1)).toEqual([
      {
        role: "assistant",
        content: [
          { type: "thinking", thinking: "I should read the notes.", signature: claude.signature("I should read the notes.") },
          { type: "tool_use", id: "toolu_1", name: "read", input: { filePath: "notes.txt" } },
        ],
      },
      { role: "user", content: [expect.objectContaining({ type: "tool_result", tool_use_id: "toolu_1" })] },
    ]);
    // The next turn sends both earlier steps' thinking blocks back, signed.
    const thinking = sent(before + 2).flatMap((m) => m.content.filter((b) => b.type === "thinking"));
    expect(thinking).toEqual([
      { type: "thinking", thinking: "I should read the notes.", signature: claude.signature("I should read the notes.") },
      { type: "thinking", thinking: "The file greets us.", signature: claude.signature("The file greets us.") },
    ]);
  });

  it("stores redacted thinking (empty text, the opaque data) and passes it back verbatim", async () => {
    const before = claude.requests.length;
    const issued = claude.redacted.length;
    claude.push(
      { kind: "stream", blocks: [{ redacted: true }, { toolUse: { id: "toolu_2", ...READ } }] },
      { kind: "stream", blocks: [{ redacted: true }, { text: "Done." }] },
      { kind: "stream", blocks: [{ thinking: "Fine." }, { text: "Still done." }] },
    );
    const sessionId = await newSession();
    expect((await prompt(sessionId, "read the notes"))?.error).toBeUndefined();
    expect((await prompt(sessionId, "and now?"))?.error).toBeUndefined();
    expect(claude.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined, undefined]);

    const [first, second] = claude.redacted.slice(issued);
    const messages = await storedMessages(t.client, sessionId);
    expect(messages[1]!.parts.map(partView)).toEqual([
      { kind: "stepStart" },
      { kind: "reasoning", text: "", metadata: { anthropic: { redactedData: first } } },
      { kind: "tool", callId: "toolu_2", tool: "read", status: "completed", metadata: undefined },
      { kind: "stepFinish" },
    ]);
    expect(messages[2]!.parts.map(partView)[1]).toEqual({ kind: "reasoning", text: "", metadata: { anthropic: { redactedData: second } } });
    expect(sent(before + 1)[1]!.content[0]).toEqual({ type: "redacted_thinking", data: first });
    const redacted = sent(before + 2).flatMap((m) => m.content.filter((b) => b.type === "redacted_thinking"));
    expect(redacted).toEqual([
      { type: "redacted_thinking", data: first },
      { type: "redacted_thinking", data: second },
    ]);
  });
});

describe("a turn that ends in a provider error leaves a usable session", () => {
  it("answers the next prompt after the step following a tool call failed (overloaded)", async () => {
    const before = claude.requests.length;
    claude.push(
      { kind: "stream", blocks: [{ thinking: "Read first." }, { toolUse: { id: "toolu_3", ...READ } }] },
      { kind: "error", status: 529, type: "overloaded_error", message: "Overloaded" },
      { kind: "stream", blocks: [{ thinking: "Try again." }, { text: "Hello from the notes." }] },
    );
    const sessionId = await newSession();
    expect((await prompt(sessionId, "what do the notes say?"))?.error?.kind.case).toBe("api");
    expect((await prompt(sessionId, "please try again"))?.error).toBeUndefined();
    expect(claude.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined, undefined]);
    // The unfinished tool loop is continued by the new prompt: its turn starts with the signed thinking.
    const messages = sent(before + 2);
    expect(messages.map((m) => m.content.map((b) => b.type))).toEqual([["text"], ["thinking", "tool_use"], ["tool_result", "text"]]);
  });

  it("answers the next prompt after a stream that failed right after its thinking block (overloaded_error event)", async () => {
    const before = claude.requests.length;
    claude.push(
      { kind: "stream", blocks: [{ thinking: "Almost there." }, { error: { type: "overloaded_error", message: "Overloaded" } }] },
      { kind: "stream", blocks: [{ thinking: "Now." }, { text: "Done." }] },
    );
    const sessionId = await newSession();
    expect((await prompt(sessionId, "go"))?.error).toMatchObject({ message: "Overloaded", kind: { case: "unknown" } });
    expect((await prompt(sessionId, "go on"))?.error).toBeUndefined();
    expect(claude.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined]);
    // The signed thinking led to nothing: it is not sent on its own.
    expect(sent(before + 1).map((m) => m.role)).toEqual(["user"]);
  });

  it("answers the next prompt after a step aborted in the middle of a thinking block (no signature yet)", async () => {
    const before = claude.requests.length;
    // The stream hangs after the deltas: the stored text catches up within one snapshot interval.
    claude.push(
      { kind: "stream", blocks: [{ thinking: "Let me think about", cut: true }] },
      { kind: "stream", blocks: [{ thinking: "Short." }, { text: "Answer." }] },
    );
    const sessionId = await newSession();
    const first = t.client.prompt({ sessionId, parts: [text("think hard")] });
    const thinking = async () =>
      (await storedMessages(t.client, sessionId))[1]?.parts.flatMap((p) => (p.kind.case === "reasoning" ? [p.kind.value.text] : []))[0];
    await waitFor("the whole unsigned thinking text", async () => (await thinking()) === "Let me think about");
    expect((await t.client.abort({ sessionId })).aborted).toBe(true);
    expect(assistantOf((await first).message)?.error?.kind.case).toBe("aborted");
    expect((await prompt(sessionId, "again, briefly"))?.error).toBeUndefined();
    expect(claude.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined]);

    const messages = await storedMessages(t.client, sessionId);
    // The unfinished thinking block keeps its text, but no provider state; it is not sent back.
    expect(messages[1]!.parts.map(partView)).toEqual([
      { kind: "stepStart" },
      { kind: "reasoning", text: "Let me think about", metadata: undefined },
    ]);
    expect(sent(before + 1)).toEqual([
      { role: "user", content: [expect.objectContaining({ text: "think hard" }), expect.objectContaining({ text: "again, briefly" })] },
    ]);
  });
});

describe("switching provider", () => {
  it("sends another provider's turn without the signatures, and the signatures again when Anthropic answers next", async () => {
    const before = claude.requests.length;
    claude.push(
      { kind: "stream", blocks: [{ thinking: "Reading." }, { toolUse: { id: "toolu_4", ...READ } }] },
      { kind: "stream", blocks: [{ thinking: "Got it." }, { text: "It says hello." }] },
      { kind: "stream", blocks: [{ thinking: "Back again." }, { text: "Yes." }] },
    );
    local.push({ kind: "stream", chunks: [{ text: "From the local model." }] });
    const sessionId = await newSession();
    expect((await prompt(sessionId, "read the notes"))?.error).toBeUndefined();
    expect((await prompt(sessionId, "and you?", { providerId: "local", modelId: "qwen" }))?.error).toBeUndefined();
    const other = local.requests.at(-1)!.body;
    expect(JSON.stringify(other)).not.toContain("sig_");
    expect(
      (other.messages as Array<{ role: string; reasoning_content?: string }>)
        .filter((m) => m.role === "assistant")
        .map((m) => m.reasoning_content),
    ).toEqual(["Reading.", "Got it."]);

    expect((await prompt(sessionId, "back to you", { providerId: "claude", modelId: "sonnet" }))?.error).toBeUndefined();
    expect(claude.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined, undefined]);
    const thinking = sent(before + 2).flatMap((m) => m.content.filter((b) => b.type === "thinking").map((b) => b.thinking));
    expect(thinking).toEqual(["Reading.", "Got it."]);
  });
});

describe("the fake enforces the Messages API's rules", () => {
  const post = async (messages: unknown[]) => {
    const res = await fetch(`${claude.url}/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "claude-fake",
        max_tokens: 4096,
        stream: true,
        thinking: { type: "enabled", budget_tokens: 2048 },
        messages,
      }),
    });
    return [res.status, ((await res.json()) as { error: { message: string } }).error.message];
  };
  const user = { role: "user", content: [{ type: "text", text: "hi" }] };
  const use = { type: "tool_use", id: "toolu_x", name: "read", input: {} };
  const result = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_x", content: "x" }] };

  it("rejects a tool loop without its thinking block, a forged signature, and a tool_use without its result", async () => {
    expect(await post([user, { role: "assistant", content: [use] }, result])).toEqual([
      400,
      expect.stringContaining("a final `assistant` message must start with a thinking block"),
    ]);
    const forged = { type: "thinking", thinking: "x", signature: "sig_forged" };
    expect(await post([user, { role: "assistant", content: [forged, use] }, result])).toEqual([
      400,
      "messages.1.content.0: Invalid `signature` in `thinking` block",
    ]);
    expect(await post([user, { role: "assistant", content: [use] }, user])).toEqual([
      400,
      expect.stringContaining("`tool_use` ids were found without `tool_result` blocks immediately after: toolu_x"),
    ]);
  });
});
