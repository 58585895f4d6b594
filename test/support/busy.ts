import type { FakeOpenAI } from "./openai-server.js";
import type { TestLedger } from "./ledger.js";
import { text } from "./prompt.js";
import { waitFor } from "./wait.js";

/**
 * Makes the session's loop run and hang: queues a reply on `fake` that never ends, sends
 * `Prompt` in the background and waits until GetStatus reports the session busy and the model
 * request has reached `fake`. Call the
 * returned function to Abort the loop and wait for the prompt to return.
 */
export async function hangLoop(t: TestLedger, fake: FakeOpenAI, sessionId: string): Promise<() => Promise<void>> {
  const requested = fake.requests.length;
  fake.push({ kind: "stream", chunks: [{ text: "partial" }, { hang: true }] });
  const done = t.client.prompt({ sessionId, parts: [text("hang on")] }).then(
    () => undefined,
    () => undefined,
  );
  await waitFor(
    `session ${sessionId} to become busy`,
    async () => (await t.client.getStatus({})).statuses[sessionId]?.status.case === "busy",
    10_000,
    20,
  );
  // Busy comes before the model call: wait until the hanging reply is taken, or an Abort sent
  // now would leave it queued for the next test's request.
  await waitFor(`session ${sessionId} to call the model`, () => fake.requests.length > requested, 10_000, 20);
  return async () => {
    await t.client.abort({ sessionId });
    await done;
  };
}
