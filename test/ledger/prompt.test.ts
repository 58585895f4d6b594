import { mkdtemp, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { newId } from "../../src/ids.js";
import { connectError as rejection } from "../support/errors.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { file, mcpResource, partText, promptOnce, shape, text } from "../support/prompt.js";

let t: TestLedger;
let pluginDir: string;
beforeAll(async () => {
  pluginDir = await mkdtemp(path.join(os.tmpdir(), "ledger-plugin-"));
  await writeFile(
    path.join(pluginDir, "shout.mjs"),
    `export function chatMessage({ parts }) {
       for (const part of parts) {
         if (part.text?.text === "explode") throw new Error("plugin refused");
         if (part.text && !part.text.synthetic) part.text.text = part.text.text.replace("[shout]", "SHOUT");
       }
     }`,
  );
  t = await startTestLedger({ plugin: [path.join(pluginDir, "shout.mjs")] });
  await writeFile(path.join(t.dir, "README.md"), "# demo\nA demo project.\n");
});
afterAll(() => t?.close());

/** Every row of a session, straight from the tables, in stored order. */
async function tables(sessionId: string) {
  const db = t.ledger.deps.db;
  const session = await db.selectFrom("session").selectAll().where("id", "=", sessionId).executeTakeFirstOrThrow();
  const messages = await db
    .selectFrom("message")
    .select(["id", "position", "role"])
    .where("session_id", "=", sessionId)
    .orderBy("position")
    .execute();
  const parts = await db
    .selectFrom("part")
    .select(["id", "message_id", "position", "kind"])
    .where("session_id", "=", sessionId)
    .orderBy("position")
    .execute();
  const events = await db.selectFrom("session_event").select(["seq", "kind"]).where("session_id", "=", sessionId).orderBy("seq").execute();
  return { session, messages, parts, events };
}

describe("stored shape", () => {
  it("stores text + file draft as message, parts and events in server order", async () => {
    const { sessionId, message } = await promptOnce(t.client, t.dir, [
      text("explain this project"),
      file(pathToFileURL(path.join(t.dir, "README.md")).href),
    ]);
    const user = message.message!.kind;
    expect(user.case).toBe("user");
    expect(user.value!.id).toMatch(/^msg_[0-9A-HJKMNP-TV-Z]{26}$/);
    expect(user.case === "user" && user.value.agent).toBe("build");
    expect(message.parts.map((p) => [p.kind.case, p.kind.case === "text" ? p.kind.value.synthetic : undefined])).toEqual([
      ["text", false],
      ["text", true],
      ["text", true],
      ["file", undefined],
    ]);
    const ids = message.parts.map((p) => p.id);
    for (const id of ids) expect(id).toMatch(/^prt_[0-9A-HJKMNP-TV-Z]{26}$/);
    expect([...ids].sort()).toEqual(ids);
    expect(message.parts.every((p) => p.sessionId === sessionId && p.messageId === user.value!.id)).toBe(true);

    const rows = await tables(sessionId);
    expect(rows.messages.map((m) => [m.id, Number(m.position), m.role])).toEqual([[user.value!.id, 1, "user"]]);
    expect(rows.parts.map((p) => [p.id, Number(p.position), p.kind])).toEqual(ids.map((id, i) => [id, i + 2, i < 3 ? "text" : "file"]));
    expect(rows.events.map((e) => [Number(e.seq), e.kind])).toEqual([
      [1, "session_updated"],
      [2, "agent_switched"],
      [3, "message_updated"],
      [4, "part_updated"],
      [5, "part_updated"],
      [6, "part_updated"],
      [7, "part_updated"],
      [8, "synthetic"],
      [9, "prompted"],
      [10, "session_updated"],
    ]);
    expect(Number(rows.session.last_seq)).toBe(10);
    const touched = await t.ledger.deps.db
      .selectFrom("session_event")
      .select("data")
      .where("session_id", "=", sessionId)
      .where("seq", "=", 10)
      .executeTakeFirstOrThrow();
    expect(touched.data).toMatchObject({ sessionUpdated: { session: { messageCount: 1 } } });
    expect(Number(rows.session.last_position)).toBe(5);
  });

  it("stores an agent mention as the agent part plus a synthetic task hint", async () => {
    const { message } = await promptOnce(t.client, t.dir, [
      text("find the config"),
      { kind: { case: "agent", value: { name: "explore" } } },
    ]);
    expect(message.parts.map(shape)).toEqual([
      { kind: "text", synthetic: false, text: "find the config" },
      { kind: "agent", name: "explore" },
      {
        kind: "text",
        synthetic: true,
        text: " Use the above message and context to generate a prompt and call the task tool with subagent: explore",
      },
    ]);
  });

  it("stores a subtask as given and an http(s) file as given", async () => {
    const { message } = await promptOnce(t.client, t.dir, [
      { kind: { case: "subtask", value: { prompt: "count files", description: "count", agent: "general" } } },
      file("https://example.com/spec.md", "text/markdown", "spec.md"),
    ]);
    expect(message.parts.map(shape)).toEqual([
      { kind: "subtask", agent: "general", prompt: "count files" },
      { kind: "file", mime: "text/markdown", filename: "spec.md", url: "https://example.com/spec.md" },
    ]);
  });

  it("answers an MCP resource with the failure text while MCP is not configured", async () => {
    const { message } = await promptOnce(t.client, t.dir, [
      text("read it"),
      {
        kind: {
          case: "file",
          value: {
            mime: "text/plain",
            filename: "doc",
            url: "file:///doc",
            source: { kind: { case: "resource", value: { clientName: "docs", uri: "docs://readme" } } },
          },
        },
      },
    ]);
    expect(message.parts.slice(1).map(shape)).toEqual([
      { kind: "text", synthetic: true, text: "Reading MCP resource: doc (docs://readme)" },
      {
        kind: "text",
        synthetic: true,
        text: 'Failed to read MCP resource doc: MCP server "docs" is not configured (no MCP servers are configured)',
      },
    ]);
  });

  it("names an MCP resource sent without a filename by its URI, and one sent as a full path by its last segment", async () => {
    const { message } = await promptOnce(t.client, t.dir, [
      text("read them"),
      mcpResource("docs", "docs://readme"),
      mcpResource("docs", "docs://todo", "/home/me/notes/todo.md"),
    ]);
    const failure = 'MCP server "docs" is not configured (no MCP servers are configured)';
    expect(message.parts.slice(1).map(shape)).toEqual([
      { kind: "text", synthetic: true, text: "Reading MCP resource: docs://readme" },
      { kind: "text", synthetic: true, text: `Failed to read MCP resource docs://readme: ${failure}` },
      { kind: "text", synthetic: true, text: "Reading MCP resource: todo.md (docs://todo)" },
      { kind: "text", synthetic: true, text: `Failed to read MCP resource todo.md: ${failure}` },
    ]);
  });

  it("keeps client part ids and pages ListMessages oldest first", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const partId = newId("prt");
    for (let i = 0; i < 5; i++) {
      await t.client.prompt({
        sessionId,
        noReply: true,
        parts: [i === 0 ? { kind: { case: "text", value: { id: partId, text: "0" } } } : text(String(i))],
      });
    }
    const first = await t.client.listMessages({ sessionId, pageSize: 2 });
    const second = await t.client.listMessages({ sessionId, pageSize: 2, pageToken: first.nextPageToken });
    const third = await t.client.listMessages({ sessionId, pageSize: 2, pageToken: second.nextPageToken });
    const texts = [...first.messages, ...second.messages, ...third.messages].map((m) => partText(m.parts[0]));
    expect(texts).toEqual(["0", "1", "2", "3", "4"]);
    expect(third.nextPageToken).toBe("");
    expect(first.messages[0]!.parts[0]!.id).toBe(partId);
  });
});

describe("chat.message plugin hook", () => {
  it("may change parts before they are stored", async () => {
    const { message } = await promptOnce(t.client, t.dir, [text("please [shout]")]);
    expect(partText(message.parts[0])).toBe("please SHOUT");
  });
});

describe("atomicity", () => {
  it("writes nothing when a plugin throws", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const before = await tables(sessionId);
    const error = await rejection(t.client.prompt({ sessionId, noReply: true, agent: "plan", parts: [text("explode")] }));
    expect(error.code).toBe(Code.Internal);
    expect(error.rawMessage).not.toContain("plugin refused");
    expect(await tables(sessionId)).toEqual(before);
  });

  it("rolls back the whole prompt when a part insert fails mid-transaction", async () => {
    const { sessionId, message } = await promptOnce(t.client, t.dir, [text("first")]);
    const taken = message.parts[0]!.id;
    const before = await tables(sessionId);
    const error = await rejection(
      t.client.prompt({
        sessionId,
        noReply: true,
        agent: "plan",
        model: { providerId: "a", modelId: "b" },
        parts: [text("ok"), { kind: { case: "text", value: { id: taken, text: "dup" } } }],
      }),
    );
    expect(error.code).toBe(Code.AlreadyExists);
    expect(error.rawMessage).toContain("parts[1].id");
    const after = await tables(sessionId);
    expect(after).toEqual(before);
    expect(after.session.data).toEqual(before.session.data);
  });

  it("a part id given twice in one prompt → INVALID_ARGUMENT on the second, naming the first; nothing written", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const before = await tables(sessionId);
    const id = "prt_01M8N5N64AYAFYM716YNCVWCW9";
    const error = await rejection(
      t.client.prompt({
        sessionId,
        noReply: true,
        parts: [text("a"), { kind: { case: "text", value: { id, text: "b" } } }, { kind: { case: "text", value: { id, text: "c" } } }],
      }),
    );
    expect([error.code, error.rawMessage]).toEqual([
      Code.InvalidArgument,
      `parts[2].id: repeats parts[1].id (${id}): each part needs its own id`,
    ]);
    expect(await tables(sessionId)).toEqual(before);
  });
});

describe("idempotency key (message_id)", () => {
  it("returns the stored message for the same id and content, with no new rows", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const messageId = newId("msg");
    const first = await t.client.prompt({ sessionId, messageId, noReply: true, parts: [text("once")] });
    const rowsAfterFirst = await tables(sessionId);
    const again = await t.client.prompt({ sessionId, messageId, noReply: true, parts: [text("once")] });
    expect(again.message).toEqual(first.message);
    expect(await tables(sessionId)).toEqual(rowsAfterFirst);
    expect(rowsAfterFirst.messages).toHaveLength(1);
  });

  it("answers ALREADY_EXISTS for the same id with different content", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const messageId = newId("msg");
    await t.client.prompt({ sessionId, messageId, noReply: true, parts: [text("once")] });
    const error = await rejection(t.client.prompt({ sessionId, messageId, noReply: true, parts: [text("twice")] }));
    expect(error.code).toBe(Code.AlreadyExists);
    expect(error.findDetails(ErrorInfoSchema)[0]?.metadata).toMatchObject({ field: "message_id", id: messageId });
    expect((await t.client.listMessages({ sessionId })).messages).toHaveLength(1);
  });

  it("answers ALREADY_EXISTS for an id stored in another session, writing nothing", async () => {
    const first = (await t.client.createSession({ directory: t.dir })).session!.id;
    const second = (await t.client.createSession({ directory: t.dir })).session!.id;
    const messageId = newId("msg");
    await t.client.prompt({ sessionId: first, messageId, noReply: true, parts: [text("once")] });
    const before = await tables(second);
    const error = await rejection(t.client.prompt({ sessionId: second, messageId, noReply: true, parts: [text("once")] }));
    expect(error.code).toBe(Code.AlreadyExists);
    expect(error.findDetails(ErrorInfoSchema)[0]?.metadata).toMatchObject({ field: "message_id", id: messageId });
    expect(await tables(second)).toEqual(before);
    expect((await t.client.listMessages({ sessionId: first })).messages).toHaveLength(1);
  });

  it("stores one message when the same prompt races itself", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const messageId = newId("msg");
    const results = await Promise.all(
      Array.from({ length: 8 }, () => t.client.prompt({ sessionId, messageId, noReply: true, parts: [text("race")] })),
    );
    for (const r of results) expect(r.message).toEqual(results[0]!.message);
    expect((await tables(sessionId)).messages).toHaveLength(1);
  });
});

describe("errors", () => {
  it("answers NOT_FOUND for an unknown session", async () => {
    const error = await rejection(t.client.prompt({ sessionId: newId("ses"), noReply: true, parts: [text("x")] }));
    expect(error.code).toBe(Code.NotFound);
    expect(error.findDetails(ErrorInfoSchema)[0]?.reason).toBe("SESSION_NOT_FOUND");
  });

  it("answers NOT_FOUND with the visible agents for an unknown agent, writing nothing", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const before = await tables(sessionId);
    const error = await rejection(t.client.prompt({ sessionId, noReply: true, agent: "nobody", parts: [text("x")] }));
    expect(error.code).toBe(Code.NotFound);
    expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({
      reason: "AGENT_NOT_FOUND",
      metadata: { agent: "nobody", available: "build,plan,general,explore" },
    });
    expect(await tables(sessionId)).toEqual(before);
  });

  it("answers INVALID_ARGUMENT for empty parts", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const error = await rejection(t.client.prompt({ sessionId, noReply: true, parts: [] }));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toContain("parts");
  });

  it("drops whitespace-only text drafts next to others and refuses a prompt of only blanks", async () => {
    const { message } = await promptOnce(t.client, t.dir, [text("  \n"), text("real"), text("")]);
    expect(message.parts.map(shape)).toEqual([{ kind: "text", synthetic: false, text: "real" }]);
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const error = await rejection(t.client.prompt({ sessionId, noReply: true, parts: [text(" "), text("\t")] }));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toContain("parts: has no content");
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
  });

  it("answers PERMISSION_DENIED for a file outside the session directory", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const error = await rejection(t.client.prompt({ sessionId, noReply: true, parts: [text("x"), file("file:///etc/hostname")] }));
    expect(error.code).toBe(Code.PermissionDenied);
    expect(error.rawMessage).toContain("parts[1].file.url");
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
  });
});
