import type { LanguageModelV3 } from "@ai-sdk/provider";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ModelResolver, ResolvedModel } from "../../src/agent/providers.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { NO_RETRY, mockResolver, scriptedModel, textReply, type ModelKey } from "../support/mock-models.js";
import { text } from "../support/prompt.js";
import { assistantOf } from "../support/stored.js";

// A loop that fails on a bug (an exception no step handles) after it started an answer: the
// runner closes that answer (interrupted, naming the failure, the cause only in the log) and
// returns the session to idle while it still holds the lock, so a waiting Prompt gets the answer
// instead of waiting forever, and the next prompt runs.

const models: Partial<Record<ModelKey, LanguageModelV3>> = {};
let t: TestLedger;

beforeAll(async () => {
  const base = mockResolver(models);
  // A model whose description throws when the step reads it: stands in for any bug in a step.
  const resolver: ModelResolver = {
    configured: true,
    async resolve(ref) {
      const resolved = await base.resolve(ref);
      if (ref.modelId !== "broken") return resolved;
      return Object.defineProperty({ ...resolved }, "mediaInToolResults", {
        get: () => {
          throw new Error("a bug in a step");
        },
      }) as ResolvedModel;
    },
  };
  t = await startTestLedger({ model: "mock/model", retry: NO_RETRY }, { models: resolver });
});
afterAll(() => t?.close());

describe("a loop that fails after starting an answer", () => {
  it("closes the answer as interrupted and the session idle: Prompt returns it, and the next prompt is answered", async () => {
    models["mock/broken"] = scriptedModel([]);
    models["mock/model"] = scriptedModel([textReply("fine now")]);
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;

    const failed = assistantOf(
      (await t.client.prompt({ sessionId, model: { providerId: "mock", modelId: "broken" }, parts: [text("hi")] })).message,
    );
    expect(failed?.time?.completed).toBeDefined();
    expect(failed?.error?.kind.case).toBe("interrupted");
    expect(failed?.error?.message).toBe("Interrupted: the agent loop failed (the server's log has the cause); ResumeSession retries it");
    expect((await t.client.getStatus({})).statuses[sessionId]).toBeUndefined();

    const next = await t.client.prompt({ sessionId, parts: [text("again")] });
    expect(assistantOf(next.message)?.error).toBeUndefined();
    expect(next.message!.parts.flatMap((p) => (p.kind.case === "text" ? [p.kind.value.text] : []))).toEqual(["fine now"]);
  });
});
