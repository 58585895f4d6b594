import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { compatibleProvider } from "../support/mock-models.js";
import { text } from "../support/prompt.js";
import { captureStderr } from "../support/stderr.js";
import { assistantOf } from "../support/stored.js";

// The AI SDK's call warnings (here: a JSON schema asked of an OpenAI-compatible model, which the
// provider does not send) reach the structured log as one `warn` line per kind and process, not
// as the SDK's plain `console.warn` lines that break a stderr read as JSON Lines.

let t: TestLedger;
let fake: FakeOpenAI;
const stderr = captureStderr();
// A model id no other test file uses: the once-per-process memory is shared by the worker's files.
const model = `warned-${process.pid}-${Date.now()}`;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  t = await startTestLedger({ model: `local/${model}`, provider: { local: compatibleProvider(fake.url, { [model]: {} }) } });
});
afterAll(async () => {
  await t?.close();
  await fake?.close();
});

describe("model warnings", () => {
  it("are one structured warn line per kind, then debug; no plain AI SDK line", async () => {
    const consoleLines: string[] = [];
    for (const method of ["warn", "info", "log"] as const)
      vi.spyOn(console, method).mockImplementation((...args: unknown[]) => void consoleLines.push(args.join(" ")));
    const format = { kind: { case: "jsonSchema" as const, value: { schema: { type: "object" }, retryCount: 0 } } };
    for (let i = 0; i < 2; i++) {
      fake.push({ kind: "stream", chunks: [{ text: '{"n":1}' }] });
      const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
      const res = await t.client.prompt({ sessionId, format, parts: [text("a JSON answer")] });
      expect(assistantOf(res.message)?.error).toBeUndefined();
    }
    const lines = stderr.written().join("").split("\n");
    expect([...lines, ...consoleLines].filter((l) => l.includes("AI SDK Warning"))).toEqual([]);
    const warnings = lines
      .filter((l) => l.startsWith("{") && l.includes('"model warning"'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((w) => w.model === model);
    expect(warnings.map(({ time: _time, ...w }) => w)).toEqual([
      {
        level: "warn",
        msg: "model warning",
        provider: "local.chat",
        model,
        type: "unsupported",
        feature: "responseFormat",
        details: "JSON response format schema is only supported with structuredOutputs",
      },
    ]);
  });
});
