import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { buildConfig } from "../../src/config/config.js";
import { newId } from "../../src/ids.js";
import { configFileSchema } from "../../src/config/schema.js";
import { connectError } from "../support/errors.js";
import { startFakeModelLedger, startTestLedger, type TestLedger } from "../support/ledger.js";
import { waitFor } from "../support/wait.js";
import { file, text } from "../support/prompt.js";
import { storedEvents } from "../support/stored.js";

// Which directories sessions may use (docs/security.md). Without `session_directories` a caller
// that may write picked any directory, `/` included, and so read any file the server can; with
// it, CreateSession's directory must be one of them or inside one, compared canonically. The
// kernel's special directories are never a session directory.

let base: string;
let allowed: string; // session_directories: ["<base>/projects"]
let outside: string;
let open: TestLedger; // no session_directories
let confined: TestLedger;

beforeAll(async () => {
  base = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-session-dirs-")));
  allowed = path.join(base, "projects");
  outside = path.join(base, "elsewhere");
  await mkdir(path.join(allowed, "app", "src"), { recursive: true });
  await mkdir(outside);
  await symlink(outside, path.join(allowed, "leak")); // inside as written, outside once resolved
  await symlink(path.join(allowed, "app"), path.join(base, "app-link")); // outside as written, inside once resolved
  open = await startTestLedger({
    command: {
      hello: { template: "say hello to $1", description: "greets" },
      notes: { template: "summarize @notes.txt", description: "names a file" },
    },
  });
  confined = await startTestLedger({ session_directories: [allowed] });
});
afterAll(async () => {
  await open?.close();
  await confined?.close();
  await rm(base, { recursive: true, force: true });
});

/** The sessions `t` lists (ids), to check that a refusal stored nothing. */
const listed = async (t: TestLedger) => (await t.client.listSessions({})).sessions.map((s) => s.id).sort();

async function refused(t: TestLedger, directory: string): Promise<string> {
  const before = await listed(t);
  const error = await connectError(t.client.createSession({ directory }));
  expect(error.code).toBe(Code.PermissionDenied);
  expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({
    reason: "PATH_NOT_ALLOWED",
    metadata: { field: "directory", path: directory },
  });
  expect(await listed(t)).toEqual(before);
  return error.rawMessage;
}

/**
 * Sends `call` with a new message_id while `dir` (the session's directory) exists, deletes `dir`,
 * and expects the same call again to answer what it stored, and one with another message_id to
 * be refused (SESSION_DIRECTORY_MISSING), with nothing written by either.
 */
async function expectRetryAnswered(dir: string, sessionId: string, call: (messageId: string) => Promise<unknown>): Promise<void> {
  const messageId = newId("msg");
  const first = await call(messageId);
  await rm(dir, { recursive: true });
  const events = await storedEvents(open.ledger.deps.db, sessionId);
  expect(await call(messageId)).toEqual(first);
  const error = await connectError(call(newId("msg")));
  expect(error.findDetails(ErrorInfoSchema)[0]?.reason).toBe("SESSION_DIRECTORY_MISSING");
  expect(await storedEvents(open.ledger.deps.db, sessionId)).toEqual(events);
}

/** A new directory at `dir` and a session of `open` in it. */
async function sessionIn(dir: string) {
  await mkdir(dir);
  return { dir, session: (await open.client.createSession({ directory: dir })).session! };
}

/**
 * Every call that works on a session in its directory, on `open`: the three prompt RPCs (with
 * `draft` after a text), Shell, ResumeSession, ForkSession, and Revert (to `first`) and Unrevert,
 * which put files back in the session directory.
 */
function workOnSession(
  sessionId: string,
  first: string,
  draft: ReturnType<typeof text>,
): Array<() => AsyncIterable<unknown> | Promise<unknown>> {
  const parts = [text("after"), draft];
  return [
    () => open.client.prompt({ sessionId, noReply: true, parts }),
    () => open.client.promptAsync({ sessionId, noReply: true, parts }),
    () => open.client.promptStream({ sessionId, noReply: true, parts }),
    () => open.client.command({ sessionId, command: "hello", arguments: "you", noReply: true, parts: [draft] }),
    () => open.client.shell({ sessionId, agent: "build", command: "cat /etc/hostname" }),
    () => open.client.resumeSession({ sessionId }),
    () => open.client.forkSession({ sessionId }),
    () => open.client.revert({ sessionId, messageId: first }),
    () => open.client.unrevert({ sessionId }),
  ];
}

describe("session_directories in ledger.json", () => {
  it("is resolved against the config file's directory, like roots; absent means any directory", () => {
    const config = buildConfig(
      configFileSchema.parse({ session_directories: ["../projects", "/srv/a"] }),
      "/etc/ledger/ledger.json",
      "/etc/ledger",
    );
    expect(config.sessionDirectories).toEqual(["/etc/projects", "/srv/a"]);
    expect(buildConfig(configFileSchema.parse({}), undefined, "/").sessionDirectories).toBeUndefined();
  });
});

describe("a session whose directory session_directories no longer allows (created before they were set)", () => {
  it("gets no prompt, Command, Shell, ResumeSession, fork, Revert or Unrevert (PERMISSION_DENIED on session_id); nothing stored; reads still work", async () => {
    const session = (await open.client.createSession({ directory: outside })).session!;
    const first = (await open.client.prompt({ sessionId: session.id, noReply: true, parts: [text("before")] })).message!.message!.kind
      .value!.id;
    const config = open.ledger.deps.config;
    config.sessionDirectories = [allowed]; // as after a restart with the new setting
    try {
      const events = await storedEvents(open.ledger.deps.db, session.id);
      const why = `session_id: ${outside} (the directory of session ${session.id}) is outside the directories sessions may use (session_directories): create a session inside them`;
      for (const call of workOnSession(session.id, first, text("after"))) {
        const error = await connectError(call());
        expect([error.code, error.rawMessage]).toEqual([Code.PermissionDenied, why]);
        expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({
          reason: "PATH_NOT_ALLOWED",
          metadata: { field: "session_id", path: outside },
        });
      }
      expect(await storedEvents(open.ledger.deps.db, session.id)).toEqual(events);
      expect((await open.client.listMessages({ sessionId: session.id })).messages).toHaveLength(1);
    } finally {
      config.sessionDirectories = undefined;
    }
  });

  // A review, 2026-12-03: the stored path was compared, and the check followed the link.
  it("nor does one whose directory was replaced by a link leading out of them", async () => {
    const { dir: replaced, session } = await sessionIn(path.join(allowed, "replaced"));
    const first = (await open.client.prompt({ sessionId: session.id, noReply: true, parts: [text("before")] })).message!.message!.kind
      .value!.id;
    await rm(replaced, { recursive: true });
    await symlink(outside, replaced);
    const config = open.ledger.deps.config;
    config.sessionDirectories = [allowed];
    try {
      const events = await storedEvents(open.ledger.deps.db, session.id);
      for (const call of workOnSession(session.id, first, text("after"))) {
        const error = await connectError(call());
        expect([error.code, error.findDetails(ErrorInfoSchema)[0]?.reason]).toEqual([Code.PermissionDenied, "PATH_NOT_ALLOWED"]);
      }
      expect(await storedEvents(open.ledger.deps.db, session.id)).toEqual(events);
    } finally {
      config.sessionDirectories = undefined;
    }
  });
});

// A trial, 2026-12-02: with its directory deleted, a session's file draft was refused as "leads
// through a symlink outside the session directory", ForkSession blamed a `directory` field it does
// not have, and Shell stored a call that failed with "spawn /bin/sh ENOENT".
describe("a session whose directory was deleted", () => {
  it("gets no prompt, Command, Shell, ResumeSession, fork, Revert or Unrevert (FAILED_PRECONDITION SESSION_DIRECTORY_MISSING); nothing stored; works again once it is back", async () => {
    const { dir: gone, session } = await sessionIn(path.join(base, "gone"));
    const first = (await open.client.prompt({ sessionId: session.id, noReply: true, parts: [text("before")] })).message!.message!.kind
      .value!.id;
    await rm(gone, { recursive: true });
    const events = await storedEvents(open.ledger.deps.db, session.id);
    const why = `the directory of session ${session.id}, ${gone}, no longer exists on the server (or is not a directory): recreate it, or create a session in an existing directory`;
    for (const call of workOnSession(session.id, first, file(`file://${gone}/a.txt`))) {
      const error = await connectError(call());
      expect([error.code, error.rawMessage]).toEqual([Code.FailedPrecondition, why]);
      expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({
        reason: "SESSION_DIRECTORY_MISSING",
        metadata: { session_id: session.id, directory: gone },
      });
    }
    expect(await storedEvents(open.ledger.deps.db, session.id)).toEqual(events);
    // Reads still work, and so does the session once its directory is back.
    expect((await open.client.listMessages({ sessionId: session.id })).messages).toHaveLength(1);
    await mkdir(gone);
    await open.client.prompt({ sessionId: session.id, noReply: true, parts: [text("after")] });
    expect((await open.client.listMessages({ sessionId: session.id })).messages).toHaveLength(2);
  });
  // A trial, 2026-12-03, went on to swap a directory for a link to /etc: without
  // session_directories or tenants, a session may use any directory, so it then works there.
  it("replaced by a link, without session_directories: it works where the link leads (any directory may be used)", async () => {
    const { dir: moved, session } = await sessionIn(path.join(base, "moved"));
    await rm(moved, { recursive: true });
    await symlink(outside, moved);
    await open.client.prompt({ sessionId: session.id, noReply: true, parts: [text("after")] });
    expect((await open.client.listMessages({ sessionId: session.id })).messages).toHaveLength(1);
  });

  // A review, 2026-12-03: the directory was checked before the stored prompt was looked up, so
  // the retry of a prompt the server had acknowledged (its answer lost on the way) was refused.
  it("a retry of a stored prompt or command (same message_id and content) still returns it; a new one is refused", async () => {
    const { dir: gone, session } = await sessionIn(path.join(base, "gone-retry"));
    await expectRetryAnswered(gone, session.id, (messageId) =>
      open.client.prompt({ sessionId: session.id, messageId, noReply: true, parts: [text("acknowledged")] }),
    );
    await mkdir(gone);
    await expectRetryAnswered(gone, session.id, (messageId) =>
      open.client.command({ sessionId: session.id, messageId, command: "hello", arguments: "you", noReply: true }),
    );

    // A template naming a file: the file cannot be looked up again, so the retry gets the
    // directory's refusal, not ALREADY_EXISTS for content that only seems different.
    await mkdir(gone);
    await writeFile(path.join(gone, "notes.txt"), "a note\n");
    const named = { sessionId: session.id, messageId: newId("msg"), command: "notes", noReply: true };
    expect((await open.client.command(named)).message!.parts.map((p) => p.kind.case)).toEqual(["text", "text", "text", "file"]);
    await rm(gone, { recursive: true });
    const missing = await connectError(open.client.command(named));
    expect(missing.findDetails(ErrorInfoSchema)[0]?.reason).toBe("SESSION_DIRECTORY_MISSING");
  });

  // A review, 2026-12-03: a retry that would only join the run going on was refused too.
  it("a retry of a prompt whose answer is still running joins it and gets the answer", async () => {
    const f = await startFakeModelLedger();
    try {
      const dir = path.join(base, "gone-running");
      await mkdir(dir);
      const sessionId = (await f.client.createSession({ directory: dir })).session!.id;
      f.fake.push({ kind: "stream", chunks: ["one ", "two ", "three"].map((w) => ({ text: w })), delayMs: 200 });
      const request = { sessionId, messageId: newId("msg"), parts: [text("slowly")] };
      await f.client.promptAsync(request);
      await waitFor("the run", () => f.ledger.deps.replier!.isRunning(sessionId));
      await rm(dir, { recursive: true });
      const answer = (await f.client.prompt(request)).message!;
      expect(answer.parts.flatMap((p) => (p.kind.case === "text" ? [p.kind.value.text] : []))).toEqual(["one two three"]);
    } finally {
      await f.close();
    }
  });
});

describe("CreateSession's directory", () => {
  it.each(["/proc", "/proc/self", "/sys/kernel", "/dev"])(
    "is never %s, a special filesystem directory (PERMISSION_DENIED, nothing stored)",
    async (dir) => {
      expect(await refused(open, dir)).toBe(`directory: ${dir} is a special filesystem path (/proc, /sys and /dev are never read)`);
    },
  );

  it("without session_directories may be any directory the server can read, / included (the documented default)", async () => {
    expect((await open.client.createSession({ directory: "/" })).session!.directory).toBe("/");
    expect((await open.client.createSession({ directory: outside })).session!.directory).toBe(outside);
  });

  it("with session_directories must be one of them or inside one", async () => {
    expect((await confined.client.createSession({ directory: allowed })).session!.directory).toBe(allowed);
    const inside = path.join(allowed, "app", "src");
    expect((await confined.client.createSession({ directory: inside })).session!.directory).toBe(inside);
    for (const dir of ["/", base, outside, `${allowed}-sibling`])
      expect(await refused(confined, dir)).toBe(`directory: ${dir} is outside the directories sessions may use (session_directories)`);
  });

  it("of a fork is its source's, and of a child (parent_id) is checked like any other", async () => {
    const inside = (await confined.client.createSession({ directory: allowed })).session!;
    expect((await confined.client.forkSession({ sessionId: inside.id })).session!.directory).toBe(allowed);
    const child = await confined.client.createSession({ directory: path.join(allowed, "app"), parentId: inside.id });
    expect(child.session!.directory).toBe(path.join(allowed, "app"));
    const error = await connectError(confined.client.createSession({ directory: outside, parentId: inside.id }));
    expect([error.code, error.rawMessage]).toEqual([
      Code.PermissionDenied,
      `directory: ${outside} is outside the directories sessions may use (session_directories)`,
    ]);
  });

  it.each(["/..", "//", "/./"])("compares the normalized path: an allowed directory followed by %s", async (tail) => {
    const dir = `${allowed}${tail}`;
    const resolved = path.resolve(dir);
    if (resolved === allowed || resolved.startsWith(`${allowed}/`))
      expect((await confined.client.createSession({ directory: dir })).session!.directory).toBe(resolved);
    else expect(await refused(confined, dir)).toBe(`directory: ${dir} is outside the directories sessions may use (session_directories)`);
  });

  it("is checked as written, then resolved: a link out of an allowed directory is refused, and so is a path outside that links in", async () => {
    const leak = path.join(allowed, "leak");
    expect(await refused(confined, leak)).toBe(`directory: ${leak} is outside the directories sessions may use (session_directories)`);
    // As written it is outside: refused before the filesystem is asked (a caller learns nothing
    // about paths outside the allowed directories).
    const appLink = path.join(base, "app-link");
    expect(await refused(confined, appLink)).toBe(
      `directory: ${appLink} is outside the directories sessions may use (session_directories)`,
    );
  });

  it("an allowed directory reached through a link in its configured spelling is stored resolved", async () => {
    const t = await startTestLedger({ session_directories: [path.join(base, "app-link")] });
    try {
      const session = (await t.client.createSession({ directory: path.join(base, "app-link", "src") })).session!;
      expect(session.directory).toBe(path.join(allowed, "app", "src"));
    } finally {
      await t.close();
    }
  });
});
