import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { waitFor } from "../support/wait.js";

// After the hand-over at shutdown, a replica starts no loop: a prompt that arrives in the last
// moment is stored and answered UNAVAILABLE DRAINING, for ResumeSession on another replica,
// instead of a loop that would hold the shutdown (docs/operations.md, "Running behind a load balancer").

let t: FakeModelLedger;
beforeAll(async () => {
  t = await startFakeModelLedger();
});
afterAll(() => t?.close());

describe("after the hand-over", () => {
  it("a prompt is stored but not answered here: UNAVAILABLE DRAINING naming ResumeSession; Shell and Summarize UNAVAILABLE saying nothing ran", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    await t.ledger.deps.replier!.handOver();
    const requests = t.fake.requests.length;
    const error = await t.client.prompt({ sessionId, parts: [text("last moment")] }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect([error?.code, error?.rawMessage, error?.findDetails(ErrorInfoSchema)[0]?.reason]).toEqual([
      Code.Unavailable,
      `the server is shutting down: the prompt is stored but not answered here; call ResumeSession(session_id=${sessionId}) on another replica`,
      "DRAINING",
    ]);
    const stored = (await t.client.listMessages({ sessionId })).messages.map((m) => m.message!.kind.case);
    expect(stored).toEqual(["user"]);
    expect(t.fake.requests.length).toBe(requests);
    for (const call of [() => t.client.shell({ sessionId, agent: "build", command: "echo hi" }), () => t.client.summarize({ sessionId })]) {
      const refused = await call().then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      // Nothing was stored or run for these: the error must not send the client to ResumeSession.
      expect([refused?.code, refused?.rawMessage, refused?.findDetails(ErrorInfoSchema)[0]?.reason]).toEqual([
        Code.Unavailable,
        `the server is shutting down: nothing was stored or run for session ${sessionId}; retry the call on another replica`,
        "DRAINING",
      ]);
    }
    expect((await t.client.listMessages({ sessionId })).messages.map((m) => m.message!.kind.case)).toEqual(["user"]);
  });

  it("a prompt that joined a Shell the hand-over stops is answered UNAVAILABLE DRAINING with its message_id, not NOT_ANSWERED", async () => {
    const ledger = await startFakeModelLedger();
    try {
      const sessionId = (await ledger.client.createSession({ directory: ledger.dir })).session!.id;
      const shell = ledger.client.shell({ sessionId, agent: "build", command: "sleep 30" }).catch((e: unknown) => ConnectError.from(e));
      await waitFor("the Shell to hold the session", () => ledger.ledger.deps.replier!.isRunning(sessionId));
      // The prompt's handler hands it to the replier, which joins it to the Shell's run.
      const replier = ledger.ledger.deps.replier!;
      const run = replier.run.bind(replier);
      let joined = false;
      replier.run = (id, options) => {
        joined ||= id === sessionId;
        return run(id, options);
      };
      const prompt = ledger.client.prompt({ sessionId, parts: [text("joins the shell")] }).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      await waitFor("the prompt to join the Shell's run", () => joined);
      const userId = (await ledger.client.listMessages({ sessionId })).messages
        .filter((m) => m.parts.some((p) => p.kind.case === "text" && p.kind.value.text === "joins the shell"))
        .map((m) => m.message?.kind.value?.id)[0];
      expect([userId?.startsWith("msg_"), replier.isRunning(sessionId)]).toEqual([true, true]);
      await replier.handOver();
      const error = await prompt;
      expect([
        error?.code,
        error?.findDetails(ErrorInfoSchema)[0]?.reason,
        error?.findDetails(ErrorInfoSchema)[0]?.metadata.message_id,
      ]).toEqual([Code.Unavailable, "DRAINING", userId]);
      await shell;
    } finally {
      await ledger.close();
    }
  });
});
