import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { RetryPart } from "../../gen/ledger/v1/part_pb.js";
import { compatibleProvider } from "../support/mock-models.js";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { assistantOf, storedEvents } from "../support/stored.js";
import { text } from "../support/prompt.js";

// runStep's retries against a local server speaking the OpenAI protocol, and against a port
// nobody listens on: what is retried, how long the waits are, and the retry.max_total_ms budget.

const BUDGET_MS = 1200;
let t: TestLedger;
let fake: FakeOpenAI;
let closedPort: number;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  closedPort = await freePort();
  t = await startTestLedger({
    model: "local/qwen",
    provider: {
      local: compatibleProvider(fake.url, { qwen: {} }),
      down: compatibleProvider(`http://127.0.0.1:${closedPort}/v1`),
    },
    retry: { attempts: 10, initial_ms: 300, max_ms: 300, max_total_ms: BUDGET_MS },
  });
});
afterAll(async () => {
  await t?.close();
  await fake?.close();
});

const retries = (m: MessageWithParts | undefined) =>
  (m?.parts ?? []).flatMap((p) => (p.kind.case === "retry" ? [p.kind.value as RetryPart] : []));

async function timedPrompt(model?: { providerId: string; modelId: string }) {
  const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  const started = Date.now();
  const res = await t.client.prompt({ sessionId, model, parts: [text("hi")] });
  return { res, elapsed: Date.now() - started, sessionId };
}

describe("retries", () => {
  it("a provider that keeps answering 503: retried with backoff until retry.max_total_ms is spent, the last wait cut to fit", async () => {
    fake.setFallback({ kind: "error", status: 503 });
    try {
      const before = fake.requests.length;
      const { res, elapsed, sessionId } = await timedPrompt();
      const error = assistantOf(res.message)!.error!;
      expect(error.kind.case).toBe("api");
      expect(error.kind.value).toMatchObject({ statusCode: 503, retryable: true });
      // 300 + 300 + 300 ms, then what is left of the 1200 ms budget; never the 10 attempts.
      const parts = retries(res.message);
      expect(parts.length).toBeGreaterThanOrEqual(3);
      expect(parts.length).toBeLessThanOrEqual(4);
      expect(parts.map((p) => p.attempt)).toEqual(parts.map((_, i) => i + 1));
      expect(fake.requests.length - before).toBe(parts.length + 1);
      expect(elapsed).toBeGreaterThanOrEqual(BUDGET_MS - 300);
      expect(elapsed).toBeLessThan(BUDGET_MS + 2000);
      const waits = await retryWaits(sessionId);
      expect(waits.every((w) => w.ms <= 300 + 5)).toBe(true);
      expect(waits.reduce((sum, w) => sum + w.ms, 0)).toBeLessThanOrEqual(BUDGET_MS + 5);
    } finally {
      fake.setFallback({
        kind: "error",
        status: 500,
        body: { error: { message: "fake OpenAI: no scripted reply queued", type: "server_error", code: "no_script" } },
      });
    }
  });

  it("a refused connection is retried, within the budget, and ends with the cause", async () => {
    const { res, elapsed, sessionId } = await timedPrompt({ providerId: "down", modelId: "m" });
    const error = assistantOf(res.message)!.error!;
    expect(error.kind.case).toBe("api");
    expect(error.message).toContain(`connect ECONNREFUSED 127.0.0.1:${closedPort}`);
    expect(retries(res.message).length).toBeGreaterThanOrEqual(3);
    expect(elapsed).toBeLessThan(BUDGET_MS + 2000);
    // Each retry was announced as a session_status retry with the time of the next attempt.
    const waits = await retryWaits(sessionId);
    expect(waits.map((w) => w.attempt)).toEqual(retries(res.message).map((p) => p.attempt));
    for (const { ms } of waits) expect(ms).toBeLessThanOrEqual(300 + 5);
  });

  it("a retry-after past the budget is not waited for: the step ends at once with the 429", async () => {
    fake.push({ kind: "error", status: 429, headers: { "retry-after": "30" } });
    const { res, elapsed } = await timedPrompt();
    expect(assistantOf(res.message)!.error?.kind.value).toMatchObject({ statusCode: 429 });
    expect(retries(res.message)).toEqual([]);
    expect(elapsed).toBeLessThan(BUDGET_MS);
  });

  it("follows the provider's x-should-retry: false stops a 500, true retries a 400; retry-after-ms sets the wait", async () => {
    fake.push({ kind: "error", status: 500, headers: { "x-should-retry": "false" } });
    const refused = await timedPrompt();
    expect(assistantOf(refused.res.message)!.error?.kind.value).toMatchObject({ statusCode: 500 });
    expect(retries(refused.res.message)).toEqual([]);

    fake.push(
      { kind: "error", status: 400, headers: { "x-should-retry": "true", "retry-after-ms": "20" } },
      { kind: "stream", chunks: [{ text: "second time lucky" }] },
    );
    const retried = await timedPrompt();
    expect(assistantOf(retried.res.message)!.error).toBeUndefined();
    expect(retries(retried.res.message).map((p) => p.attempt)).toEqual([1]);
    const [wait] = await retryWaits(retried.sessionId);
    expect(wait!.ms).toBeLessThanOrEqual(20 + 5);
  });
});

/** Each stored `session_status` retry event: its attempt and the wait it announced (`next` − the event's time, ms). */
async function retryWaits(sessionId: string): Promise<Array<{ attempt: number; ms: number }>> {
  const rows = await storedEvents(t.ledger.deps.db, sessionId, { kind: "session_status" });
  return rows.flatMap((row) => {
    const event = row.data as { time: string; sessionStatus?: { retry?: { attempt: number; next: string } } };
    const retry = event.sessionStatus?.retry;
    return retry ? [{ attempt: retry.attempt, ms: Date.parse(retry.next) - Date.parse(event.time) }] : [];
  });
}

/** A loopback port nothing listens on (bound, then released). */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
