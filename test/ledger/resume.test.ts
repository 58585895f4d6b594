import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { MessageSchema } from "../../gen/ledger/v1/message_pb.js";
import { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { newId } from "../../src/ids.js";
import { sessionLedger } from "../../src/ledger/session-ledger.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { waitFor } from "../support/wait.js";

// A trial across replicas, 2026-12-04: after the process running an answer was killed,
// ResumeSession on another replica ended OK with the old answer's close-out (completed,
// `interrupted`) and the rerun went on unseen. The state a killed process leaves is written here
// directly: a prompt and its open answer (no `completed` time).

let t: FakeModelLedger;
beforeAll(async () => {
  t = await startFakeModelLedger();
});
afterAll(() => t?.close());

describe("ResumeSession of an answer a stopped process left open", () => {
  it("streams past the old answer's interrupted close-out to the rerun's final answer and idle", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const ledger = sessionLedger(t.ledger.deps, sessionId);
    const userId = newId("msg");
    const model = { providerId: "fake", modelId: "m" };
    await ledger.addMessage(
      create(MessageSchema, {
        kind: { case: "user", value: { id: userId, sessionId, agent: "build", model, timeCreated: timestampNow() } },
      }),
    );
    await ledger.savePart(
      create(PartSchema, { id: newId("prt"), sessionId, messageId: userId, kind: { case: "text", value: { text: "answer me" } } }),
    );
    const openId = newId("msg");
    await ledger.addMessage(
      create(MessageSchema, {
        kind: {
          case: "assistant",
          value: {
            id: openId,
            sessionId,
            parentId: userId,
            agent: "build",
            model,
            path: { cwd: t.dir, root: t.dir },
            time: { created: timestampNow() },
          },
        },
      }),
    );
    t.fake.push({ kind: "stream", chunks: [{ text: "the rerun's answer" }] });

    const events: SessionEvent[] = [];
    for await (const res of t.client.resumeSession({ sessionId })) events.push(res.event!);

    const assistants = events.flatMap((e) =>
      e.kind.case === "messageUpdated" && e.kind.value.message?.kind.case === "assistant" && e.kind.value.message.kind.value.time?.completed
        ? [e.kind.value.message.kind.value]
        : [],
    );
    expect(assistants.map((a) => [a.id === openId ? "old" : "rerun", a.error?.kind.case])).toEqual([
      ["old", "interrupted"],
      ["rerun", undefined],
    ]);
    const texts = events.flatMap((e) =>
      e.kind.case === "partUpdated" && e.kind.value.part?.kind.case === "text" ? [e.kind.value.part.kind.value.text] : [],
    );
    expect(texts.at(-1)).toBe("the rerun's answer");
    expect(events.at(-1)?.kind).toMatchObject({ case: "sessionStatus", value: { status: { case: "idle" } } });
    const seqs = events.map((e) => e.seq).filter((_, i) => events[i]!.kind.case !== "partDelta");
    expect([...seqs].sort((a, b) => (a < b ? -1 : 1))).toEqual(seqs);
  });

  // A review, 2026-12-04: with an answer still open, a resume that joined the live loop waited
  // past that answer's normal end (taken for the stale one) until its deadline.
  it("that joins the live loop still writing that answer ends with it and idle", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    t.fake.push({ kind: "stream", chunks: ["a", "b", "c", "d"].map((w) => ({ text: w })), delayMs: 300 });
    await t.client.promptAsync({ sessionId, parts: [{ kind: { case: "text", value: { text: "hi" } } }] });
    await waitFor("the answer to be open", async () =>
      (await t.client.listMessages({ sessionId })).messages.some((m) => m.message?.kind.case === "assistant"),
    );
    const events: SessionEvent[] = [];
    for await (const res of t.client.resumeSession({ sessionId }, { timeoutMs: 10_000 })) events.push(res.event!);
    const finals = events.flatMap((e) =>
      e.kind.case === "messageUpdated" && e.kind.value.message?.kind.case === "assistant" && e.kind.value.message.kind.value.time?.completed
        ? [e.kind.value.message.kind.value]
        : [],
    );
    expect(finals.map((a) => [a.finish, a.error?.kind.case])).toEqual([["stop", undefined]]);
    expect(events.at(-1)?.kind).toMatchObject({ case: "sessionStatus", value: { status: { case: "idle" } } });
  });
});
