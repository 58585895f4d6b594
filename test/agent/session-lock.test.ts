// Session locks come from a bounded pool (issue 17, item 4): on Postgres each running or waiting
// agent loop holds one connection of its own, at most `limits.lock_connections` of them. With the
// pool at 1 and a loop holding it, a Prompt or PromptStream that needs a loop gets
// RESOURCE_EXHAUSTED (LOCK_CONNECTIONS_EXHAUSTED) naming the limit and ResumeSession; its user
// message stays stored, and ResumeSession answers it once the pool has room. Postgres only: the
// embedded PGlite locks in-process, without connections.
import { Code, ConnectError } from "@connectrpc/connect";
import type { LanguageModelV3StreamPart } from "@ai-sdk/provider";
import { sql } from "kysely";
import { MockLanguageModelV3 } from "ai/test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { TEST_ENGINE } from "../support/db.js";
import { mockResolver, usage } from "../support/mock-models.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { assistantOf, idOf, storedMessages } from "../support/stored.js";
import { waitFor } from "../support/wait.js";

let t: TestLedger;
/** The next model call waits for this before it answers. */
let hold: Promise<void> = Promise.resolve();
let calls = 0;

beforeAll(async () => {
  if (TEST_ENGINE !== "postgres") return;
  const model = new MockLanguageModelV3({
    provider: "mock",
    modelId: "model",
    doStream: async () => {
      calls++;
      const wait = hold;
      const stream = new ReadableStream<LanguageModelV3StreamPart>({
        async start(controller) {
          controller.enqueue({ type: "stream-start", warnings: [] });
          await wait;
          controller.enqueue({ type: "text-start", id: "t" });
          controller.enqueue({ type: "text-delta", id: "t", delta: "answered" });
          controller.enqueue({ type: "text-end", id: "t" });
          controller.enqueue({ type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: usage(1, 1) });
          controller.close();
        },
      });
      return { stream };
    },
  });
  t = await startTestLedger({ model: "mock/model", limits: { lock_connections: 1 } }, { models: mockResolver({ "mock/model": model }) });
});
afterAll(async () => t?.close());

/** Connections of this ledger's lock pool open in Postgres now. */
async function lockConnections(): Promise<number> {
  const { rows } = await sql<{ n: string }>`
    select count(*)::text as n from pg_stat_activity where application_name = 'ledger-loop-lock' and datname = current_database()`.execute(
    t.ledger.deps.db,
  );
  return Number(rows[0]!.n);
}

/** Asserts the pool's RESOURCE_EXHAUSTED for `sessionId`; returns the stored message id it names. */
function exhausted(error: unknown, sessionId: string): string {
  const e = ConnectError.from(error);
  expect(e.code).toBe(Code.ResourceExhausted);
  expect(e.rawMessage).toBe(
    `session ${sessionId}: no agent loop could start, all 1 session-lock connections are in use (limit lock_connections; raise limits.lock_connections in ledger.json, within Postgres's max_connections); the prompt is stored: answer it with ResumeSession(session_id=${sessionId}) once a loop has ended`,
  );
  const info = e.findDetails(ErrorInfoSchema)[0]!;
  expect(info.reason).toBe("LOCK_CONNECTIONS_EXHAUSTED");
  expect(info.metadata).toMatchObject({ session_id: sessionId, limit: "lock_connections", max: "1" });
  return info.metadata.message_id!;
}

describe.skipIf(TEST_ENGINE !== "postgres")("session locks from a pool of lock_connections (1)", () => {
  it("a prompt that cannot get a lock connection fails with RESOURCE_EXHAUSTED, stays stored, and ResumeSession answers it later", async () => {
    const a = (await t.client.createSession({ directory: t.dir })).session!.id;
    const b = (await t.client.createSession({ directory: t.dir })).session!.id;
    let go!: () => void;
    hold = new Promise<void>((resolve) => (go = resolve));
    // A's loop takes the only lock connection and waits inside its model call.
    await t.client.promptAsync({ sessionId: a, parts: [text("hold the lock")] });
    await waitFor("A's loop to call the model", () => calls === 1);
    hold = Promise.resolve();
    expect(await lockConnections()).toBe(1);

    // Prompt (unary): the error reaches the client; the message is stored.
    const unary = await t.client.prompt({ sessionId: b, parts: [text("first for B")] }).then(
      () => undefined,
      (error: unknown) => error,
    );
    const firstId = exhausted(unary, b);
    // PromptStream: the stored events, then the same error.
    const events: SessionEvent[] = [];
    let streamError: unknown;
    try {
      for await (const res of t.client.promptStream({ sessionId: b, parts: [text("second for B")] })) events.push(res.event!);
    } catch (error) {
      streamError = error;
    }
    const secondId = exhausted(streamError, b);
    expect(events.map((e) => e.kind.case)).toEqual(["messageUpdated", "partUpdated", "prompted", "sessionUpdated"]);
    const stored = events[0]!.kind.case === "messageUpdated" ? events[0]!.kind.value.message!.kind.value!.id : "";
    expect(secondId).toBe(stored);
    expect((await storedMessages(t.client, b)).map((m) => [m.message!.kind.case, idOf(m)])).toEqual([
      ["user", firstId],
      ["user", secondId],
    ]);
    // Shell holds the session like a loop: it takes no lock either, and wrote nothing.
    const shell = ConnectError.from(
      await t.client.shell({ sessionId: b, agent: "build", command: "echo hi" }).then(
        () => undefined,
        (error: unknown) => error,
      ),
    );
    expect([shell.code, shell.findDetails(ErrorInfoSchema)[0]?.reason]).toEqual([Code.ResourceExhausted, "LOCK_CONNECTIONS_EXHAUSTED"]);
    expect(shell.rawMessage).toContain("cannot take the session's lock now, all 1 session-lock connections are in use");
    expect((await storedMessages(t.client, b)).length).toBe(2);
    expect(await lockConnections()).toBe(1);

    // A ends and gives its connection back; B's last prompt is answered through ResumeSession.
    go();
    await waitFor("A's answer", async () => (await storedMessages(t.client, a)).length === 2);
    await waitFor("A's loop to let go", () => !t.ledger.deps.replier!.isRunning(a));
    const resumed: SessionEvent[] = [];
    for await (const res of t.client.resumeSession({ sessionId: b })) resumed.push(res.event!);
    expect(resumed.at(-1)?.kind).toMatchObject({ case: "sessionStatus", value: { status: { case: "idle" } } });
    const messages = await storedMessages(t.client, b);
    // The loop answers every prompt left unanswered, in order: nothing acknowledged was lost.
    expect(messages.map((m) => [m.message!.kind.case, assistantOf(m)?.parentId])).toEqual([
      ["user", undefined],
      ["user", undefined],
      ["assistant", firstId],
      ["assistant", secondId],
    ]);
    expect(messages.slice(2).map((m) => m.parts.flatMap((p) => (p.kind.case === "text" ? [p.kind.value.text] : [])))).toEqual([
      ["answered"],
      ["answered"],
    ]);
    // The connection went back to the pool and was reused: never more than one.
    expect(await lockConnections()).toBe(1);
    // The pool is free again: a plain Prompt runs its loop.
    const answer = await t.client.prompt({ sessionId: a, parts: [text("again")] });
    expect(assistantOf(answer.message)?.finish).toBe("stop");
  });
});
