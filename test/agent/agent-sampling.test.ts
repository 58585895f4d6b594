import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { NO_RETRY } from "../support/mock-models.js";
import type { FakeOpenAI } from "../support/openai-server.js";
import { text } from "../support/prompt.js";

// An agent's temperature, top_p and options (opencode.json `agent.<name>`) and the model's
// limit.output reach the model call, as OpenCode sends them; nothing of it is sent when unset.

let t: FakeModelLedger;
beforeAll(async () => {
  t = await startFakeModelLedger(
    {
      retry: NO_RETRY,
      agent: {
        review: { mode: "primary", temperature: 0.1, top_p: 0.9, options: { seed: 7, user: "agent" } },
        plain: { mode: "primary" },
      },
    },
    {
      modelConfig: {
        limit: { context: 200000, output: 64000 },
        options: { user: "model", top_k: 3 },
        headers: { "x-model-header": "from-model", "x-title": "review" },
      },
    },
  );
});
afterAll(async () => {
  await t?.close();
});
beforeEach(() => {
  t.fake.reset();
  t.fake.requests.length = 0;
});

async function ask(agent: string): Promise<Record<string, unknown>> {
  return (await call(agent)).body;
}

async function call(agent: string): Promise<FakeOpenAI["requests"][number]> {
  const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  t.fake.push({ kind: "stream", chunks: [{ text: "ok" }] });
  await t.client.prompt({ sessionId, agent, parts: [text("hello")] });
  expect(t.fake.requests).toHaveLength(1);
  return t.fake.requests[0]!;
}

describe("sampling settings of an agent", () => {
  it("temperature and top_p of the agent, its options over the model's, max_tokens = min(limit.output, 32000)", async () => {
    const body = await ask("review");
    expect(body).toMatchObject({ temperature: 0.1, top_p: 0.9, max_tokens: 32000, seed: 7, user: "agent", top_k: 3 });
  });

  it("an agent without them: no temperature or top_p sent, the model's options, max_tokens still from the limit", async () => {
    const body = await ask("plain");
    expect(body.temperature).toBeUndefined();
    expect(body.top_p).toBeUndefined();
    expect(body).toMatchObject({ max_tokens: 32000, user: "model", top_k: 3 });
  });
});

describe("headers of a model (provider.<id>.models.<id>.headers)", () => {
  it("are sent on every call of that model, with the provider's own (authorization from apiKey)", async () => {
    const { headers } = await call("plain");
    expect(headers).toMatchObject({ "x-model-header": "from-model", "x-title": "review", authorization: "Bearer test" });
  });
});
