import { writeFile } from "node:fs/promises";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { NO_RETRY, compatibleProvider } from "../support/mock-models.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { startFakeResponses, type FakeResponses } from "../support/openai-responses-server.js";
import { text } from "../support/prompt.js";
import { assistantOf, partView, storedMessages } from "../support/stored.js";
import { waitFor } from "../support/wait.js";

// OpenAI reasoning models through the real service: @ai-sdk/openai (Responses API, its default)
// against a local server speaking the Responses streaming protocol that checks, like the real
// API, the item references, encrypted reasoning and function call outputs it is sent back.

let t: TestLedger;
let openai: FakeResponses;
let local: FakeOpenAI;

beforeAll(async () => {
  openai = await startFakeResponses();
  local = await startFakeOpenAI();
  const options = { baseURL: openai.url, apiKey: "test" };
  t = await startTestLedger({
    model: "openai/gpt-5",
    provider: {
      openai: { npm: "@ai-sdk/openai", options, models: { "gpt-5": {} } },
      // Zero data retention: nothing stored at OpenAI, reasoning comes back as encrypted content.
      zdr: { npm: "@ai-sdk/openai", options, models: { "gpt-5": { options: { store: false } } } },
      local: compatibleProvider(local.url, { qwen: {} }, "test"),
    },
    retry: NO_RETRY,
  });
  await writeFile(path.join(t.dir, "notes.txt"), "hello from notes\n");
});
afterEach(() => {
  openai.reset();
  local.reset();
});
afterAll(async () => {
  await t?.close();
  await openai?.close();
  await local?.close();
});

type Entry = Record<string, unknown>;
const READ = { name: "read", arguments: { filePath: "notes.txt" } };
const newSession = async () => (await t.client.createSession({ directory: t.dir })).session!.id;
/** The input items of request `i` after the system message. */
const input = (i: number) => (openai.requests[i]!.body.input as Entry[]).filter((e) => e.role !== "system" && e.role !== "developer");
const ref = (id: string) => ({ type: "item_reference", id });
const user = (words: string) => ({ role: "user", content: [{ type: "input_text", text: words }] });
const call = (callId: string) => ({ type: "function_call", call_id: callId, name: "read", arguments: JSON.stringify(READ.arguments) });
const output = (callId: string) => ({
  type: "function_call_output",
  call_id: callId,
  output: expect.stringContaining("1: hello from notes"),
});

async function prompt(sessionId: string, words: string, model?: { providerId: string; modelId: string }) {
  const res = await t.client.prompt({ sessionId, model, parts: [text(words)] });
  return assistantOf(res.message);
}

describe("reasoning and function calls across steps and turns", () => {
  it("stores item ids and sends reasoning and answers back as item references, with each function call's output", async () => {
    const before = openai.requests.length;
    const first = openai.issued.length;
    openai.push(
      { kind: "stream", items: [{ reasoning: ["Need the notes."] }, { functionCall: { callId: "call_1", ...READ } }] },
      { kind: "stream", items: [{ reasoning: [] }, { text: "The notes say hello." }] },
      { kind: "stream", items: [{ reasoning: ["Already answered."] }, { text: "Nothing more." }] },
    );
    const sessionId = await newSession();
    expect((await prompt(sessionId, "what do the notes say?"))?.error).toBeUndefined();
    expect((await prompt(sessionId, "anything else?"))?.error).toBeUndefined();
    expect(openai.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined, undefined]);
    const [rs1, fc1, rs2, msg1] = openai.issued.slice(first).map((i) => i.id);

    const messages = await storedMessages(t.client, sessionId);
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant", "user", "assistant"]);
    expect(messages[1]!.parts.map(partView)).toEqual([
      { kind: "stepStart" },
      { kind: "reasoning", text: "Need the notes.", metadata: { openai: { itemId: rs1, reasoningEncryptedContent: null } } },
      { kind: "tool", callId: "call_1", tool: "read", status: "completed", metadata: { openai: { itemId: fc1 } } },
      { kind: "stepFinish" },
    ]);
    // A reasoning item without summary: empty text, its item id (no encrypted content was asked for).
    expect(messages[2]!.parts.map(partView)).toEqual([
      { kind: "stepStart" },
      { kind: "reasoning", text: "", metadata: { openai: { itemId: rs2, reasoningEncryptedContent: null } } },
      { kind: "text", text: "The notes say hello.", metadata: { openai: { itemId: msg1 } } },
      { kind: "stepFinish" },
    ]);

    expect(input(before + 1)).toEqual([user("what do the notes say?"), ref(rs1!), call("call_1"), output("call_1")]);
    expect(input(before + 2)).toEqual([
      user("what do the notes say?"),
      ref(rs1!),
      call("call_1"),
      output("call_1"),
      ref(rs2!),
      ref(msg1!),
      user("anything else?"),
    ]);
  });

  it("with store: false, sends each reasoning item back inline with the encrypted content it was given", async () => {
    const before = openai.requests.length;
    const first = openai.issued.length;
    openai.push(
      { kind: "stream", items: [{ reasoning: ["Need the notes."] }, { functionCall: { callId: "call_2", ...READ } }] },
      { kind: "stream", items: [{ reasoning: [] }, { text: "Hello." }] },
      { kind: "stream", items: [{ reasoning: [] }, { text: "Bye." }] },
    );
    const sessionId = await newSession();
    const zdr = { providerId: "zdr", modelId: "gpt-5" };
    expect((await prompt(sessionId, "read the notes", zdr))?.error).toBeUndefined();
    expect((await prompt(sessionId, "thanks", zdr))?.error).toBeUndefined();
    expect(openai.requests.slice(before).map((r) => [r.rejected, r.body.store, r.body.include])).toEqual(
      Array(3).fill([undefined, false, ["reasoning.encrypted_content"]]),
    );
    const [rs1, fc1, rs2, msg1] = openai.issued.slice(first);

    const messages = await storedMessages(t.client, sessionId);
    expect(messages[1]!.parts.map(partView).slice(1, 3)).toEqual([
      { kind: "reasoning", text: "Need the notes.", metadata: { openai: { itemId: rs1!.id, reasoningEncryptedContent: rs1!.encrypted } } },
      { kind: "tool", callId: "call_2", tool: "read", status: "completed", metadata: { openai: { itemId: fc1!.id } } },
    ]);
    expect(messages[2]!.parts.map(partView)[1]).toEqual({
      kind: "reasoning",
      text: "",
      metadata: { openai: { itemId: rs2!.id, reasoningEncryptedContent: rs2!.encrypted } },
    });

    const reasoning = (item: typeof rs1, summary: string[]) => ({
      type: "reasoning",
      id: item!.id,
      encrypted_content: item!.encrypted,
      summary: summary.map((s) => ({ type: "summary_text", text: s })),
    });
    expect(input(before + 2)).toEqual([
      user("read the notes"),
      reasoning(rs1, ["Need the notes."]),
      call("call_2"),
      output("call_2"),
      reasoning(rs2, []),
      { role: "assistant", content: [{ type: "output_text", text: "Hello." }], id: msg1!.id },
      user("thanks"),
    ]);
  });
});

describe("a turn that ends in a provider error leaves a usable session", () => {
  it("answers the next prompt after the step following a function call failed", async () => {
    const before = openai.requests.length;
    const first = openai.issued.length;
    openai.push(
      { kind: "stream", items: [{ reasoning: [] }, { functionCall: { callId: "call_3", ...READ } }] },
      {
        kind: "stream",
        items: [
          { reasoning: ["Hmm."] },
          { fail: { code: "server_error", message: "The server had an error while processing your request." } },
        ],
      },
      { kind: "stream", items: [{ reasoning: [] }, { text: "Hello." }] },
    );
    const sessionId = await newSession();
    expect((await prompt(sessionId, "what do the notes say?"))?.error).toMatchObject({
      message: "The server had an error while processing your request.",
      kind: { case: "unknown" },
    });
    expect((await prompt(sessionId, "try again"))?.error).toBeUndefined();
    expect(openai.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined, undefined]);
    const [rs1] = openai.issued.slice(first).map((i) => i.id);
    // The failed step produced only reasoning: it is not sent (a reasoning item needs its following item).
    expect(input(before + 2)).toEqual([user("what do the notes say?"), ref(rs1!), call("call_3"), output("call_3"), user("try again")]);
  });

  it("answers the next prompt after a step aborted once its reasoning item was done", async () => {
    const before = openai.requests.length;
    openai.push(
      { kind: "stream", items: [{ reasoning: ["Thinking it over."] }, { hang: true }] },
      { kind: "stream", items: [{ reasoning: [] }, { text: "Short answer." }] },
    );
    const sessionId = await newSession();
    const first = t.client.prompt({ sessionId, parts: [text("think")] });
    await waitFor("the finished reasoning part", async () =>
      (await storedMessages(t.client, sessionId))[1]?.parts.some((p) => p.kind.case === "reasoning" && p.kind.value.time?.end),
    );
    expect((await t.client.abort({ sessionId })).aborted).toBe(true);
    expect(assistantOf((await first).message)?.error?.kind.case).toBe("aborted");
    expect((await prompt(sessionId, "just answer"))?.error).toBeUndefined();
    expect(openai.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined]);
    expect(input(before + 1)).toEqual([user("think"), user("just answer")]);
  });
});

describe("switching provider", () => {
  it("sends an OpenAI turn to another provider without item ids", async () => {
    openai.push(
      { kind: "stream", items: [{ reasoning: ["Reading."] }, { functionCall: { callId: "call_4", ...READ } }] },
      { kind: "stream", items: [{ reasoning: [] }, { text: "Hello." }] },
    );
    local.push({ kind: "stream", chunks: [{ text: "Local answer." }] });
    const sessionId = await newSession();
    expect((await prompt(sessionId, "read the notes"))?.error).toBeUndefined();
    expect((await prompt(sessionId, "and you?", { providerId: "local", modelId: "qwen" }))?.error).toBeUndefined();
    const sent = JSON.stringify(local.requests.at(-1)!.body);
    expect(sent).not.toMatch(/rs_fake|fc_fake|msg_fake|itemId/);
    expect(
      (local.requests.at(-1)!.body.messages as Array<{ role: string; reasoning_content?: string }>)
        .filter((m) => m.role === "assistant")
        .map((m) => m.reasoning_content),
    ).toEqual(["Reading.", undefined]);
  });
});

describe("the fake enforces the Responses API's rules", () => {
  const post = (body: unknown) =>
    fetch(`${openai.url}/responses`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

  it("rejects a reference to an unknown item, a lone reasoning item, and a function call without output", async () => {
    const unknown = await post({ model: "gpt-5", input: [ref("rs_nope")] });
    expect([unknown.status, ((await unknown.json()) as { error: { message: string } }).error.message]).toEqual([
      404,
      expect.stringMatching(/^Item with id 'rs_nope' not found\./),
    ]);
    openai.push({ kind: "stream", items: [{ reasoning: [] }, { text: "Hi." }] });
    await (await post({ model: "gpt-5", stream: true, input: [user("hi")] })).text();
    const rs = openai.issued.at(-2)!;
    const lone = await post({ model: "gpt-5", input: [user("hi"), ref(rs.id)] });
    expect(((await lone.json()) as { error: { message: string } }).error.message).toBe(
      `Item '${rs.id}' of type 'reasoning' was provided without its required following item.`,
    );
    const dangling = await post({ model: "gpt-5", input: [user("hi"), call("call_x")] });
    expect([dangling.status, ((await dangling.json()) as { error: { message: string } }).error.message]).toEqual([
      400,
      "No tool output found for function call call_x.",
    ]);
  });
});
