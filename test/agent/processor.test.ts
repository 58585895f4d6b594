import type { LanguageModelV3, LanguageModelV3StreamPart, LanguageModelV3StreamResult } from "@ai-sdk/provider";
import { MockLanguageModelV3 } from "ai/test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ReasoningPart, TextPart } from "../../gen/ledger/v1/part_pb.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import {
  mockResolver,
  reasoningParts,
  reply,
  scriptedModel,
  textParts,
  textReply,
  type ModelKey,
  NO_RETRY,
} from "../support/mock-models.js";
import { text } from "../support/prompt.js";
import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { MessageSchema } from "../../gen/ledger/v1/message_pb.js";
import type { LoopEvent } from "../../src/agent/ai-sdk-events.js";
import { processStep } from "../../src/agent/processor.js";
import { newId } from "../../src/ids.js";
import { sessionLedger, type SessionLedger } from "../../src/ledger/session-ledger.js";
import { assistantOf, storedMessages } from "../support/stored.js";
import { waitFor } from "../support/wait.js";

// How processStep keeps provider metadata, through the real service with the AI SDK's
// MockLanguageModelV3 as the model (see loop.test.ts for the rest of the loop).

const models: Partial<Record<ModelKey, LanguageModelV3>> = {};
let t: TestLedger;

beforeAll(async () => {
  t = await startTestLedger({ model: "mock/model", retry: NO_RETRY }, { models: mockResolver(models) });
});
afterAll(async () => {
  await t?.close();
});

async function run(script: LanguageModelV3StreamResult[], words: string) {
  const mock = scriptedModel(script);
  models["mock/model"] = mock;
  const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  await t.client.prompt({ sessionId, parts: [text(words)] });
  const { messages } = await t.client.listMessages({ sessionId });
  return { mock, messages, sessionId };
}

const meta = (value: string) => ({ mock: { signature: value } });

describe("provider metadata of streamed blocks", () => {
  it("keeps metadata that arrives on a delta (an Anthropic signature), the latest replacing earlier ones", async () => {
    const parts = reasoningParts("thinking", "r1", meta("start"));
    parts.splice(
      -1,
      1,
      { type: "reasoning-delta", id: "r1", delta: "", providerMetadata: meta("sig-delta") },
      { type: "reasoning-end", id: "r1" },
    );
    const { mock, messages, sessionId } = await run([reply([...parts, ...textParts("Yes.")], "stop"), textReply("again")], "one");
    expect(messages[1]!.parts.map((p) => p.kind.case)).toEqual(["stepStart", "reasoning", "text", "stepFinish"]);
    expect((messages[1]!.parts[1]!.kind.value as ReasoningPart).metadata).toEqual(meta("sig-delta"));
    await t.client.prompt({ sessionId, parts: [text("two")] });
    expect(mock.doStreamCalls[1]!.prompt[2]).toEqual({
      role: "assistant",
      content: [
        { type: "reasoning", text: "thinking", providerOptions: meta("sig-delta") },
        { type: "text", text: "Yes." },
      ],
    });
  });

  it("drops the metadata of a block cut off before its end; its text stays", async () => {
    const cut = reply(
      [...textParts("Partial", "t1", meta("item")).slice(0, -1), { type: "error", error: new Error("stream broke") }],
      "other",
    );
    const { messages } = await run([cut], "go");
    expect(assistantOf(messages[1])?.error?.kind.case).toBe("unknown");
    const part = messages[1]!.parts.find((p) => p.kind.case === "text")!.kind.value as TextPart;
    expect(part.text).toBe("Partial");
    expect(part.metadata).toBeUndefined();
  });
});

describe("snapshots of a streaming block", () => {
  it("stores the text that arrived in the last 100 ms once the interval has passed, while the model is still silent", async () => {
    // Two deltas right after the block's start (both within SNAPSHOT_INTERVAL_MS of its first
    // write), then the model goes quiet without ending the block: the stored text must not stay
    // behind the live deltas until the step ends.
    models["mock/model"] = new MockLanguageModelV3({
      doStream: async ({ abortSignal }) => ({
        stream: new ReadableStream<LanguageModelV3StreamPart>({
          start(controller) {
            controller.enqueue({ type: "stream-start", warnings: [] });
            controller.enqueue({ type: "reasoning-start", id: "r1" });
            controller.enqueue({ type: "reasoning-delta", id: "r1", delta: "Let me " });
            controller.enqueue({ type: "reasoning-delta", id: "r1", delta: "think" });
            // Silent until aborted, as a provider's connection is.
            abortSignal?.addEventListener("abort", () => controller.error(abortSignal.reason));
          },
        }),
      }),
    });
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const first = t.client.prompt({ sessionId, parts: [text("think")] });
    const stored = async () =>
      (await storedMessages(t.client, sessionId))[1]?.parts.flatMap((p) => (p.kind.case === "reasoning" ? [p.kind.value.text] : []))[0];
    expect(
      await waitFor("the stored reasoning text to catch up", async () => ((await stored()) === "Let me think" ? true : undefined), 5_000),
    ).toBe(true);
    expect((await t.client.abort({ sessionId })).aborted).toBe(true);
    const answer = assistantOf((await first).message);
    expect(answer?.error?.kind.case).toBe("aborted");
    const parts = (await storedMessages(t.client, sessionId))[1]!.parts;
    expect(parts.map((p) => p.kind.case)).toEqual(["stepStart", "reasoning"]);
    const reasoning = parts[1]!.kind.value as ReasoningPart;
    expect(reasoning.text).toBe("Let me think");
    expect(reasoning.time?.end).toBeDefined();
  });
});

/** A new session with an open assistant message, for driving processStep directly: its ledger and ids. */
async function openAnswer(): Promise<{ sessionId: string; ledger: SessionLedger; messageId: string }> {
  const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  const ledger = sessionLedger(t.ledger.deps, sessionId);
  const messageId = newId("msg");
  await ledger.addMessage(
    create(MessageSchema, {
      kind: {
        case: "assistant",
        value: { id: messageId, sessionId, agent: "build", path: { cwd: t.dir, root: t.dir }, time: { created: timestampNow() } },
      },
    }),
  );
  return { sessionId, ledger, messageId };
}

describe("a trailing snapshot whose write fails", () => {
  it("fails nothing: the next write stores the whole text, and the block ends with time.end (the review of 2026-12-04)", async () => {
    const { sessionId, ledger: real, messageId } = await openAnswer();
    // The real ledger, whose second part write (the trailing snapshot's) fails once, as a dropped connection would.
    let writes = 0;
    const ledger: SessionLedger = {
      ...real,
      savePart: async (part) => {
        if (++writes === 2) throw new Error("connection terminated unexpectedly");
        return real.savePart(part);
      },
    };
    async function* events(): AsyncGenerator<LoopEvent> {
      yield { type: "reasoning-start", id: "r1" };
      yield { type: "reasoning-delta", id: "r1", text: "Let me " };
      await new Promise((resolve) => setTimeout(resolve, 300));
      yield { type: "reasoning-delta", id: "r1", text: "think" };
      yield { type: "reasoning-end", id: "r1" };
    }
    const result = await processStep({ ledger, sessionId, messageId, cost: () => 0 }, events());
    expect(writes).toBeGreaterThanOrEqual(3);
    expect(result.error).toBeUndefined();
    const parts = (await storedMessages(t.client, sessionId))[0]!.parts;
    expect(parts.map((p) => p.kind.case)).toEqual(["reasoning"]);
    const reasoning = parts[0]!.kind.value as ReasoningPart;
    expect(reasoning.text).toBe("Let me think");
    expect(reasoning.time?.end).toBeDefined();
  });
});

describe("a block started again under the same id", () => {
  it("ends the open one with the text it had (and time.end, without provider state), then streams the new one (the review of 2026-12-04)", async () => {
    const { sessionId, ledger, messageId } = await openAnswer();
    async function* events(): AsyncGenerator<LoopEvent> {
      yield { type: "reasoning-start", id: "r1", metadata: { mock: { signature: "s1" } } };
      yield { type: "reasoning-delta", id: "r1", text: "first" };
      yield { type: "reasoning-start", id: "r1" };
      yield { type: "reasoning-delta", id: "r1", text: "second" };
      yield { type: "reasoning-end", id: "r1" };
    }
    const result = await processStep({ ledger, sessionId, messageId, cost: () => 0 }, events());
    expect(result.error).toBeUndefined();
    const parts = (await storedMessages(t.client, sessionId))[0]!.parts.map((p) => p.kind.value as ReasoningPart);
    expect(parts.map((p) => [p.text, p.time?.end !== undefined, p.metadata])).toEqual([
      ["first", true, undefined],
      ["second", true, undefined],
    ]);
  });
});
