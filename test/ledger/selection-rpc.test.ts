// Model selection at the RPC boundary, on a real ledger (Postgres or PGlite) with a real
// openai-compatible provider pointed at the scripted fake OpenAI server:
// - a malformed `model` (empty provider or model id, a provider id with a slash) is refused with
//   INVALID_ARGUMENT naming the field, on every RPC that takes one, and nothing is stored;
// - a session whose last model is not configured (an explicitly requested unknown model, or the
//   model it was created with) does not stay stuck on it: a prompt without `model` falls back to
//   the configured default, while an explicit unknown model still ends in model_not_found.
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { AssistantMessage, MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { compatibleProvider, NO_RETRY } from "../support/mock-models.js";
import { connectError as rejection } from "../support/errors.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { storedEvents } from "../support/stored.js";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { text } from "../support/prompt.js";

let t: TestLedger;
let fake: FakeOpenAI;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  t = await startTestLedger({
    model: "local/qwen",
    retry: NO_RETRY,
    provider: { local: compatibleProvider(fake.url, { qwen: {}, other: {} }) },
    command: { hello: { template: "say hello to $ARGUMENTS" } },
  });
});
afterAll(async () => {
  await t?.close();
  await fake?.close();
});
beforeEach(() => {
  fake.setFallback({
    kind: "error",
    status: 500,
    body: { error: { message: "fake OpenAI: no scripted reply queued", type: "server_error", code: "no_script" } },
  });
});

async function newSession(model?: { providerId: string; modelId: string }): Promise<string> {
  return (await t.client.createSession({ directory: t.dir, model })).session!.id;
}

function assistantOf(message: MessageWithParts | undefined): AssistantMessage {
  const kind = message?.message?.kind;
  if (kind?.case !== "assistant") throw new Error(`expected an assistant message, got ${kind?.case}`);
  return kind.value;
}

async function eventKinds(sessionId: string): Promise<string[]> {
  return (await storedEvents(t.ledger.deps.db, sessionId)).map((e) => e.kind);
}

/** The `ledger_loop_steps_total` samples of the ledger's /metrics text. */
async function stepLines(): Promise<string> {
  const text = await t.ledger.deps.metrics!.scrape();
  return text
    .split("\n")
    .filter((line) => line.startsWith("ledger_loop_steps_total{"))
    .join("\n");
}

const show = (m: { providerId: string; modelId: string } | undefined) => (m ? `${m.providerId}/${m.modelId}` : undefined);

describe("a malformed model reference is INVALID_ARGUMENT naming the field, and nothing is stored", () => {
  const bad: Array<{ name: string; model: { providerId: string; modelId: string }; field: string }> = [
    { name: "empty provider id", model: { providerId: "", modelId: "qwen" }, field: "model.provider_id" },
    { name: "blank provider id", model: { providerId: "  ", modelId: "qwen" }, field: "model.provider_id" },
    { name: "empty model id", model: { providerId: "local", modelId: "" }, field: "model.model_id" },
    { name: "blank model id", model: { providerId: "local", modelId: " " }, field: "model.model_id" },
    { name: "provider id with a slash", model: { providerId: "local/qwen", modelId: "qwen" }, field: "model.provider_id" },
  ];
  const rpcs: Array<{ name: string; call: (sessionId: string, model: { providerId: string; modelId: string }) => Promise<unknown> }> = [
    { name: "Prompt", call: (sessionId, model) => t.client.prompt({ sessionId, model, parts: [text("hi")] }) },
    { name: "Prompt no_reply", call: (sessionId, model) => t.client.prompt({ sessionId, model, noReply: true, parts: [text("hi")] }) },
    {
      name: "PromptStream",
      call: async (sessionId, model) => {
        for await (const _ of t.client.promptStream({ sessionId, model, parts: [text("hi")] })) void _;
      },
    },
    { name: "PromptAsync", call: (sessionId, model) => t.client.promptAsync({ sessionId, model, parts: [text("hi")] }) },
    { name: "Command", call: (sessionId, model) => t.client.command({ sessionId, command: "hello", arguments: "you", model }) },
  ];
  for (const rpc of rpcs) {
    for (const c of bad) {
      it(`${rpc.name}: ${c.name}`, async () => {
        const sessionId = await newSession();
        const before = (await t.client.getSession({ sessionId })).session!;
        const eventsBefore = await eventKinds(sessionId);
        const requests = fake.requests.length;
        const error = await rejection(rpc.call(sessionId, c.model));
        expect(error.code, error.message).toBe(Code.InvalidArgument);
        expect(error.rawMessage).toContain(c.field);
        expect(error.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => v.field)).toContain(c.field);
        const after = (await t.client.getSession({ sessionId })).session!;
        expect(after.messageCount).toBe(0);
        expect(show(after.model)).toBe(show(before.model));
        expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
        expect(await eventKinds(sessionId)).toEqual(eventsBefore);
        expect(fake.requests.length).toBe(requests);
      });
    }
  }
});

describe("the session's last model is skipped when it is not configured", () => {
  it("after an explicit unknown model (model_not_found), a prompt without model answers with the default", async () => {
    const sessionId = await newSession();
    const requests = fake.requests.length;
    const failed = await t.client.prompt({ sessionId, model: { providerId: "fake", modelId: "nope" }, parts: [text("one")] });
    expect(assistantOf(failed.message).error?.kind.case).toBe("modelNotFound");
    expect(fake.requests.length).toBe(requests);
    // No model was called: no step is counted (the CLI's summary says "steps 0" alike).
    expect(await stepLines()).not.toMatch(/model="nope"/);

    fake.push({ kind: "stream", chunks: [{ text: "answered" }], usage: { prompt_tokens: 3, completion_tokens: 1 } });
    const answered = assistantOf((await t.client.prompt({ sessionId, parts: [text("two")] })).message);
    expect(answered.error?.message).toBeUndefined();
    expect(answered.finish).toBe("stop");
    expect(show(answered.model)).toBe("local/qwen");
    expect(fake.requests.at(-1)?.body.model).toBe("qwen");
    expect(show((await t.client.getSession({ sessionId })).session!.model)).toBe("local/qwen");
    expect(await stepLines()).toMatch(/^ledger_loop_steps_total\{provider="local",model="qwen",finish="stop"\} \d+$/m);
  });

  it("a session created with an unknown model answers with the default", async () => {
    const sessionId = await newSession({ providerId: "fake", modelId: "nope" });
    fake.push({ kind: "stream", chunks: [{ text: "answered" }] });
    const answered = assistantOf((await t.client.prompt({ sessionId, parts: [text("hi")] })).message);
    expect(answered.error?.message).toBeUndefined();
    expect(show(answered.model)).toBe("local/qwen");
  });

  it("a configured last model is still used over the default", async () => {
    const sessionId = await newSession();
    fake.push({ kind: "stream", chunks: [{ text: "first" }] }, { kind: "stream", chunks: [{ text: "second" }] });
    await t.client.prompt({ sessionId, model: { providerId: "local", modelId: "other" }, parts: [text("one")] });
    const second = assistantOf((await t.client.prompt({ sessionId, parts: [text("two")] })).message);
    expect(show(second.model)).toBe("local/other");
    expect(fake.requests.at(-1)?.body.model).toBe("other");
  });

  it("an explicit unknown model is still model_not_found, also when the last model was fine", async () => {
    const sessionId = await newSession();
    fake.push({ kind: "stream", chunks: [{ text: "fine" }] });
    await t.client.prompt({ sessionId, parts: [text("one")] });
    const requests = fake.requests.length;
    const failed = assistantOf(
      (await t.client.prompt({ sessionId, model: { providerId: "fake", modelId: "nope" }, parts: [text("two")] })).message,
    );
    expect(failed.error?.kind.case).toBe("modelNotFound");
    expect(failed.error?.message).toContain("local/qwen");
    expect(show(failed.model)).toBe("fake/nope");
    expect(fake.requests.length).toBe(requests);
  });
});
