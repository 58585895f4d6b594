import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { newId } from "../../src/ids.js";
import { hangLoop } from "../support/busy.js";
import { failure } from "../support/errors.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { partText, text } from "../support/prompt.js";
import { idOf, lastSeq as storedLastSeq, removalOf, storedEvents, storedRows } from "../support/stored.js";
import { waitFor } from "../support/wait.js";

// Revert / Unrevert end to end: the mark hides messages from ListMessages, the next prompt
// removes them in its own transaction with message_removed/part_removed events, and a running
// loop refuses both. Runs on Postgres and PGlite (vitest projects).

let t: FakeModelLedger;
beforeAll(async () => {
  t = await startFakeModelLedger();
});
afterAll(async () => {
  await t?.close();
});

/** A session with three stored prompts: ["one"], ["two a", "two b", "two c"], ["three"]. */
async function threeMessages(): Promise<{ sessionId: string; sent: MessageWithParts[] }> {
  const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  const sent: MessageWithParts[] = [];
  for (const texts of [["one"], ["two a", "two b", "two c"], ["three"]]) {
    sent.push((await t.client.prompt({ sessionId, noReply: true, parts: texts.map(text) })).message!);
  }
  return { sessionId, sent };
}

const rows = (sessionId: string) => storedRows(t.ledger.deps.db, sessionId);
const lastSeq = (sessionId: string) => storedLastSeq(t.ledger.deps.db, sessionId);
/** The stored events after `afterSeq` as [kind, message id, part id?]. */
const eventsAfter = async (sessionId: string, afterSeq: number) =>
  (await storedEvents(t.ledger.deps.db, sessionId, { afterSeq })).map(removalOf);

/** The events a no_reply prompt of one text stores after the removals it makes, as [kind]. */
const PROMPTED = [["message_updated"], ["part_updated"], ["prompted"], ["session_updated"]];

const listed = async (sessionId: string, includeReverted = false) =>
  (await t.client.listMessages({ sessionId, includeReverted })).messages.map((m) => [idOf(m), m.parts.map(partText)]);

describe("Revert / Unrevert", () => {
  it("hides the reverted message and everything after it until Unrevert, deleting nothing", async () => {
    const { sessionId, sent } = await threeMessages();
    const before = await rows(sessionId);
    const seq = await lastSeq(sessionId);
    const { session } = await t.client.revert({ sessionId, messageId: idOf(sent[1]!) });
    expect(session!.revert).toMatchObject({ messageId: idOf(sent[1]!), partId: "" });
    expect((await t.client.getSession({ sessionId })).session!.revert).toMatchObject({ messageId: idOf(sent[1]!), partId: "" });
    expect(await eventsAfter(sessionId, seq)).toEqual([["session_updated"]]);
    expect(await listed(sessionId)).toEqual([[idOf(sent[0]!), ["one"]]]);
    expect(await listed(sessionId, true)).toHaveLength(3);
    expect(await rows(sessionId)).toEqual(before);

    const unreverted = await t.client.unrevert({ sessionId });
    expect(unreverted.session!.revert).toBeUndefined();
    expect(await eventsAfter(sessionId, seq)).toEqual([["session_updated"], ["session_updated"]]);
    expect(await listed(sessionId)).toEqual([
      [idOf(sent[0]!), ["one"]],
      [idOf(sent[1]!), ["two a", "two b", "two c"]],
      [idOf(sent[2]!), ["three"]],
    ]);
  });

  it("with part_id shows the reverted message with only the parts before that part", async () => {
    const { sessionId, sent } = await threeMessages();
    await t.client.revert({ sessionId, messageId: idOf(sent[1]!), partId: sent[1]!.parts[1]!.id });
    expect(await listed(sessionId)).toEqual([
      [idOf(sent[0]!), ["one"]],
      [idOf(sent[1]!), ["two a"]],
    ]);
  });

  it("the next prompt removes the reverted message and every later one, with their parts and events", async () => {
    const { sessionId, sent } = await threeMessages();
    await t.client.revert({ sessionId, messageId: idOf(sent[1]!) });
    const seq = await lastSeq(sessionId);
    const next = (await t.client.prompt({ sessionId, noReply: true, parts: [text("four")] })).message!;
    expect(await rows(sessionId)).toEqual([
      [idOf(sent[0]!), [[sent[0]!.parts[0]!.id, "text"]]],
      [idOf(next), [[next.parts[0]!.id, "text"]]],
    ]);
    const [m2, m3] = [sent[1]!, sent[2]!];
    expect(await eventsAfter(sessionId, seq)).toEqual([
      ["message_removed", idOf(m2)],
      ...m2.parts.map((p) => ["part_removed", idOf(m2), p.id]),
      ["message_removed", idOf(m3)],
      ["part_removed", idOf(m3), m3.parts[0]!.id],
      ...PROMPTED,
    ]);
    const session = (await t.client.getSession({ sessionId })).session!;
    expect(session.revert).toBeUndefined();
    expect(session.messageCount).toBe(2);
  });

  it("with part_id, the next prompt keeps the reverted message's earlier parts and removes the rest", async () => {
    const { sessionId, sent } = await threeMessages();
    const [m1, m2, m3] = sent as [MessageWithParts, MessageWithParts, MessageWithParts];
    await t.client.revert({ sessionId, messageId: idOf(m2), partId: m2.parts[1]!.id });
    const seq = await lastSeq(sessionId);
    const next = (await t.client.prompt({ sessionId, noReply: true, parts: [text("four")] })).message!;
    expect(await rows(sessionId)).toEqual([
      [idOf(m1), [[m1.parts[0]!.id, "text"]]],
      [idOf(m2), [[m2.parts[0]!.id, "text"]]],
      [idOf(next), [[next.parts[0]!.id, "text"]]],
    ]);
    expect(await eventsAfter(sessionId, seq)).toEqual([
      ["part_removed", idOf(m2), m2.parts[1]!.id],
      ["part_removed", idOf(m2), m2.parts[2]!.id],
      ["message_removed", idOf(m3)],
      ["part_removed", idOf(m3), m3.parts[0]!.id],
      ...PROMPTED,
    ]);
    expect(await listed(sessionId)).toEqual([
      [idOf(m1), ["one"]],
      [idOf(m2), ["two a"]],
      [idOf(next), ["four"]],
    ]);
    expect((await t.client.getSession({ sessionId })).session!.revert).toBeUndefined();
  });

  it("unknown message or part → NOT_FOUND, nothing marked", async () => {
    const { sessionId, sent } = await threeMessages();
    const other = await threeMessages();
    expect(await failure(t.client.revert({ sessionId, messageId: newId("msg") }))).toMatchObject({
      code: Code.NotFound,
      reason: "MESSAGE_NOT_FOUND",
    });
    expect(await failure(t.client.revert({ sessionId, messageId: idOf(other.sent[0]!) }))).toMatchObject({
      code: Code.NotFound,
      reason: "MESSAGE_NOT_FOUND",
    });
    expect(await failure(t.client.revert({ sessionId, messageId: idOf(sent[0]!), partId: newId("prt") }))).toMatchObject({
      code: Code.NotFound,
      reason: "PART_NOT_FOUND",
    });
    expect(await failure(t.client.revert({ sessionId, messageId: idOf(sent[0]!), partId: sent[1]!.parts[0]!.id }))).toMatchObject({
      code: Code.NotFound,
      reason: "PART_NOT_FOUND",
    });
    expect(await failure(t.client.revert({ sessionId: newId("ses"), messageId: idOf(sent[0]!) }))).toMatchObject({
      code: Code.NotFound,
      reason: "SESSION_NOT_FOUND",
    });
    expect(await failure(t.client.revert({ sessionId, messageId: "msg_bad" }))).toMatchObject({ code: Code.InvalidArgument });
    expect((await t.client.getSession({ sessionId })).session!.revert).toBeUndefined();
  });

  it("refuses Revert and Unrevert while the session's loop runs (SESSION_BUSY)", async () => {
    const { sessionId, sent } = await threeMessages();
    const stop = await hangLoop(t, t.fake, sessionId);
    try {
      expect(await failure(t.client.revert({ sessionId, messageId: idOf(sent[1]!) }))).toMatchObject({
        code: Code.FailedPrecondition,
        reason: "SESSION_BUSY",
      });
      expect(await failure(t.client.unrevert({ sessionId }))).toMatchObject({ code: Code.FailedPrecondition, reason: "SESSION_BUSY" });
    } finally {
      await stop();
    }
    expect((await t.client.getSession({ sessionId })).session!.revert).toBeUndefined();
    await t.client.revert({ sessionId, messageId: idOf(sent[1]!) });
    expect(await listed(sessionId)).toEqual([[idOf(sent[0]!), ["one"]]]);
  });

  it("DeleteMessage on the revert message moves the point to the next message, so the later ones stay hidden and are removed by the next prompt", async () => {
    const { sessionId, sent } = await threeMessages();
    const [m1, m2, m3] = sent.map(idOf) as [string, string, string];
    await t.client.revert({ sessionId, messageId: m2 });
    const seq = await lastSeq(sessionId);
    await t.client.deleteMessage({ sessionId, messageId: m2 });
    expect((await t.client.getSession({ sessionId })).session!.revert).toMatchObject({ messageId: m3, partId: "" });
    expect(await listed(sessionId)).toEqual([[m1, ["one"]]]);
    expect((await eventsAfter(sessionId, seq)).map((e) => e[0])).toEqual([
      "session_updated",
      "message_removed",
      "part_removed",
      "part_removed",
      "part_removed",
    ]);
    await t.client.prompt({ sessionId, noReply: true, parts: [text("four")] });
    expect((await listed(sessionId)).map(([, texts]) => texts)).toEqual([["one"], ["four"]]);
    expect((await rows(sessionId)).map(([id]) => id)).not.toContain(m3);

    // The last message: nothing is left past the point, so it is cleared.
    const last = await threeMessages();
    await t.client.revert({ sessionId: last.sessionId, messageId: idOf(last.sent[2]!) });
    await t.client.deleteMessage({ sessionId: last.sessionId, messageId: idOf(last.sent[2]!) });
    expect((await t.client.getSession({ sessionId: last.sessionId })).session!.revert).toBeUndefined();
    expect((await listed(last.sessionId)).map(([, texts]) => texts)).toEqual([["one"], ["two a", "two b", "two c"]]);
  });

  it("DeletePart on the revert part moves the point to the next part, or to the next message after the last part", async () => {
    const { sessionId, sent } = await threeMessages();
    const m2 = sent[1]!;
    const [a, b, c] = m2.parts.map((p) => p.id) as [string, string, string];
    await t.client.revert({ sessionId, messageId: idOf(m2), partId: b });
    await t.client.deletePart({ sessionId, messageId: idOf(m2), partId: b });
    expect((await t.client.getSession({ sessionId })).session!.revert).toMatchObject({ messageId: idOf(m2), partId: c });
    expect((await listed(sessionId)).map(([, texts]) => texts)).toEqual([["one"], ["two a"]]);
    await t.client.deletePart({ sessionId, messageId: idOf(m2), partId: c });
    expect((await t.client.getSession({ sessionId })).session!.revert).toMatchObject({ messageId: idOf(sent[2]!), partId: "" });
    expect((await listed(sessionId)).map(([, texts]) => texts)).toEqual([["one"], ["two a"]]);
    // A part before the point leaves it where it is.
    await t.client.deletePart({ sessionId, messageId: idOf(m2), partId: a });
    expect((await t.client.getSession({ sessionId })).session!.revert).toMatchObject({ messageId: idOf(sent[2]!), partId: "" });
  });

  it("Unrevert without a revert point changes nothing: no event, time_updated kept", async () => {
    const { sessionId } = await threeMessages();
    const before = (await t.client.getSession({ sessionId })).session!;
    const seq = await lastSeq(sessionId);
    const after = (await t.client.unrevert({ sessionId })).session!;
    expect(after.timeUpdated).toEqual(before.timeUpdated);
    expect(await lastSeq(sessionId)).toBe(seq);
  });

  it("refuses ResumeSession while a revert point is set (SESSION_REVERTED), and resumes after Unrevert", async () => {
    const { sessionId, sent } = await threeMessages();
    const stop = await hangLoop(t, t.fake, sessionId);
    await stop(); // the "hang on" prompt's answer is aborted: resumable
    await waitFor("the loop to end", async () => !(await t.client.getStatus({})).statuses[sessionId], 20_000, 20);
    await t.client.revert({ sessionId, messageId: idOf(sent[1]!) });
    const before = await rows(sessionId);
    const seq = await lastSeq(sessionId);
    const refused = async () => {
      for await (const _ of t.client.resumeSession({ sessionId })) void _;
    };
    expect(await failure(refused())).toMatchObject({ code: Code.FailedPrecondition, reason: "SESSION_REVERTED" });
    expect(await rows(sessionId)).toEqual(before);
    expect(await lastSeq(sessionId)).toBe(seq);

    await t.client.unrevert({ sessionId });
    t.fake.push({ kind: "stream", chunks: [{ text: "resumed" }] });
    const kinds: string[] = [];
    for await (const res of t.client.resumeSession({ sessionId })) kinds.push(res.event!.kind.case!);
    expect(kinds.at(-1)).toBe("sessionStatus");
    const last = (await t.client.listMessages({ sessionId })).messages.at(-1)!;
    expect(last.message!.kind.case).toBe("assistant");
    expect(last.parts.map(partText).filter(Boolean)).toContain("resumed");
  });
});
