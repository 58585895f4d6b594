// A PromptStream retried with the same message_id (its idempotency key) yields exactly the
// events of the original write (issue 17, item 4): the agent and model switches before the
// message, a carried-out revert's removals, the message and its parts, `prompted`, and the
// `session_updated` that ends the write; never events of the writes before or after it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { newId } from "../../src/ids.js";
import { compatibleProvider } from "../support/mock-models.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { idOf, lastSeq, storedEvents } from "../support/stored.js";
import { sleep } from "../support/wait.js";

let t: TestLedger;

beforeAll(async () => {
  // noReply prompts only: the provider's address is never called.
  t = await startTestLedger({
    model: "local/a",
    provider: { local: compatibleProvider("http://127.0.0.1:9/v1", { a: {}, b: {} }) },
  });
});
afterAll(async () => t?.close());

async function newSession(): Promise<string> {
  return (await t.client.createSession({ directory: t.dir })).session!.id;
}

/** The events of one PromptStream call. */
async function promptStream(request: Parameters<TestLedger["client"]["promptStream"]>[0]): Promise<SessionEvent[]> {
  const events: SessionEvent[] = [];
  for await (const res of t.client.promptStream(request)) events.push(res.event!);
  return events;
}

const view = (events: SessionEvent[]) => events.map((e) => [e.kind.case, Number(e.seq)]);

describe("a replayed PromptStream", () => {
  it("yields the original write's events, agent and model switches included, and nothing of later writes", async () => {
    const sessionId = await newSession();
    await t.client.prompt({ sessionId, noReply: true, parts: [text("first")] });
    const messageId = newId("msg");
    const request = {
      sessionId,
      messageId,
      agent: "plan",
      model: { providerId: "local", modelId: "b" },
      noReply: true,
      parts: [text("switch both"), text("second part")],
    };
    const before = await lastSeq(t.ledger.deps.db, sessionId);
    const original = await promptStream(request);
    expect(view(original)).toEqual(
      ["agentSwitched", "modelSwitched", "messageUpdated", "partUpdated", "partUpdated", "prompted", "sessionUpdated"].map((kind, i) => [
        kind,
        before + 1 + i,
      ]),
    );
    // A later write of the same kind right after it must not be taken for part of it.
    await t.client.prompt({ sessionId, noReply: true, agent: "build", parts: [text("switch back")] });

    const replayed = await promptStream(request);
    expect(view(replayed)).toEqual(view(original));
    expect(replayed).toEqual(original);
    // The stored log holds exactly one copy of that write.
    const kinds = (await storedEvents(t.ledger.deps.db, sessionId)).map((e) => [e.kind, e.seq]);
    expect(kinds.slice(before, before + 7)).toEqual(view(original).map(([kind, seq]) => [storedKind(kind as string), seq]));
  });

  it("yields the removals of the revert the original carried out, after its switches", async () => {
    const sessionId = await newSession();
    const a = await t.client.prompt({ sessionId, noReply: true, parts: [text("keep")] });
    const b = await t.client.prompt({ sessionId, noReply: true, parts: [text("drop"), text("drop too")] });
    await t.client.revert({ sessionId, messageId: idOf(b.message!) });
    const request = { sessionId, messageId: newId("msg"), agent: "plan", noReply: true, parts: [text("after the revert")] };
    const original = await promptStream(request);
    const before = original[0]!.seq - 1n;
    expect(view(original)).toEqual(
      ["agentSwitched", "messageRemoved", "partRemoved", "partRemoved", "messageUpdated", "partUpdated", "prompted", "sessionUpdated"].map(
        (kind, i) => [kind, Number(before) + 1 + i],
      ),
    );
    expect(idOf(a.message!)).not.toBe(idOf(b.message!));
    await t.client.prompt({ sessionId, noReply: true, parts: [text("later")] });
    expect(await promptStream(request)).toEqual(original);
  });

  it("yields the original events of a prompt that switched nothing, without the write before it", async () => {
    const sessionId = await newSession();
    const sent = await t.client.prompt({ sessionId, noReply: true, parts: [text("one"), text("two")] });
    // A deletion just before: its removals are not the prompt's (it switched nothing, carried out no
    // revert). A later millisecond: within the same one the two writes cannot be told apart
    // (documented with readPromptEvents).
    await t.client.deletePart({ sessionId, messageId: idOf(sent.message!), partId: sent.message!.parts[1]!.id });
    await sleep(2);
    const request = { sessionId, messageId: newId("msg"), noReply: true, parts: [text("plain")] };
    const original = await promptStream(request);
    expect(view(original).map(([kind]) => kind)).toEqual(["messageUpdated", "partUpdated", "prompted", "sessionUpdated"]);
    expect(await promptStream(request)).toEqual(original);
  });
});

/** The stored `kind` column of an event case (`agentSwitched` → `agent_switched`). */
function storedKind(kind: string): string {
  return kind.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
