import { mkdir, symlink } from "node:fs/promises";
import path from "node:path";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newId } from "../../src/ids.js";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { codeOf as code, connectError, failure } from "../support/errors.js";
import { startFakeModelLedger, startTestLedger, type TestLedger } from "../support/ledger.js";
import { watchUntil } from "../support/event-stream.js";
import { idOf, listPages, storedEvents } from "../support/stored.js";
import { partText, text } from "../support/prompt.js";

let t: TestLedger;
beforeAll(async () => {
  t = await startTestLedger({ provider: { a: { models: { one: {} } }, b: { models: { two: { variants: { high: {} } } } } } });
});
afterAll(() => t?.close());

describe("session CRUD", () => {
  it("creates a session in a resolved directory with defaults", async () => {
    await mkdir(path.join(t.dir, "real"));
    await symlink(path.join(t.dir, "real"), path.join(t.dir, "link"));
    const { session } = await t.client.createSession({ directory: path.join(t.dir, "link") });
    expect(session!.id).toMatch(/^ses_[0-9A-HJKMNP-TV-Z]{26}$/);
    expect(session!.directory).toBe(path.join(t.dir, "real"));
    expect(session!.title).toMatch(/^New session - \d{4}-/);
    expect((await t.client.getSession({ sessionId: session!.id })).session).toEqual(session);
  });

  it("requires a directory: INVALID_ARGUMENT naming it and saying what is expected, nothing stored", async () => {
    const before = await t.ledger.deps.db
      .selectFrom("session")
      .select((eb) => eb.fn.countAll().as("n"))
      .executeTakeFirstOrThrow();
    for (const directory of [undefined, "", "   "]) {
      const error = await connectError(t.client.createSession({ directory, title: "no directory" }));
      expect(error.code).toBe(Code.InvalidArgument);
      expect(error.rawMessage).toBe(
        "directory: is required: the absolute path of an existing project directory on the server (the ledger CLI sends its working directory)",
      );
      expect(error.findDetails(ErrorInfoSchema)[0]?.metadata.field).toBe("directory");
      expect(error.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => v.field)).toEqual(["directory"]);
    }
    const after = await t.ledger.deps.db
      .selectFrom("session")
      .select((eb) => eb.fn.countAll().as("n"))
      .executeTakeFirstOrThrow();
    expect(Number(after.n)).toBe(Number(before.n));
  });

  it("refuses a relative directory (the server's working directory is not the client's)", async () => {
    const error = await connectError(t.client.createSession({ directory: "src" }));
    expect([error.code, error.rawMessage]).toEqual([
      Code.InvalidArgument,
      `directory: "src" is relative: send the absolute path of the project directory (the server's working directory is not the client's)`,
    ]);
    const filter = await connectError(t.client.listSessions({ directory: "src" }));
    expect([filter.code, filter.rawMessage]).toEqual([
      Code.InvalidArgument,
      `directory: "src" is relative: filter by the absolute path of the project directory`,
    ]);
  });

  it("refuses a directory that does not exist and an unknown parent", async () => {
    expect(await code(t.client.createSession({ directory: path.join(t.dir, "missing") }))).toBe(Code.InvalidArgument);
    expect(await code(t.client.createSession({ directory: t.dir, parentId: newId("ses") }))).toBe(Code.NotFound);
    expect(await code(t.client.getSession({ sessionId: newId("ses") }))).toBe(Code.NotFound);
  });

  it("refuses a malformed model on CreateSession and on a subtask draft with INVALID_ARGUMENT naming the field, storing nothing", async () => {
    const before = await t.ledger.deps.db
      .selectFrom("session")
      .select((eb) => eb.fn.countAll().as("n"))
      .executeTakeFirstOrThrow();
    const refused = await failure(t.client.createSession({ directory: t.dir, model: { providerId: "", modelId: "x" } }));
    expect(refused).toMatchObject({ code: Code.InvalidArgument, field: "model.provider_id" });
    const slash = await failure(t.client.createSession({ directory: t.dir, model: { providerId: "a/b", modelId: "x" } }));
    expect(slash).toMatchObject({ code: Code.InvalidArgument, field: "model.provider_id" });
    const after = await t.ledger.deps.db
      .selectFrom("session")
      .select((eb) => eb.fn.countAll().as("n"))
      .executeTakeFirstOrThrow();
    expect(Number(after.n)).toBe(Number(before.n));

    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const subtask = {
      kind: {
        case: "subtask" as const,
        value: { prompt: "look", description: "d", agent: "explore", model: { providerId: "a", modelId: " " } },
      },
    };
    expect(await failure(t.client.prompt({ sessionId, noReply: true, parts: [text("go"), subtask] }))).toMatchObject({
      code: Code.InvalidArgument,
      field: "parts[1].subtask.model.model_id",
    });
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
  });

  it("lists newest updated first, paged, and updates titles", async () => {
    const dir = path.join(t.dir, "listing");
    await mkdir(dir);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await t.client.createSession({ directory: dir, title: `s${i}` })).session!.id);
    await t.client.updateSession({ sessionId: ids[0]!, title: "renamed" });
    const page1 = await t.client.listSessions({ directory: dir, pageSize: 2 });
    const page2 = await t.client.listSessions({ directory: dir, pageSize: 2, pageToken: page1.nextPageToken });
    expect([...page1.sessions, ...page2.sessions].map((s) => s.title)).toEqual(["renamed", "s2", "s1"]);
    expect(page2.nextPageToken).toBe("");
    expect(await code(t.client.listSessions({ pageToken: "garbage" }))).toBe(Code.InvalidArgument);
    const forged = (cursor: object) => Buffer.from(JSON.stringify(cursor)).toString("base64url");
    expect(await code(t.client.listSessions({ pageToken: forged({ t: "zzz", id: "x" }) }))).toBe(Code.InvalidArgument);
    expect(await code(t.client.listMessages({ sessionId: ids[0]!, pageToken: forged({ p: "abc" }) }))).toBe(Code.InvalidArgument);
    // A token continues only the listing it came from: another directory filter, or none, is
    // INVALID_ARGUMENT naming it (a trial, 2026-12-04: it was taken, skipping sessions).
    const other = path.join(t.dir, "listing-other");
    await mkdir(other);
    for (const directory of [other, ""]) {
      const error = await connectError(t.client.listSessions({ directory, pageSize: 2, pageToken: page1.nextPageToken }));
      expect([error.code, error.rawMessage]).toEqual([
        Code.InvalidArgument,
        "page_token: continues a listing with another directory filter; send the same directory as the call that returned it, or no page_token to start over",
      ]);
    }
    // The same directory spelled otherwise (compared resolved) continues it.
    const again = await t.client.listSessions({ directory: `${dir}/`, pageSize: 2, pageToken: page1.nextPageToken });
    expect(again.sessions.map((s) => s.title)).toEqual(["s1"]);
  });

  // A trial, 2026-12-02: an empty title erased it, and a request changing nothing moved the
  // session to the top of "most recently updated" with a session_updated event.
  it("UpdateSession: a blank title is INVALID_ARGUMENT; a request that changes nothing writes nothing", async () => {
    const session = (await t.client.createSession({ directory: t.dir, title: "kept" })).session!;
    const events = await storedEvents(t.ledger.deps.db, session.id);
    // Zero-width and other invisible format characters show nothing either (a trial, 2026-12-02).
    for (const title of ["", "  \n", " \u200b ", "\u00a0\u2060\ufeff"]) {
      const error = await connectError(t.client.updateSession({ sessionId: session.id, title }));
      expect([error.code, error.rawMessage]).toEqual([
        Code.InvalidArgument,
        "title: must not be empty or blank; leave title out to keep the session's title",
      ]);
    }
    expect((await t.client.updateSession({ sessionId: session.id })).session).toEqual(session);
    expect((await t.client.updateSession({ sessionId: session.id, title: "kept" })).session).toEqual(session);
    expect(await storedEvents(t.ledger.deps.db, session.id)).toEqual(events);
    expect((await t.client.getSession({ sessionId: session.id })).session).toEqual(session);

    const renamed = (await t.client.updateSession({ sessionId: session.id, title: "new" })).session!;
    expect(renamed.title).toBe("new");
    expect((await storedEvents(t.ledger.deps.db, session.id)).map((e) => e.kind)).toEqual([
      ...events.map((e) => e.kind),
      "session_updated",
    ]);
    expect(await code(t.client.updateSession({ sessionId: newId("ses"), title: "x" }))).toBe(Code.NotFound);
    // CreateSession takes a blank title as none: the default title.
    for (const title of [" \t", "\u200b"])
      expect((await t.client.createSession({ directory: t.dir, title })).session!.title).toMatch(/^New session - \d{4}-/);
  });

  it("every session_updated event carries the time_updated its write stored (Prompt, Revert, Unrevert, UpdateSession)", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const prompt = await t.client.prompt({ sessionId, noReply: true, parts: [text("a")] });
    await t.client.prompt({ sessionId, noReply: true, parts: [text("b")] });
    const times: string[] = [];
    const seen = async () => times.push(timestampDate((await t.client.getSession({ sessionId })).session!.timeUpdated!).toISOString());
    await seen();
    await t.client.revert({ sessionId, messageId: idOf(prompt.message!) });
    await seen();
    await t.client.unrevert({ sessionId });
    await seen();
    await t.client.updateSession({ sessionId, title: "renamed" });
    await seen();
    const events = await watchUntil(
      t.client,
      sessionId,
      (e) => e.kind.case === "sessionUpdated" && e.kind.value.session?.title === "renamed",
    );
    const updates = events.flatMap((e) =>
      e.kind.case === "sessionUpdated"
        ? [[timestampDate(e.time!).toISOString(), timestampDate(e.kind.value.session!.timeUpdated!).toISOString()]]
        : [],
    );
    // Each event's session is the session after its write: time_updated is the write's time.
    for (const [time, timeUpdated] of updates) expect(timeUpdated).toBe(time);
    expect(updates.map(([, timeUpdated]) => timeUpdated).slice(-4)).toEqual(times);
  });

  it("deletes a session with its messages, parts and events", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    await t.client.prompt({ sessionId, noReply: true, parts: [text("bye")] });
    await t.client.deleteSession({ sessionId });
    const db = t.ledger.deps.db;
    for (const table of ["message", "part", "session_event"] as const) {
      const rows = await db.selectFrom(table).select("session_id").where("session_id", "=", sessionId).execute();
      expect(rows, table).toEqual([]);
    }
    expect(await code(t.client.getSession({ sessionId }))).toBe(Code.NotFound);
    expect(await code(t.client.deleteSession({ sessionId }))).toBe(Code.NotFound);
  });
});

describe("ForkSession", () => {
  it("copies the messages before the given one with new ids, in order", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir, title: "origin" })).session!.id;
    const sent = [];
    for (const word of ["one", "two", "three"])
      sent.push((await t.client.prompt({ sessionId, noReply: true, parts: [text(word)] })).message!);
    const cut = sent[2]!.message!.kind.value!.id;
    const { session: fork } = await t.client.forkSession({ sessionId, messageId: cut });
    expect(fork!.title).toBe("origin (fork)");
    const copied = (await t.client.listMessages({ sessionId: fork!.id })).messages;
    expect(copied.map((m) => partText(m.parts[0]))).toEqual(["one", "two"]);
    const originalIds = new Set(sent.flatMap((m) => [m.message!.kind.value!.id, ...m.parts.map((p) => p.id)]));
    for (const m of copied) {
      expect(originalIds.has(m.message!.kind.value!.id)).toBe(false);
      expect(m.message!.kind.value!.sessionId).toBe(fork!.id);
      for (const p of m.parts) expect(originalIds.has(p.id)).toBe(false);
    }
    expect(await code(t.client.forkSession({ sessionId, messageId: newId("msg") }))).toBe(Code.NotFound);
  });

  // A review, 2026-12-03: ForkSession now copies a page at a time; no test spanned pages with
  // answers (parent_id remapped across pages) or stopped at a message_id.
  it("copies page by page (page_bytes): answers keep their prompts as parents across pages; the log has each copy once, in order", async () => {
    const f = await startFakeModelLedger({ limits: { page_bytes: 300 } });
    try {
      const sessionId = (await f.client.createSession({ directory: f.dir })).session!.id;
      for (const word of ["one", "two", "three"]) {
        f.fake.push({ kind: "stream", chunks: [{ text: `answer ${word}` }] });
        await f.client.prompt({ sessionId, parts: [text(word)] });
      }
      const all = async (id: string) => (await listPages(f.client, { sessionId: id, pageSize: 100 }, (m) => m)).flat();
      const stored = await all(sessionId);
      expect(stored.map((m) => m.message!.kind.case)).toEqual(["user", "assistant", "user", "assistant", "user", "assistant"]);
      // Up to the third prompt: two prompts and their answers.
      const fork = (await f.client.forkSession({ sessionId, messageId: idOf(stored[4]!) })).session!.id;
      const source = stored.slice(0, 4);
      const copied = await all(fork);
      const shape = (m: (typeof copied)[number]) => [
        m.message!.kind.case,
        m.parts.map((p) => p.kind.case),
        m.parts.map((p) => partText(p)),
      ];
      expect(copied.map(shape)).toEqual(source.map(shape));
      const ids = copied.map(idOf);
      expect(copied.map((m) => (m.message!.kind.case === "assistant" ? m.message!.kind.value.parentId : ""))).toEqual([
        "",
        ids[0],
        "",
        ids[2],
      ]);
      const log = await storedEvents(f.ledger.deps.db, fork);
      expect(log.map((e) => Number(e.seq))).toEqual(log.map((_, i) => i + 1));
      const perMessage = copied.flatMap((m) => ["message_updated", ...m.parts.map(() => "part_updated")]);
      expect(log.map((e) => e.kind)).toEqual(["session_updated", ...perMessage, "session_updated"]);
    } finally {
      await f.close();
    }
  });

  it("keeps a fork's title within the 1,024 characters the API allows, however often a title is forked", async () => {
    // Astral characters: the limit counts code points, not UTF-16 units.
    const title = "😀".repeat(1024);
    const sessionId = (await t.client.createSession({ directory: t.dir, title })).session!.id;
    const fork = (await t.client.forkSession({ sessionId })).session!;
    expect(fork.title).toBe(`${"😀".repeat(1017)} (fork)`);
    const forkOfFork = (await t.client.forkSession({ sessionId: fork.id })).session!;
    expect(forkOfFork.title).toBe(`${"😀".repeat(1017)} (fork)`);
    // The fork's title is one the API itself accepts.
    expect((await t.client.updateSession({ sessionId: fork.id, title: `${fork.title}` })).session!.title).toBe(fork.title);
    expect(
      (await t.client.forkSession({ sessionId: (await t.client.createSession({ directory: t.dir, title: "short" })).session!.id })).session!
        .title,
    ).toBe("short (fork)");
    // The cut falls between letters: "e" + U+0301 pairs lose a whole pair, never the accent alone.
    const accented = "e\u0301".repeat(512);
    const cut = (
      await t.client.forkSession({ sessionId: (await t.client.createSession({ directory: t.dir, title: accented })).session!.id })
    ).session!.title;
    expect(cut).toBe(`${"e\u0301".repeat(508)} (fork)`);
    // One cluster longer than the room (a letter with 1,023 combining marks): cut by code points.
    const stacked = `e${"\u0301".repeat(1023)}`;
    const zalgo = (
      await t.client.forkSession({ sessionId: (await t.client.createSession({ directory: t.dir, title: stacked })).session!.id })
    ).session!.title;
    expect(zalgo).toBe(`${Array.from(stacked).slice(0, 1017).join("")} (fork)`);
  });

  it("is one transaction: a copy that fails leaves no fork behind, and the next fork works", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir, title: "fails to copy" })).session!.id;
    for (const word of ["kept", "refused by the database"]) await t.client.prompt({ sessionId, noReply: true, parts: [text(word)] });
    const forks = async () =>
      (await sql<{ id: string }>`SELECT id FROM session WHERE data->>'title' = 'fails to copy (fork)'`.execute(t.ledger.deps.db)).rows;
    // A real failure in the middle of the copy: the database refuses the second message's part.
    await sql`CREATE FUNCTION refuse_copy() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.session_id <> ${sql.lit(sessionId)} AND NEW.data::text LIKE '%refused by the database%' THEN
          RAISE EXCEPTION 'refused for the test';
        END IF;
        RETURN NEW;
      END $$`.execute(t.ledger.deps.db);
    await sql`CREATE TRIGGER refuse_copy BEFORE INSERT ON part FOR EACH ROW EXECUTE FUNCTION refuse_copy()`.execute(t.ledger.deps.db);
    try {
      expect(await code(t.client.forkSession({ sessionId }))).toBe(Code.Internal);
      expect(await forks()).toEqual([]);
    } finally {
      await sql`DROP TRIGGER refuse_copy ON part`.execute(t.ledger.deps.db);
      await sql`DROP FUNCTION refuse_copy()`.execute(t.ledger.deps.db);
    }
    const { session: fork } = await t.client.forkSession({ sessionId });
    expect((await forks()).map((row) => row.id)).toEqual([fork!.id]);
    const copied = (await t.client.listMessages({ sessionId: fork!.id })).messages;
    expect(copied.map((m) => partText(m.parts[0]))).toEqual(["kept", "refused by the database"]);
    expect((await storedEvents(t.ledger.deps.db, fork!.id)).map((e) => [e.seq, e.kind])).toEqual([
      [1, "session_updated"],
      [2, "message_updated"],
      [3, "part_updated"],
      [4, "message_updated"],
      [5, "part_updated"],
      [6, "session_updated"],
    ]);
  });
});

describe("model selection end to end", () => {
  it("keeps the session's last model and records model switches", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const first = await t.client.prompt({
      sessionId,
      noReply: true,
      model: { providerId: "b", modelId: "two" },
      variant: "high",
      parts: [text("1")],
    });
    const second = await t.client.prompt({ sessionId, noReply: true, parts: [text("2")] });
    const user = (m: typeof first.message) => (m!.message!.kind.case === "user" ? m!.message!.kind.value : undefined);
    expect(user(first.message)?.model).toMatchObject({ providerId: "b", modelId: "two" });
    expect(user(first.message)?.variant).toBe("high");
    expect(user(second.message)?.model).toMatchObject({ providerId: "b", modelId: "two" });
    expect(user(second.message)?.variant).toBeUndefined();
    const session = (await t.client.getSession({ sessionId })).session!;
    expect(session.model).toMatchObject({ providerId: "b", modelId: "two" });
    expect(await storedEvents(t.ledger.deps.db, sessionId, { kind: "model_switched" })).toHaveLength(1);
  });

  it("stores permission rules from the deprecated tools map, replacing the session's", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    await t.client.prompt({ sessionId, noReply: true, tools: { bash: false, read: true }, parts: [text("1")] });
    await t.client.prompt({ sessionId, noReply: true, tools: { edit: false }, parts: [text("2")] });
    const session = (await t.client.getSession({ sessionId })).session!;
    expect(session.permission.map((r) => [r.permission, r.pattern, r.action])).toEqual([["edit", "*", 2]]);
    expect(session.messageCount).toBe(2);
  });
});
