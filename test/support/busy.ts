import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { FakeOpenAI } from "./openai-server.js";
import type { TestLedger } from "./ledger.js";
import { text } from "./prompt.js";

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
  const deadline = Date.now() + 10_000;
  while ((await t.client.getStatus({})).statuses[sessionId]?.status.case !== "busy") {
    if (Date.now() > deadline) throw new Error(`session ${sessionId} never became busy`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  // Busy comes before the model call: wait until the hanging reply is taken, or an Abort sent
  // now would leave it queued for the next test's request.
  while (fake.requests.length <= requested) {
    if (Date.now() > deadline) throw new Error(`session ${sessionId} never called the model`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return async () => {
    await t.client.abort({ sessionId });
    await done;
  };
}

/** The code and `ErrorInfo.reason` / field of a failed call (undefined when it succeeded). */
export async function failure(promise: Promise<unknown>): Promise<{ code: Code; reason?: string; field?: string } | undefined> {
  try {
    await promise;
    return undefined;
  } catch (error) {
    if (!(error instanceof ConnectError)) throw error;
    const info = error.findDetails(ErrorInfoSchema)[0];
    return { code: error.code, reason: info?.reason, field: info?.metadata.field };
  }
}

/** Awaits a call that must fail and returns its error as a ConnectError (throws if it succeeded). */
export async function connectFailure(call: Promise<unknown>): Promise<ConnectError> {
  try {
    await call;
  } catch (error) {
    return ConnectError.from(error);
  }
  throw new Error("expected the call to fail");
}
