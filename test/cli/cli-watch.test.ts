/**
 * `ledger watch` and `ledger fork` against a running ledger (--url): watch replays the stored
 * events after --after, follows live ones, and ends when the session is deleted or at Ctrl-C;
 * fork copies a session, whole or before a message. A trial (2026-12-03) found neither command.
 */
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, startCli } from "../support/cli.js";
import { TEST_ENGINE } from "../support/db.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";

let t: TestLedger;
beforeAll(async () => {
  t = await startTestLedger();
});
afterAll(() => t?.close());

const env = { PATH: process.env.PATH };
const ledger = (...args: string[]) => runCli([...args, "--url", t.ledger.url], { cwd: t.dir, env });

/** A session holding `texts` as noReply prompts, in order; returns it and the user message ids. */
async function sessionWith(...texts: string[]): Promise<{ sessionId: string; messageIds: string[] }> {
  const { session } = await t.client.createSession({ directory: t.dir });
  const messageIds: string[] = [];
  for (const body of texts) {
    const res = await t.client.prompt({ sessionId: session!.id, noReply: true, parts: [text(body)] });
    messageIds.push(res.message!.message!.kind.value!.id);
  }
  return { sessionId: session!.id, messageIds };
}

describe("ledger watch", () => {
  it("replays the stored events after --after, one line each, then follows live ones until the session is deleted", async () => {
    const { sessionId, messageIds } = await sessionWith("first prompt");
    const json = startCli(["watch", sessionId, "--json", "--url", t.ledger.url], { cwd: t.dir, env });
    const human = startCli(["watch", sessionId, "--url", t.ledger.url], { cwd: t.dir, env });
    await json.waitForStdout(/"prompted"/);
    await human.waitForStdout(/prompted/);

    // Live: a second prompt, then the deletion that ends both streams.
    const second = await t.client.prompt({ sessionId, noReply: true, parts: [text("second prompt")] });
    await human.waitForStdout(/second prompt/);
    await t.client.deleteSession({ sessionId });
    const [jsonRun, humanRun] = await Promise.all([json.done, human.done]);
    expect(jsonRun).toMatchObject({ code: 0, stderr: "" });
    expect(humanRun).toMatchObject({ code: 0, stderr: "" });

    const events = jsonRun.stdout
      .trimEnd()
      .split("\n")
      .map((line) => JSON.parse(line) as { seq: string; sessionId: string } & Record<string, unknown>);
    const seqs = events.map((e) => Number(e.seq));
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    expect(events.every((e) => e.sessionId === sessionId)).toBe(true);
    expect(Object.keys(events.at(-1)!)).toContain("sessionDeleted");

    // The same events, one line each (a noReply prompt has no deltas), in the same order.
    const lines = humanRun.stdout.trimEnd().split("\n");
    expect(lines.map((line) => Number(/^#(\d+) {2}/.exec(line)?.[1]))).toEqual(seqs);
    const user = (id: string) => `message ${id}  user  agent=build  model=(none)`;
    expect(lines).toContain(`#${seqs[lines.findIndex((l) => l.includes(user(messageIds[0]!)))]}  messageUpdated  ${user(messageIds[0]!)}`);
    expect(lines.filter((l) => / {2}prompted {2}/.test(l))).toEqual([
      expect.stringMatching(new RegExp(`^#\\d+  prompted  ${messageIds[0]}  noReply$`)),
      expect.stringMatching(new RegExp(`^#\\d+  prompted  ${second.message!.message!.kind.value!.id}  noReply$`)),
    ]);
    expect(lines.filter((l) => / {2}partUpdated {2}/.test(l))).toEqual([
      expect.stringMatching(/^#\d+ {2}partUpdated {2}prt_[0-9A-Z]{26} {2}text {6}first prompt$/),
      expect.stringMatching(/^#\d+ {2}partUpdated {2}prt_[0-9A-Z]{26} {2}text {6}second prompt$/),
    ]);
    expect(lines.at(-1)).toMatch(new RegExp(`^#${seqs.at(-1)}  sessionDeleted  ${sessionId}  `));
  });

  it("--after skips what the reader has seen; Ctrl-C ends the watch with exit 0", async () => {
    const { sessionId } = await sessionWith("one", "two");
    const full = startCli(["watch", sessionId, "--json", "--url", t.ledger.url], { cwd: t.dir, env });
    await full.waitForStdout(/"prompted"[\s\S]*"prompted"/);
    full.signal("SIGINT");
    const fullRun = await full.done;
    expect(fullRun).toMatchObject({ code: 0, stderr: "" });
    const seqs = fullRun.stdout
      .trimEnd()
      .split("\n")
      .map((line) => (JSON.parse(line) as { seq: string }).seq);
    const middle = seqs[Math.floor(seqs.length / 2)]!;

    const rest = startCli(["watch", sessionId, "--json", "--after", middle, "--url", t.ledger.url], { cwd: t.dir, env });
    await rest.waitForStdout(new RegExp(`"seq":"${seqs.at(-1)}"`));
    rest.signal("SIGINT");
    const restRun = await rest.done;
    expect(restRun).toMatchObject({ code: 0, stderr: "" });
    expect(
      restRun.stdout
        .trimEnd()
        .split("\n")
        .map((line) => (JSON.parse(line) as { seq: string }).seq),
    ).toEqual(seqs.slice(seqs.indexOf(middle) + 1));
  });

  it("without --url: the stored events, then exit 0 (nothing new can happen; a trial, 2026-12-04: it waited forever holding the database)", async () => {
    const db = path.join(await mkdtemp(path.join(os.tmpdir(), "ledger-watch-db-")), "db");
    try {
      const local = (...args: string[]) => runCli([...args, "--db", db], { cwd: t.dir, env });
      const stored = await local("prompt", "--no-reply", "kept");
      expect(stored.code, stored.stderr).toBe(0);
      const sessionId = /^session (ses_\w+)$/m.exec(stored.stdout)![1]!;
      const run = await local("watch", sessionId, "--json");
      expect(run).toMatchObject({ code: 0, stderr: "" });
      const seqs = run.stdout
        .trimEnd()
        .split("\n")
        .map((line) => Number((JSON.parse(line) as { seq: string }).seq));
      expect(seqs).toEqual(seqs.map((_, i) => i + 1));
      // From the last seq: nothing to print, exit 0; past it: the error, and no "go on" advice.
      expect(await local("watch", sessionId, "--after", String(seqs.at(-1)))).toMatchObject({ code: 0, stdout: "", stderr: "" });
      const ahead = await local("watch", sessionId, "--after", "999");
      expect(ahead).toMatchObject({ code: 1, stdout: "" });
      expect(ahead.stderr).toBe(`error: OutOfRange: --after 999 is ahead of the session's log (last seq ${seqs.at(-1)})\n`);
    } finally {
      await rm(path.dirname(db), { recursive: true, force: true });
    }
  });

  // The embedded case ends after the stored events; a shared database may get new ones from
  // another process, so with DATABASE_URL the watch follows them (a review, 2026-12-03: untested).
  it.skipIf(TEST_ENGINE !== "postgres")(
    "with DATABASE_URL and no --url: the stored events, then live ones another process writes, until Ctrl-C (exit 0)",
    async () => {
      const { sessionId } = await sessionWith("stored before");
      const watch = startCli(["watch", sessionId, "--json"], { cwd: t.dir, env: { ...env, DATABASE_URL: t.database.url! } });
      await watch.waitForStdout(/stored before/);
      await t.client.prompt({ sessionId, noReply: true, parts: [text("written while watching")] });
      await watch.waitForStdout(/written while watching/);
      watch.signal("SIGINT");
      const run = await watch.done;
      expect(run).toMatchObject({ code: 0, stderr: "" });
      const events = run.stdout
        .trimEnd()
        .split("\n")
        .map((line) => JSON.parse(line) as { seq: string });
      const seqs = events.map((e) => Number(e.seq));
      expect(seqs).toEqual(seqs.map((_, i) => i + 1));
      expect(run.stdout.match(/"prompted"/g)).toHaveLength(2);
    },
  );

  it("an unknown session is NotFound; a bad --after is a usage error", async () => {
    const missing = await ledger("watch", "ses_01JD000000000000000000000A");
    expect(missing).toMatchObject({ code: 1, stdout: "" });
    expect(missing.stderr).toMatch(/^error: NotFound: .*ses_01JD000000000000000000000A/);
    for (const bad of ["-1", "soon"]) {
      const run = await ledger("watch", "ses_01JD000000000000000000000A", "--after", bad);
      expect(run).toMatchObject({ code: 1, stdout: "" });
      expect(run.stderr).toBe(
        `error: option '--after <seq>' argument '${bad}' is invalid. expected an event seq: a whole number from 0\n(ledger <command> --help shows the usage)\n`,
      );
    }
  });
});

describe("ledger fork", () => {
  it("copies the whole session, or the messages before --message, into a new session it names", async () => {
    const { sessionId, messageIds } = await sessionWith("keep me", "and me", "not me");
    const whole = await ledger("fork", sessionId);
    expect(whole).toMatchObject({ code: 0, stderr: "", stdout: expect.stringMatching(/^session ses_[0-9A-HJKMNP-TV-Z]{26}\n$/) });
    const wholeId = whole.stdout.trim().split(" ")[1]!;
    expect(wholeId).not.toBe(sessionId);
    const texts = async (id: string) =>
      (await t.client.listMessages({ sessionId: id })).messages.map((m) => (m.parts[0]!.kind.value as { text: string }).text);
    expect(await texts(wholeId)).toEqual(["keep me", "and me", "not me"]);

    const before = await ledger("fork", sessionId, "--message", messageIds[2]!, "--json");
    expect(before).toMatchObject({ code: 0, stderr: "" });
    const forked = JSON.parse(before.stdout) as { id: string; directory: string };
    expect(before.stdout.endsWith("}\n") && !before.stdout.slice(0, -1).includes("\n")).toBe(true);
    expect(forked.directory).toBe(t.dir);
    expect(await texts(forked.id)).toEqual(["keep me", "and me"]);

    const unknown = await ledger("fork", sessionId, "--message", "msg_01JD000000000000000000000A");
    expect(unknown).toMatchObject({ code: 1, stdout: "" });
    expect(unknown.stderr).toMatch(/^error: NotFound: /);
  });
});
