/**
 * The `--db` directory as a new user meets it (a trial, 2026-12-03): a command interrupted while
 * it made the database leaves nothing half made, an empty `--db` or a folder that is no
 * database is refused before anything is written into it, a file is named as a file, and a few
 * commands started at once on one database take turns instead of failing. Embedded PGlite only
 * (with DATABASE_URL set `--db` is not used).
 */
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { finished, runCli, spawnCli, waitForOutput, type CliRun } from "../support/cli.js";
import { TEST_ENGINE } from "../support/db.js";

const TIMEOUT = 120_000;
let dir: string;

beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-cli-db-")));
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The environment of a command on the embedded database: no DATABASE_URL, no config override. */
function env(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const base = { ...process.env };
  delete base.DATABASE_URL;
  delete base.LEDGER_CONFIG;
  return { ...base, ...extra };
}

/** Runs `ledger <args>` in-process in `cwd`. */
function ledger(cwd: string, ...args: string[]): Promise<CliRun> {
  return runCli(args, { cwd, env: env() });
}

async function entries(folder: string): Promise<string[]> {
  return (await readdir(folder)).sort();
}

describe.skipIf(TEST_ENGINE !== "pglite")("the --db directory", () => {
  it(
    "an empty --db, a folder holding other files and a file are refused, naming why, and nothing is written",
    async () => {
      const project = path.join(dir, "project");
      await mkdir(project);
      await writeFile(path.join(project, "notes.txt"), "my notes\n");
      await writeFile(path.join(project, "spec.md"), "# spec\n");

      // An empty --db would be the working directory itself.
      const empty = await ledger(project, "prompt", "--db", "", "--no-reply", "hi");
      expect(empty).toMatchObject({ code: 1, stdout: "" });
      expect(empty.stderr).toBe("error: --db: expected a directory (or :memory:), got an empty string\n");

      // A typo'd path that names a folder of files: not a database, and not made one.
      const folder = await ledger(dir, "prompt", "--db", project, "--no-reply", "hi");
      expect(folder).toMatchObject({ code: 1, stdout: "" });
      expect(folder.stderr).toBe(
        `error: embedded database ${project} cannot be used: it is not empty and holds no database ` +
          "(no PG_VERSION among its 2 entries): name a new or empty directory to create one, or an existing database\n",
      );
      expect(await entries(project)).toEqual(["notes.txt", "spec.md"]);

      // A file: said so, not "EEXIST ... mkdir".
      const file = path.join(project, "notes.txt");
      const onFile = await ledger(dir, "sessions", "--db", file);
      expect(onFile).toMatchObject({ code: 1, stdout: "" });
      expect(onFile.stderr).toBe(`error: embedded database ${file} cannot be used: it is a file, not a directory\n`);
      expect(await entries(project)).toEqual(["notes.txt", "spec.md"]);

      const badWait = await runCli(["sessions", "--db", path.join(dir, "never")], {
        cwd: dir,
        env: env({ LEDGER_DB_LOCK_WAIT_MS: "soon" }),
      });
      expect(badWait).toMatchObject({ code: 1, stdout: "" });
      expect(badWait.stderr).toBe('error: LEDGER_DB_LOCK_WAIT_MS: expected milliseconds from 0 to 600000, got "soon"\n');
      expect(await entries(dir)).toEqual(["project"]);
    },
    TIMEOUT,
  );

  it(
    "a command interrupted while it makes a new database leaves no half-made one: the next command works",
    async () => {
      const cwd = path.join(dir, "interrupted");
      await mkdir(cwd);
      const db = path.join(cwd, "db");
      // SIGINT once the copy of the template is under way (PG_VERSION, an early entry, is there,
      // the 40 MB of base/ and pg_wal/ are not yet), wherever the copy is made.
      const child = spawnCli(["prompt", "--db", db, "--no-reply", "first"], { cwd, env: env() });
      const exited = finished(child);
      let seen: string[] = [];
      for (let i = 0; i < 4000 && child.exitCode === null; i++) {
        seen = (await readdir(cwd)).filter((name) => name !== "db.lock" && name !== "db");
        if ([db, ...seen.map((name) => path.join(cwd, name))].some((copy) => existsSync(path.join(copy, "PG_VERSION")))) {
          child.kill("SIGINT");
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
      const run = await exited;
      expect(run.code === 0 || run.signal === "SIGINT", run.stderr).toBe(true);
      // The copy was staged next to the database (hidden), never in it.
      expect(
        seen.every((name) => /^\.db\.\d+-[0-9a-f]{8}\.tmp$/.test(name)),
        seen.join(","),
      ).toBe(true);

      const next = await ledger(cwd, "prompt", "--db", db, "--no-reply", "second");
      expect(next.code, next.stderr).toBe(0);
      // Each prompt without --session makes a session: the interrupted one only if it got that far.
      const sessions = await ledger(cwd, "sessions", "--db", db, "--json");
      expect(sessions.code, sessions.stderr).toBe(0);
      expect(sessions.stdout.trim().split("\n")).toHaveLength(run.code === 0 ? 2 : 1);
      // The dead process's staged copy is gone.
      expect(await entries(cwd)).toEqual(["db"]);
    },
    TIMEOUT,
  );

  it(
    "three commands started at once on one new database take turns: all succeed, all prompts stored",
    async () => {
      const cwd = path.join(dir, "parallel");
      await mkdir(cwd);
      const db = path.join(cwd, "db");
      const runs = await Promise.all(
        ["one", "two", "three"].map((text) => finished(spawnCli(["prompt", "--db", db, "--no-reply", text], { cwd, env: env() }))),
      );
      for (const run of runs) expect(run.code, run.stderr).toBe(0);
      const waited = runs.filter((run) => run.stderr.includes(`waiting up to 10 s for the embedded database ${db}`));
      expect(waited.length).toBeGreaterThanOrEqual(1);
      expect(waited[0]!.stderr).toContain(`another ledger process uses it (a running "ledger serve"? then use --url)\n`);

      // Three prompts without a session each made a session of their own.
      const sessions = await ledger(cwd, "sessions", "--db", db, "--json");
      expect(sessions.stdout.trim().split("\n")).toHaveLength(3);
    },
    TIMEOUT,
  );

  it(
    "a command that only reads makes no database: a missing --db reads as empty, says so, and is not created",
    async () => {
      const cwd = path.join(dir, "reads");
      await mkdir(cwd);
      // A trial, 2026-12-04: a mistyped --db made this whole tree and a 39 MB database.
      const typo = path.join(cwd, "no-such", "deeper", "db");
      const note = `note: no embedded database at ${typo} yet (nothing is stored there); this command only reads, so it makes none\n`;
      const listed = await ledger(cwd, "sessions", "--db", typo);
      expect(listed).toEqual({ code: 0, stdout: "no sessions\n", stderr: note });
      const json = await ledger(cwd, "sessions", "--json", "--db", typo);
      expect(json).toEqual({ code: 0, stdout: "", stderr: note });
      const messages = await ledger(cwd, "messages", "ses_01M8N3PWC98KEGMQ42T22BSJ1B", "--db", typo);
      expect(messages.code).toBe(1);
      expect(
        messages.stderr.startsWith(`${note}error: NotFound: session_id: session ses_01M8N3PWC98KEGMQ42T22BSJ1B not found`),
        messages.stderr,
      ).toBe(true);
      // The default ./.ledger/db too.
      const byDefault = await ledger(cwd, "sessions");
      expect(byDefault.stdout).toBe("no sessions\n");
      expect(byDefault.stderr).toContain(`note: no embedded database at ${path.join(cwd, ".ledger", "db")} yet`);
      for (const command of ["diff", "todo", "watch", "permissions"]) {
        const run = await ledger(cwd, command, "ses_01M8N3PWC98KEGMQ42T22BSJ1B", "--db", typo);
        expect(run.stderr.startsWith(note), `${command}: ${run.stderr}`).toBe(true);
      }
      expect(await entries(cwd)).toEqual([]);

      // A directory another process is making now (it holds the lock while it copies the
      // template in) is waited for as before, not read as empty (a review, 2026-12-04).
      const making = path.join(cwd, "making");
      await mkdir(making);
      await mkdir(`${making}.lock`);
      const held = await runCli(["sessions", "--db", making], { cwd, env: env({ LEDGER_DB_LOCK_WAIT_MS: "0" }) });
      expect(held.code).toBe(1);
      expect(held.stderr).toContain(`the embedded database ${making} is in use by another ledger process`);
      expect(held.stderr).not.toContain("note: no embedded database");
      await rm(making, { recursive: true });
      await rm(`${making}.lock`, { recursive: true });
      expect(await entries(cwd)).toEqual([]);

      // Once a prompt made it, the same command reads it, without a note.
      await ledger(cwd, "prompt", "--no-reply", "hi", "--db", typo).then((run) => expect(run.code, run.stderr).toBe(0));
      const after = await ledger(cwd, "sessions", "--db", typo);
      expect(after.code).toBe(0);
      expect(after.stdout).toMatch(/^ses_/);
      expect(after.stderr).toBe("");
    },
    TIMEOUT,
  );

  it(
    "a serve whose lock is taken from it stops at once with exit 1 and the reason, not an uncaught error",
    async () => {
      const cwd = path.join(dir, "lost-lock");
      await mkdir(cwd);
      const db = path.join(cwd, "db");
      const serve = spawnCli(["serve", "--port", "0", "--db", db], { cwd, env: env({ LEDGER_LOG_LEVEL: "warn" }) });
      const exited = finished(serve);
      await waitForOutput(serve, /listening on/, exited);
      // As another process that took the lock over, or a user cleaning up, would.
      await rm(`${db}.lock`, { recursive: true });
      const run = await exited;
      expect(run.code, run.stderr).toBe(1);
      expect(run.stderr).toContain(`error: the lock of the embedded database ${db} was lost (`);
      expect(run.stderr).toContain("stopping, so that two processes never write it at once\n");
      expect(run.stderr).not.toMatch(/\n\s+at /);
    },
    TIMEOUT,
  );
});
