import { clone, create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { PartSchema, type FilePartSourceSchema } from "../../gen/ledger/v1/part_pb.js";
import { newId } from "../../src/ids.js";
import { hangLoop } from "../support/busy.js";
import { failure } from "../support/errors.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { partText, text } from "../support/prompt.js";
import { idOf, lastSeq as storedLastSeq, removalOf, storedEvents, storedRows } from "../support/stored.js";

// DeleteMessage, DeletePart, UpdatePart, ListChildren and GetStatus end to end. Runs on
// Postgres and PGlite (vitest projects).

let t: FakeModelLedger;
beforeAll(async () => {
  t = await startFakeModelLedger();
});
afterAll(async () => {
  await t?.close();
});

/** A session with two stored prompts: ["one a", "one b"], ["two"]. */
async function twoMessages(): Promise<{ sessionId: string; sent: [MessageWithParts, MessageWithParts] }> {
  const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  const first = (await t.client.prompt({ sessionId, noReply: true, parts: [text("one a"), text("one b")] })).message!;
  const second = (await t.client.prompt({ sessionId, noReply: true, parts: [text("two")] })).message!;
  return { sessionId, sent: [first, second] };
}

const rows = (sessionId: string) => storedRows(t.ledger.deps.db, sessionId);
const lastSeq = (sessionId: string) => storedLastSeq(t.ledger.deps.db, sessionId);

/** The stored events after `afterSeq` as [kind, ids...] (part_updated: the part id and its text). */
async function eventsAfter(sessionId: string, afterSeq: number): Promise<unknown[][]> {
  return (await storedEvents(t.ledger.deps.db, sessionId, { afterSeq })).map((e) => {
    const updated = (e.data as { partUpdated?: { part: { id: string; text?: { text: string } } } }).partUpdated;
    return updated ? [e.kind, updated.part.id, updated.part.text?.text] : removalOf(e);
  });
}

describe("DeleteMessage / DeletePart / UpdatePart", () => {
  it("DeleteMessage removes the message with its parts and emits message_removed + part_removed", async () => {
    const { sessionId, sent } = await twoMessages();
    const [m1, m2] = sent;
    const seq = await lastSeq(sessionId);
    await t.client.deleteMessage({ sessionId, messageId: idOf(m1) });
    expect(await rows(sessionId)).toEqual([[idOf(m2), [[m2.parts[0]!.id, "text"]]]]);
    expect(await eventsAfter(sessionId, seq)).toEqual([
      ["message_removed", idOf(m1)],
      ["part_removed", idOf(m1), m1.parts[0]!.id],
      ["part_removed", idOf(m1), m1.parts[1]!.id],
    ]);
    expect((await t.client.getSession({ sessionId })).session!.messageCount).toBe(1);
  });

  it("DeletePart removes one part and emits part_removed", async () => {
    const { sessionId, sent } = await twoMessages();
    const [m1, m2] = sent;
    const seq = await lastSeq(sessionId);
    await t.client.deletePart({ sessionId, messageId: idOf(m1), partId: m1.parts[0]!.id });
    expect(await rows(sessionId)).toEqual([
      [idOf(m1), [[m1.parts[1]!.id, "text"]]],
      [idOf(m2), [[m2.parts[0]!.id, "text"]]],
    ]);
    expect(await eventsAfter(sessionId, seq)).toEqual([["part_removed", idOf(m1), m1.parts[0]!.id]]);
  });

  it("UpdatePart replaces the part's data and emits part_updated", async () => {
    const { sessionId, sent } = await twoMessages();
    const [m1] = sent;
    const seq = await lastSeq(sessionId);
    const part = create(PartSchema, m1.parts[1]!);
    if (part.kind.case === "text") part.kind.value.text = "one b, edited";
    const { part: stored } = await t.client.updatePart({ sessionId, messageId: idOf(m1), part });
    expect(partText(stored)).toBe("one b, edited");
    const read = (await t.client.getMessage({ sessionId, messageId: idOf(m1) })).message!;
    expect(read.parts.map(partText)).toEqual(["one a", "one b, edited"]);
    expect(read.parts.map((p) => p.id)).toEqual(m1.parts.map((p) => p.id));
    expect(await eventsAfter(sessionId, seq)).toEqual([["part_updated", part.id, "one b, edited"]]);
  });

  it("UpdatePart bounds a text as a prompt's draft is (RESOURCE_EXHAUSTED on part.text.text over text_part_bytes); nothing written", async () => {
    const { sessionId, sent } = await twoMessages();
    const seq = await lastSeq(sessionId);
    const part = create(PartSchema, sent[0].parts[0]!);
    const max = t.ledger.deps.config.limits.text_part_bytes;
    if (part.kind.case === "text") part.kind.value.text = "é".repeat(max / 2 + 1);
    expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(sent[0]), part }))).toMatchObject({
      code: Code.ResourceExhausted,
      field: "part.text.text",
    });
    expect(await lastSeq(sessionId)).toBe(seq);
  });

  it("UpdatePart bounds a subtask's prompt, description and command the same way; nothing written", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const sent = (
      await t.client.prompt({ sessionId, noReply: true, parts: [{ kind: { case: "subtask", value: { prompt: "p", agent: "explore" } } }] })
    ).message!;
    const seq = await lastSeq(sessionId);
    const max = t.ledger.deps.config.limits.text_part_bytes;
    for (const name of ["prompt", "description", "command"] as const) {
      const part = clone(PartSchema, sent.parts[0]!);
      if (part.kind.case === "subtask") part.kind.value[name] = "x".repeat(max + 1);
      expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(sent), part }))).toMatchObject({
        code: Code.ResourceExhausted,
        field: `part.subtask.${name}`,
      });
    }
    expect(await lastSeq(sessionId)).toBe(seq);
  });

  // A probe, 2026-12-02: UpdatePart stored a 25 MB data: URL that Prompt refuses (2.6 s stall).
  it("UpdatePart bounds a file part's data: URL by data_url_bytes, as a prompt's draft; nothing written", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const sent = (
      await t.client.prompt({
        sessionId,
        noReply: true,
        parts: [{ kind: { case: "file", value: { mime: "application/octet-stream", url: "data:application/octet-stream;base64,AAAA" } } }],
      })
    ).message!;
    const seq = await lastSeq(sessionId);
    const max = t.ledger.deps.config.limits.data_url_bytes;
    const part = clone(
      PartSchema,
      sent.parts.find((p) => p.kind.case === "file")!,
    );
    if (part.kind.case === "file") part.kind.value.url = `data:application/octet-stream;base64,${Buffer.alloc(max + 3).toString("base64")}`;
    expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(sent), part }))).toMatchObject({
      code: Code.ResourceExhausted,
      field: "part.file.url",
    });
    expect(await lastSeq(sessionId)).toBe(seq);
  });

  it("unknown ids → NOT_FOUND: a message of another session, a part of another message", async () => {
    const { sessionId, sent } = await twoMessages();
    const [m1, m2] = sent;
    const other = await twoMessages();
    const before = await rows(sessionId);
    const notFound = (reason: string) => ({ code: Code.NotFound, reason });
    expect(await failure(t.client.deleteMessage({ sessionId, messageId: newId("msg") }))).toMatchObject(notFound("MESSAGE_NOT_FOUND"));
    expect(await failure(t.client.deleteMessage({ sessionId, messageId: idOf(other.sent[0]) }))).toMatchObject(
      notFound("MESSAGE_NOT_FOUND"),
    );
    expect(await failure(t.client.deleteMessage({ sessionId: newId("ses"), messageId: idOf(m1) }))).toMatchObject(
      notFound("SESSION_NOT_FOUND"),
    );
    expect(await failure(t.client.deletePart({ sessionId, messageId: idOf(m1), partId: newId("prt") }))).toMatchObject(
      notFound("PART_NOT_FOUND"),
    );
    expect(await failure(t.client.deletePart({ sessionId, messageId: idOf(m1), partId: m2.parts[0]!.id }))).toMatchObject(
      notFound("PART_NOT_FOUND"),
    );
    expect(await failure(t.client.deletePart({ sessionId, messageId: newId("msg"), partId: m1.parts[0]!.id }))).toMatchObject(
      notFound("MESSAGE_NOT_FOUND"),
    );
    const ghost = create(PartSchema, { ...m1.parts[0]!, id: newId("prt") });
    expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(m1), part: ghost }))).toMatchObject(notFound("PART_NOT_FOUND"));
    const elsewhere = create(PartSchema, { ...other.sent[0].parts[0]!, sessionId, messageId: idOf(m1) });
    expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(m1), part: elsewhere }))).toMatchObject(
      notFound("PART_NOT_FOUND"),
    );
    expect(await rows(sessionId)).toEqual(before);
  });

  it("UpdatePart refuses a changed kind, another message or session (INVALID_ARGUMENT naming the field)", async () => {
    const { sessionId, sent } = await twoMessages();
    const [m1, m2] = sent;
    const base = m1.parts[0]!;
    const invalid = (field: string) => ({ code: Code.InvalidArgument, reason: "INVALID_ARGUMENT", field });
    const asFile = create(PartSchema, {
      id: base.id,
      sessionId,
      messageId: idOf(m1),
      kind: { case: "file", value: { mime: "text/plain", url: "data:text/plain,x" } },
    });
    expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(m1), part: asFile }))).toMatchObject(invalid("part.kind"));
    const noKind = create(PartSchema, { id: base.id, sessionId, messageId: idOf(m1) });
    expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(m1), part: noKind }))).toMatchObject(invalid("part.kind"));
    // Moving: the part says another message than the request, or the request names another message.
    const moved = create(PartSchema, { ...base, messageId: idOf(m2) });
    expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(m1), part: moved }))).toMatchObject(invalid("part.message_id"));
    expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(m2), part: moved }))).toMatchObject(invalid("part.message_id"));
    const otherSession = create(PartSchema, { ...base, sessionId: newId("ses") });
    expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(m1), part: otherSession }))).toMatchObject(
      invalid("part.session_id"),
    );
    expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(m1) }))).toMatchObject({ code: Code.InvalidArgument });
    expect((await t.client.getMessage({ sessionId, messageId: idOf(m1) })).message!.parts.map(partText)).toEqual(["one a", "one b"]);
  });

  it("UpdatePart checks a file part's URL as a prompt's (INVALID_ARGUMENT on part.file.url); an MCP resource keeps its URI", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const url = `data:text/plain;base64,${Buffer.from("hi").toString("base64")}`;
    const sent = (
      await t.client.prompt({
        sessionId,
        noReply: true,
        parts: [{ kind: { case: "file", value: { mime: "text/plain", url, filename: "a.txt" } } }],
      })
    ).message!;
    const stored = sent.parts.find((p) => p.kind.case === "file")!;
    const withUrl = (value: string, source?: MessageInitShape<typeof FilePartSourceSchema>) =>
      create(PartSchema, {
        id: stored.id,
        sessionId,
        messageId: idOf(sent),
        kind: { case: "file", value: { mime: "text/plain", url: value, filename: "a.txt", source } },
      });
    for (const bad of ["javascript:alert(1)", "https://", "aGVsbG8gd29ybGQgaGVsbG8=", "data:image/png;base64,not base64!"]) {
      expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(sent), part: withUrl(bad) }))).toMatchObject({
        code: Code.InvalidArgument,
        field: "part.file.url",
      });
    }
    const resource = { kind: { case: "resource" as const, value: { clientName: "docs", uri: "skill://notes" } } };
    const { part } = await t.client.updatePart({ sessionId, messageId: idOf(sent), part: withUrl("skill://notes", resource) });
    expect(part?.kind.case === "file" && part.kind.value.url).toBe("skill://notes");
  });

  it("refuses all three while the session's loop runs (SESSION_BUSY); GetStatus shows it busy", async () => {
    const { sessionId, sent } = await twoMessages();
    const [m1] = sent;
    const before = await rows(sessionId);
    const stop = await hangLoop(t, t.fake, sessionId);
    try {
      const status = (await t.client.getStatus({})).statuses;
      expect(status[sessionId]?.status.case).toBe("busy");
      const busy = { code: Code.FailedPrecondition, reason: "SESSION_BUSY" };
      expect(await failure(t.client.deleteMessage({ sessionId, messageId: idOf(m1) }))).toMatchObject(busy);
      expect(await failure(t.client.deletePart({ sessionId, messageId: idOf(m1), partId: m1.parts[0]!.id }))).toMatchObject(busy);
      expect(await failure(t.client.updatePart({ sessionId, messageId: idOf(m1), part: m1.parts[0]! }))).toMatchObject(busy);
    } finally {
      await stop();
    }
    expect((await t.client.getStatus({})).statuses[sessionId]).toBeUndefined();
    expect((await rows(sessionId)).slice(0, 2)).toEqual(before);
    await t.client.deletePart({ sessionId, messageId: idOf(m1), partId: m1.parts[0]!.id });
  });
});

describe("ListChildren / GetStatus", () => {
  it("lists the sessions created with parent_id, newest first; a fork is not a child", async () => {
    const parent = (await t.client.createSession({ directory: t.dir, title: "parent" })).session!.id;
    const children = [];
    for (const title of ["c1", "c2", "c3"])
      children.push((await t.client.createSession({ directory: t.dir, title, parentId: parent })).session!);
    await t.client.forkSession({ sessionId: parent });
    const listed = (await t.client.listChildren({ sessionId: parent })).sessions;
    expect(listed.map((s) => [s.id, s.title, s.parentId])).toEqual([...children].reverse().map((s) => [s.id, s.title, parent]));
    expect((await t.client.listChildren({ sessionId: children[0]!.id })).sessions).toEqual([]);
    expect(await failure(t.client.listChildren({ sessionId: newId("ses") }))).toMatchObject({
      code: Code.NotFound,
      reason: "SESSION_NOT_FOUND",
    });
  });

  it("GetStatus leaves out idle sessions and those that never ran", async () => {
    const { sessionId } = await twoMessages();
    expect((await t.client.getStatus({})).statuses[sessionId]).toBeUndefined();
    for (const status of Object.values((await t.client.getStatus({})).statuses)) expect(["busy", "retry"]).toContain(status.status.case);
  });
});
