import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { finished, runCli, spawnCli, startCli, waitForOutput, type CliRun as Run } from "../support/cli.js";
import { ADMIN_URL, createTestDatabase, TEST_ENGINE, type TestDatabase } from "../support/db.js";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { compatibleProvider } from "../support/mock-models.js";

// The CLI's commands run in-process (`main` with buffers for stdout/stderr, see
// test/support/cli.ts); the end-to-end tests that need a real process (`--version` through
// bin/ledger.js, `ledger serve` and its signals, Ctrl-C) spawn one.
const SESSION_LINE = /^session (ses_[0-9A-HJKMNP-TV-Z]{26})$/;
const MESSAGE_LINE = /^message (msg_[0-9A-HJKMNP-TV-Z]{26}) {2}user {2}agent=build {2}model=\(none\)$/;
const PART_LINE = /^ +(\d+)\. (prt_[0-9A-HJKMNP-TV-Z]{26}) {2}(\S+) +(.*)$/;
const LISTENING = /^session-ledger listening on http:\/\/127\.0\.0\.1:\d+$/;
const CLI_TIMEOUT = 120_000;

let dir: string;
let database: TestDatabase | undefined;

beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-cli-")));
  await writeFile(path.join(dir, "package.json"), `${JSON.stringify({ name: "demo-project", version: "1.0.0" })}\n`);
  if (TEST_ENGINE === "postgres") database = await createTestDatabase("postgres");
});

afterAll(async () => {
  await database?.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The CLI's environment: DATABASE_URL only for the Postgres engine, never a config override. */
function childEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.DATABASE_URL;
  delete env.LEDGER_CONFIG;
  if (database?.url) env.DATABASE_URL = database.url;
  return { ...env, ...extra };
}

/** `--db <dir>/db` for the PGlite engine (with DATABASE_URL set it is not needed). */
function dbArgs(): string[] {
  return TEST_ENGINE === "pglite" ? ["--db", path.join(dir, "db")] : [];
}

/** Spawns `node bin/ledger.js <args>` in `cwd` (default: the temp dir). */
function spawnLedger(args: string[], cwd = dir) {
  return spawnCli(args, { cwd, env: childEnv() });
}

/** Runs `ledger <args>` in-process to completion in `cwd` (default: the temp dir). */
function inDir(cwd: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return runCli(args, { cwd, env: childEnv(env) });
}

/** Runs `ledger <args>` in-process to completion in the temp dir. */
async function ledger(...args: string[]): Promise<Run> {
  return inDir(dir, args);
}

/** Parses JSON Lines: every line one compact JSON value, the output ending with a newline. */
function jsonLines(stdout: string): unknown[] {
  expect(stdout.endsWith("\n") || stdout === "").toBe(true);
  return stdout
    .split("\n")
    .slice(0, -1)
    .map((line) => {
      expect(line).not.toMatch(/^\s|\n/);
      return JSON.parse(line) as unknown;
    });
}

function expectOk(run: Run): void {
  expect(run.code, `exit code; stderr:\n${run.stderr}`).toBe(0);
}

/** Parses the human output of `ledger prompt`: the session, the message, and one entry per part. */
function parsePromptOutput(stdout: string) {
  const lines = stdout.split("\n");
  const sessionId = SESSION_LINE.exec(lines[0])?.[1];
  const messageId = MESSAGE_LINE.exec(lines[1])?.[1];
  const parts = lines.flatMap((line) => {
    const m = PART_LINE.exec(line);
    return m ? [{ n: Number(m[1]), id: m[2], kind: m[3], rest: m[4] }] : [];
  });
  return { sessionId, messageId, parts };
}

interface JsonPart {
  id: string;
  sessionId: string;
  messageId: string;
  text?: { text: string; synthetic?: boolean };
  file?: { mime: string; filename: string; url: string };
}
interface JsonMessage {
  message: { user: { id: string; sessionId: string; agent: string } };
  parts: JsonPart[];
}

describe("ledger prompt / messages / sessions", () => {
  it(
    "prompt --no-reply with --file prints the session and the parts; --json, messages and sessions agree",
    async () => {
      const packageUrl = pathToFileURL(path.join(dir, "package.json")).href;
      const run = await ledger("prompt", "--no-reply", "explain this project", "--file", "package.json", ...dbArgs());
      expectOk(run);
      const printed = parsePromptOutput(run.stdout);
      expect(printed.sessionId).toBeDefined();
      expect(printed.messageId).toBeDefined();
      expect(printed.parts.map((p) => [p.n, p.kind])).toEqual([
        [1, "text"],
        [2, "text"],
        [3, "text"],
        [4, "file"],
      ]);
      expect(printed.parts[0].rest).toBe("explain this project");
      expect(printed.parts[1].rest).toMatch(/^\[synthetic\] Called the Read tool/);
      expect(printed.parts[2].rest).toMatch(/^\[synthetic\] /);
      expect(run.stdout).toContain("demo-project");
      expect(printed.parts[3].rest).toBe(`text/plain  package.json  ${packageUrl}`);

      const json = await ledger("prompt", "--no-reply", "--json", "explain this project", "--file", "package.json", ...dbArgs());
      expectOk(json);
      const stored = JSON.parse(json.stdout) as JsonMessage;
      const user = stored.message.user;
      expect(user.id).toMatch(/^msg_[0-9A-HJKMNP-TV-Z]{26}$/);
      expect(user.sessionId).toMatch(/^ses_[0-9A-HJKMNP-TV-Z]{26}$/);
      expect(user.sessionId).not.toBe(printed.sessionId);
      expect(user.agent).toBe("build");
      expect(stored.parts.map((p) => (p.text ? `text${p.text.synthetic ? "(synthetic)" : ""}` : p.file ? "file" : "?"))).toEqual([
        "text",
        "text(synthetic)",
        "text(synthetic)",
        "file",
      ]);
      expect(stored.parts[0].text?.text).toBe("explain this project");
      expect(stored.parts[2].text?.text).toContain("demo-project");
      expect(stored.parts[3].file).toEqual({ mime: "text/plain", filename: "package.json", url: packageUrl });
      for (const part of stored.parts) {
        expect(part.id).toMatch(/^prt_[0-9A-HJKMNP-TV-Z]{26}$/);
        expect(part).toMatchObject({ sessionId: user.sessionId, messageId: user.id });
      }

      const messages = await ledger("messages", printed.sessionId!, ...dbArgs());
      expectOk(messages);
      const listed = parsePromptOutput(`session ${printed.sessionId}\n${messages.stdout}`);
      expect(listed.messageId).toBe(printed.messageId);
      expect(listed.parts.map((p) => p.id)).toEqual(printed.parts.map((p) => p.id));

      const sessions = await ledger("sessions", ...dbArgs());
      expectOk(sessions);
      const rows = sessions.stdout.trim().split("\n");
      expect(rows).toHaveLength(2);
      // Most recently updated first: the --json prompt's session, then the first one.
      expect(rows.map((r) => r.split(/\s+/)[0])).toEqual([user.sessionId, printed.sessionId]);
      expect(rows[1]).toContain(`1 msgs  ${dir}`);

      // Every --json output is JSON Lines: one compact object per line.
      expect(json.stdout.split("\n")).toEqual([expect.any(String), ""]);
      const sessionsJson = await ledger("sessions", "--json", ...dbArgs());
      expectOk(sessionsJson);
      const sessionLines = jsonLines(sessionsJson.stdout) as Array<{ id: string; directory: string; messageCount: number }>;
      expect(sessionLines.map((s) => [s.id, s.directory, s.messageCount])).toEqual([
        [user.sessionId, dir, 1],
        [printed.sessionId, dir, 1],
      ]);
      await ledger("prompt", "--no-reply", "a second message", "--session", printed.sessionId!, ...dbArgs()).then(expectOk);
      const messagesJson = await ledger("messages", "--json", printed.sessionId!, ...dbArgs());
      expectOk(messagesJson);
      const messageLines = jsonLines(messagesJson.stdout) as JsonMessage[];
      expect(messageLines.map((m) => m.message.user.id)[0]).toBe(printed.messageId);
      expect(messageLines.map((m) => m.parts[0]?.text?.text)).toEqual(["explain this project", "a second message"]);
    },
    CLI_TIMEOUT,
  );

  it(
    "without --no-reply and no model it notes how to configure one on stderr and still stores the message",
    async () => {
      const run = await ledger("prompt", "what does this do?", ...dbArgs());
      expectOk(run);
      expect(run.stderr).toContain("no model is configured");
      expect(run.stderr).toContain("ledger.json");
      expect(run.stdout).not.toContain("no model is configured");
      const printed = parsePromptOutput(run.stdout);
      expect(printed.sessionId).toBeDefined();
      expect(printed.parts.map((p) => p.rest)).toEqual(["what does this do?"]);

      const messages = await ledger("messages", printed.sessionId!, ...dbArgs());
      expectOk(messages);
      expect(messages.stdout).toContain(`message ${printed.messageId}  user`);
      expect(messages.stdout).toContain("what does this do?");

      // A default model named without its provider (a trial, 2026-12-04: the config's warning
      // named it, then the note said "no model is configured"): the note names it too.
      const withDefault = path.join(dir, "default-model-only");
      await mkdir(withDefault, { recursive: true });
      await writeFile(path.join(withDefault, "ledger.json"), JSON.stringify({ model: "ollama/q" }));
      const defaultOnly = await inDir(withDefault, ["prompt", "hi", ...dbArgs()]);
      expectOk(defaultOnly);
      expect(defaultOnly.stderr).toContain(
        "note: the default model ollama/q has no provider (no provider.ollama.models.q in ledger.json), so the message is stored without a reply.\n",
      );
      expect(defaultOnly.stderr).not.toContain("no model is configured");
      expect(parsePromptOutput(defaultOnly.stdout).parts.map((p) => p.rest)).toEqual(["hi"]);

      // Nothing stored (an unknown --session): no note saying it was (a trial, 2026-12-04).
      const unknown = await ledger("prompt", "hi", "--session", "ses_01JD000000000000000000000A", ...dbArgs());
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toMatch(/^error: NotFound: /);
      expect(unknown.stderr).not.toContain("note:");

      // With --model but no provider the server refuses to answer: the CLI says it in its own
      // terms (a trial: "send no_reply", an API field, where the flag is --no-reply).
      const named = await ledger("prompt", "--session", printed.sessionId!, "--model", "local/qwen", "again", ...dbArgs());
      expect(named).toMatchObject({ code: 1, stdout: `session ${printed.sessionId}\n` });
      expect(named.stderr).toMatch(
        /^error: FailedPrecondition: the message msg_\w{26} is stored, but the server has no model provider to answer it: add one to its ledger\.json \(README "Configuration"\), or store prompts without an answer with ledger prompt --no-reply\n$/,
      );
    },
    CLI_TIMEOUT,
  );
});

describe("ledger --version", () => {
  it(
    "prints the package version and exits 0",
    async () => {
      const { version } = JSON.parse(await readFile(path.resolve(import.meta.dirname, "../../package.json"), "utf8")) as {
        version: string;
      };
      // Once through the real executable (bin/ledger.js under tsx), once in-process.
      for (const run of [await finished(spawnLedger(["--version"])), await ledger("-V")]) {
        expectOk(run);
        expect(run.stdout).toBe(`${version}\n`);
      }
    },
    CLI_TIMEOUT,
  );
});

describe("ledger help <command>", () => {
  // A review, 2026-12-03: "ledger help bogus" printed the general help alone (exit 1).
  it(
    "prints a command's usage, and for an unknown command says so (exit 1)",
    async () => {
      const known = await ledger("help", "shell");
      expectOk(known);
      expect(known.stdout).toMatch(/^Usage: ledger shell \[options\] <session> <command>\n/);
      const unknown = await ledger("help", "bogus");
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toBe("error: unknown command 'bogus'\n(ledger --help lists the commands)\n");
      expect(unknown.stdout).toBe("");
    },
    CLI_TIMEOUT,
  );
});

describe("ledger.json syntax errors", () => {
  it(
    "name the file, line and column; exit 1",
    async () => {
      const project = path.join(dir, "bad-config");
      await mkdir(project);
      await writeFile(path.join(project, "ledger.json"), '{\n  "model": "local/qwen",\n  "roots": [\n}\n');
      const run = await inDir(project, ["sessions", ...dbArgs()]);
      expect(run.code, run.stderr).toBe(1);
      expect(run.stderr).toBe(`error: ${path.join(project, "ledger.json")}: invalid JSONC at line 4, column 1: value expected\n`);
      expect(run.stdout).toBe("");
    },
    CLI_TIMEOUT,
  );
});

describe("an unusable DATABASE_URL", () => {
  // About DATABASE_URL, so the PGlite run has nothing to add.
  it.skipIf(TEST_ENGINE === "pglite")(
    "a missing database or a closed port: serve and the client commands print the cause and exit 1",
    async () => {
      const missing = new URL(ADMIN_URL);
      missing.pathname = "/ledger_cli_no_such_db";
      const server = net.createServer();
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      const { port } = server.address() as net.AddressInfo;
      await new Promise<void>((resolve) => server.close(() => resolve()));
      const closed = `postgres://postgres@127.0.0.1:${port}/ledger`;
      const cases: Array<[string[], string, string]> = [
        [["sessions"], missing.toString(), 'database "ledger_cli_no_such_db" does not exist'],
        [["serve", "--port", "0"], missing.toString(), 'database "ledger_cli_no_such_db" does not exist'],
        [["serve", "--port", "0"], closed, `connect ECONNREFUSED 127.0.0.1:${port}`],
        [["prompt", "--no-reply", "hi"], closed, `connect ECONNREFUSED 127.0.0.1:${port}`],
        [["messages", "ses_01M8N3PWC98KEGMQ42T22BSJ1B"], closed, `connect ECONNREFUSED 127.0.0.1:${port}`],
      ];
      const runs = await Promise.all(cases.map(([args, url]) => inDir(dir, args, { DATABASE_URL: url })));
      runs.forEach((run, i) => {
        const [args, , cause] = cases[i]!;
        expect(run.code, `ledger ${args.join(" ")}: ${run.stderr}`).toBe(1);
        expect(run.stderr).toContain(`: ${cause}\n`);
        expect(run.stderr).toMatch(/^error: database postgres:\/\/\S+: /m);
        expect(run.stderr).not.toContain("(unknown)");
        expect(run.stdout).toBe("");
      });
    },
    CLI_TIMEOUT,
  );
});

describe("ledger prompt failures", () => {
  it(
    "exits 1 naming the field and leaves no empty session behind",
    async () => {
      const before = await ledger("sessions", "--json", ...dbArgs());
      expectOk(before);
      const run = await ledger("prompt", "--no-reply", "read this", "--file", "/etc/hostname", ...dbArgs());
      expect(run.code).toBe(1);
      expect(run.stderr).toContain("PermissionDenied: parts[1].file.url");
      const after = await ledger("sessions", "--json", ...dbArgs());
      expect(after.stdout).toBe(before.stdout);
    },
    CLI_TIMEOUT,
  );

  it(
    "a --file that does not exist: exit 1 naming the path, before any request; no session is made",
    async () => {
      const before = await ledger("sessions", "--json", ...dbArgs());
      expectOk(before);
      const run = await ledger("prompt", "--no-reply", "read this", "--file", "package.json", "--file", "nope.txt", ...dbArgs());
      expect(run.code, run.stderr).toBe(1);
      expect(run.stderr).toBe(
        `error: --file nope.txt: no such file or directory (${path.join(dir, "nope.txt")})\n(ledger <command> --help shows the usage)\n`,
      );
      expect(run.stdout).toBe("");
      // Checked before connecting: an unreachable --url is never tried.
      const viaUrl = await ledger("prompt", "hi", "--file", "nope.txt", "--url", "http://127.0.0.1:9");
      expect(viaUrl.code, viaUrl.stderr).toBe(1);
      expect(viaUrl.stderr).toContain("--file nope.txt: no such file or directory");
      expect(viaUrl.stderr).not.toMatch(/ECONNREFUSED|Unavailable/);
      // An empty path would resolve to the working directory and attach all of it.
      for (const empty of ["", " "]) {
        const blank = await ledger("prompt", "hi", "--file", empty, "--url", "http://127.0.0.1:9");
        expect(blank.code, blank.stderr).toBe(1);
        expect(blank.stderr).toBe(
          `error: --file ${JSON.stringify(empty)}: an empty path (name a file, or . for the working directory)\n(ledger <command> --help shows the usage)\n`,
        );
      }
      const after = await ledger("sessions", "--json", ...dbArgs());
      expect(after.stdout).toBe(before.stdout);
    },
    CLI_TIMEOUT,
  );

  it(
    "an empty prompt text is a usage error in the CLI's words (the API's said \"draft\"); no session is made",
    async () => {
      const before = await ledger("sessions", "--json", ...dbArgs());
      expectOk(before);
      for (const text of ["", "  \n"]) {
        const run = await ledger("prompt", "--no-reply", text, ...dbArgs());
        expect(run).toMatchObject({
          code: 1,
          stdout: "",
          stderr:
            'error: the prompt text is empty: say what to ask, e.g. ledger prompt "summarize this" --file README.md\n' +
            "(ledger <command> --help shows the usage)\n",
        });
      }
      const after = await ledger("sessions", "--json", ...dbArgs());
      expect(after.stdout).toBe(before.stdout);
    },
    CLI_TIMEOUT,
  );
});

describe("ledger serve", () => {
  it(
    "prints one listening line, answers ledger prompt --url, refuses a second serve on its port or PGlite dir with advice, exits 0 on SIGTERM",
    async () => {
      const serveDb = path.join(dir, "serve-db");
      const serve = spawnLedger(["serve", "--port", "0", "--db", serveDb]);
      const exited = finished(serve);
      try {
        const line = await new Promise<string>((resolve, reject) => {
          let seen = "";
          const onData = (chunk: Buffer | string) => {
            seen += String(chunk);
            const newline = seen.indexOf("\n");
            if (newline >= 0) resolve(seen.slice(0, newline));
          };
          serve.stdout!.on("data", onData);
          void exited.then((run) => reject(new Error(`serve exited early (${run.code}): ${run.stderr}`)));
        });
        expect(line).toMatch(LISTENING);
        const url = line.slice("session-ledger listening on ".length);

        const viaUrl = await ledger("prompt", "--url", url, "--no-reply", "hi");
        expectOk(viaUrl);
        const printed = parsePromptOutput(viaUrl.stdout);
        expect(printed.sessionId).toBeDefined();
        expect(printed.parts.map((p) => [p.kind, p.rest])).toEqual([["text", "hi"]]);
        const listed = await ledger("sessions", "--url", url);
        expectOk(listed);
        expect(listed.stdout).toContain(printed.sessionId);

        // A second serve on the same port: which port, and how to get another.
        const port = new URL(url).port;
        const busyPort = await ledger("serve", "--port", port, "--db", path.join(dir, "other-serve-db"));
        expect(busyPort.code, busyPort.stderr).toBe(1);
        expect(busyPort.stderr).toContain(
          `error: port ${port} on 127.0.0.1 is already in use (another "ledger serve"?): pass --port with a free port, or --port 0 to pick one\n`,
        );
        expect(busyPort.stderr).not.toContain("EADDRINUSE");
        expect(busyPort.stdout).toBe("");
        // Found before the database is made (a trial, 2026-12-03: a 39 MB .ledger/db was left behind).
        expect(existsSync(path.join(dir, "other-serve-db"))).toBe(false);

        // A --host that does not resolve (a trial, 2026-12-04: the raw "getaddrinfo ENOTFOUND
        // 999.1.1.1" after a database was made), and a non-loopback one without a token (which
        // made the database before refusing): each named, nothing left behind, port 0 too. The
        // address is checked first: without a token, an unknown host is still named as such.
        // `.invalid` never resolves (RFC 6761); a machine without DNS says EAI_AGAIN instead.
        for (const extra of [{ LEDGER_TOKEN: "a-token-of-sixteen-or-more" }, {}]) {
          const noHost = await inDir(
            dir,
            ["serve", "--host", "no-such-host.invalid", "--port", "0", "--db", path.join(dir, "no-host-db")],
            extra,
          );
          expect(noHost.code, noHost.stderr).toBe(1);
          expect(noHost.stderr).toMatch(
            /^error: --host no-such-host\.invalid: (no such host \(the name did not resolve: ENOTFOUND\); pass an address of this machine, e\.g\. 127\.0\.0\.1, or 0\.0\.0\.0 for every interface|the name could not be looked up now \(EAI_AGAIN: DNS did not answer\); try again, or pass an IP address such as 127\.0\.0\.1 or 0\.0\.0\.0)\n$/,
          );
          expect(existsSync(path.join(dir, "no-host-db"))).toBe(false);
        }
        const noToken = await ledger("serve", "--host", "0.0.0.0", "--port", "0", "--db", path.join(dir, "no-token-db"));
        expect(noToken.code, noToken.stderr).toBe(1);
        expect(noToken.stderr).toContain("error: --host 0.0.0.0: binding a non-loopback address requires authentication");
        expect(existsSync(path.join(dir, "no-token-db"))).toBe(false);

        if (TEST_ENGINE === "pglite") {
          // A client command waits a moment (LEDGER_DB_LOCK_WAIT_MS; 10 s by default) for another
          // command to finish, saying so, and at once how to reach a running serve.
          const locked = await inDir(dir, ["prompt", "--db", serveDb, "--no-reply", "hi again"], { LEDGER_DB_LOCK_WAIT_MS: "400" });
          expect(locked.code).toBe(1);
          expect(locked.stderr.split("\n")[0]).toBe(
            `waiting up to 0.4 s for the embedded database ${serveDb}: another ledger process uses it (a running "ledger serve"? then use --url)`,
          );
          expect(locked.stderr).toContain("--url");
          expect(locked.stderr).toContain(serveDb);
          expect(locked.stdout).toBe("");
          // serve has no --url: it is told to use another --db or Postgres.
          const lockedServe = await inDir(dir, ["serve", "--port", "0", "--db", serveDb], { LEDGER_DB_LOCK_WAIT_MS: "0" });
          expect(lockedServe.code).toBe(1);
          expect(lockedServe.stderr).toContain(`the embedded database ${serveDb} is in use`);
          expect(lockedServe.stderr).toContain(
            "Pass --db with another directory, or run every server on one Postgres database with DATABASE_URL=",
          );
          expect(lockedServe.stderr).not.toContain("--url");
          expect(lockedServe.stdout).toBe("");
        }
      } finally {
        if (serve.exitCode === null) serve.kill("SIGTERM");
      }
      const run = await exited;
      expect(run.signal).toBeNull();
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout.split("\n").filter(Boolean)).toHaveLength(1);
      expect(run.stderr).toContain("SIGTERM");
    },
    CLI_TIMEOUT,
  );
});

describe("a model server that refuses connections", () => {
  it(
    "each retry shows on stderr; the run gives up within retry.max_total_ms with the cause; exit 1",
    async () => {
      const project = path.join(dir, "closed-provider");
      await mkdir(project);
      const server = net.createServer();
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      const { port } = server.address() as net.AddressInfo;
      await new Promise<void>((resolve) => server.close(() => resolve()));
      const config = {
        model: "local/qwen",
        // 2 s: room for at least two retries even when a loaded machine makes each attempt slow.
        retry: { initial_ms: 200, max_total_ms: 2000 },
        provider: {
          local: compatibleProvider(`http://127.0.0.1:${port}/v1`, { qwen: {} }),
        },
      };
      await writeFile(path.join(project, "ledger.json"), JSON.stringify(config));
      let firstRetryAt: number | undefined;
      const run = await runCli(
        ["prompt", "hi", ...dbArgs()],
        { cwd: project, env: childEnv() },
        { onStderr: (text) => void (text.includes("retrying in") && (firstRetryAt ??= Date.now())) },
      );
      const gaveUpAfter = Date.now() - firstRetryAt!;
      expect(run.code, run.stderr).toBe(1);
      const notices = run.stderr.split("\n").filter((l) => l.startsWith("retrying in "));
      expect(notices.length, run.stderr).toBeGreaterThanOrEqual(2);
      notices.forEach((line, i) =>
        expect(line).toBe(
          `retrying in ${line.slice(12, 15)}s (attempt ${i + 1}): Cannot connect to API: connect ECONNREFUSED 127.0.0.1:${port}`,
        ),
      );
      // The waits as they are (200 ms doubling, cut at max_total_ms), in tenths: the first read "1s"
      // when rounded up to whole seconds.
      const waits = notices.map((line) => Number(line.slice(12, 15)));
      expect(waits[0]).toBeCloseTo(0.2, 0);
      for (const wait of waits) expect(wait).toBeLessThanOrEqual(2);
      // Then what to check (a trial, 2026-12-04: the error alone, no word of the model server).
      expect(run.stderr).toContain(
        `error: api: Cannot connect to API: connect ECONNREFUSED 127.0.0.1:${port}\n` +
          "hint: nothing answered for local/qwen: is its model server running and reachable (provider.local.options.baseURL in ledger.json, if set)?\n",
      );
      // 200 + 400 + 800 + the 600 ms left of the budget, then the exit (closing the in-process server).
      expect(gaveUpAfter).toBeLessThan(2000 + 4000);
    },
    CLI_TIMEOUT,
  );
});

describe("ledger prompt with a model (streamed)", () => {
  // A project directory of its own: its ledger.json configures the fake provider, which the
  // no-model tests above must not see.
  let fake: FakeOpenAI;
  let project: string;
  const SUMMARY = /^tokens: in (\d+), out (\d+), reasoning (\d+), cache r\/w (\d+)\/(\d+) · cost \$(\d+\.\d+) · steps (\d+)$/m;

  beforeAll(async () => {
    fake = await startFakeOpenAI();
    project = path.join(dir, "project");
    await mkdir(project);
    await writeFile(path.join(project, "notes.txt"), "hello from notes\n");
    const config = {
      model: "local/qwen",
      retry: { attempts: 2, initial_ms: 10, max_ms: 50 },
      provider: {
        local: compatibleProvider(fake.url, { qwen: { cost: { input: 1, output: 2 } } }),
      },
    };
    await writeFile(path.join(project, "ledger.json"), JSON.stringify(config, null, 2));
  });
  afterAll(async () => {
    await fake?.close();
  });

  const prompt = (...args: string[]) => inDir(project, ["prompt", ...args, ...dbArgs()]);

  it(
    "streams a tool call and the answer, then the token/cost summary; exit 0",
    async () => {
      const before = fake.requests.length;
      fake.push(
        { kind: "error", status: 429, headers: { "retry-after": "0" } },
        {
          kind: "stream",
          chunks: [{ toolCall: { id: "call_1", name: "read", arguments: JSON.stringify({ filePath: "notes.txt" }) } }],
          usage: { prompt_tokens: 1000, completion_tokens: 10 },
        },
        {
          kind: "stream",
          chunks: [
            { reasoning: "The file holds a greeting." },
            { text: "The notes " },
            { text: "contain a greeting" },
            { text: ": hi there." },
          ],
          delayMs: 20,
          usage: { prompt_tokens: 1200, completion_tokens: 30 },
        },
      );
      const run = await prompt("what is in notes.txt?", "--file", "notes.txt");
      expectOk(run);
      const lines = run.stdout.split("\n");
      const sessionId = SESSION_LINE.exec(lines[0])?.[1];
      expect(sessionId, run.stdout).toBeDefined();
      expect(lines).toContain("→ read notes.txt … running");
      expect(lines).toContain("✓ read notes.txt");
      expect(run.stdout.split("The notes contain a greeting: hi there.")).toHaveLength(2);
      expect(lines).toContain("The notes contain a greeting: hi there.");
      // The user's parts (the prompt, the synthetic file read) are not echoed.
      expect(run.stdout).not.toContain("hello from notes");
      expect(run.stdout).not.toContain("what is in notes.txt?");
      const summary = SUMMARY.exec(run.stdout);
      expect(summary?.slice(1)).toEqual(["2200", "40", "0", "0", "0", "0.0023", "2"]);
      expect(lines.filter(Boolean).at(-1)).toBe(summary?.[0]);
      expect(run.stderr).toContain("retrying in 0.0s (attempt 1): ");
      // The tool really ran: its output went back to the model.
      const second = fake.requests[before + 2]!.body.messages as Array<{ role: string; content: unknown }>;
      expect(second.find((m) => m.role === "tool")?.content).toContain("hello from notes");

      const messages = await inDir(project, ["messages", sessionId!, ...dbArgs()]);
      expectOk(messages);
      expect(messages.stdout.match(/ assistant /g)).toHaveLength(2);
      // Every part says what it holds: the tool and its state, the retry, the reasoning, each step's finish and tokens.
      const listed = messages.stdout.split("\n").flatMap((line) => {
        const m = /^ +\d+\. prt_\w{26} {2}(\S+)(?: +(.*))?$/.exec(line);
        return m ? [`${m[1]} ${m[2] ?? ""}`] : [];
      });
      const assistantParts = listed.slice(listed.findIndex((l) => l.startsWith("retry")));
      expect(assistantParts).toEqual([
        expect.stringMatching(/^retry attempt 1: api: /),
        "stepStart ",
        "tool read  completed  notes.txt",
        "stepFinish reason=tool-calls  tokens in 1000, out 10, reasoning 0, cache r/w 0/0  cost $0.0010",
        "stepStart ",
        "reasoning The file holds a greeting.",
        "text The notes contain a greeting: hi there.",
        "stepFinish reason=stop  tokens in 1200, out 30, reasoning 0, cache r/w 0/0  cost $0.0013",
      ]);
      expect(messages.stdout).toMatch(/^message msg_\w+ {2}assistant {2}agent=build {2}model=local\/qwen {2}finish=tool-calls$/m);
      expect(messages.stdout).toMatch(/^message msg_\w+ {2}assistant {2}agent=build {2}model=local\/qwen {2}finish=stop$/m);
    },
    CLI_TIMEOUT,
  );

  it(
    "--json waits for the final assistant message and prints it",
    async () => {
      fake.push({ kind: "stream", chunks: [{ text: "json answer" }], usage: { prompt_tokens: 5, completion_tokens: 2 } });
      const run = await prompt("hi", "--json");
      expectOk(run);
      const answer = JSON.parse(run.stdout) as { message: { assistant: { finish: string } }; parts: Array<{ text?: { text: string } }> };
      expect(answer.message.assistant.finish).toBe("stop");
      expect(answer.parts.map((p) => p.text?.text).filter(Boolean)).toEqual(["json answer"]);
    },
    CLI_TIMEOUT,
  );

  it(
    "--model without a slash or with an empty part is a usage error before any request: exit 1, nothing stored",
    async () => {
      const before = await inDir(project, ["sessions", "--json", ...dbArgs()]);
      expectOk(before);
      const requests = fake.requests.length;
      for (const model of ["garbage", "/qwen", "local/"]) {
        const run = await prompt("hi", "--model", model);
        expect(run.code, run.stderr).toBe(1);
        expect(run.stdout).toBe("");
        expect(run.stderr).toContain(`error: option '--model <provider/model>' argument '${model}' is invalid.`);
        expect(run.stderr).toContain(`${JSON.stringify(model)} is not a model reference`);
        expect(run.stderr).toContain('expected "provider/model" (e.g. "local/qwen")');
      }
      // Refused before connecting: an unreachable --url is never tried. A usage error is the
      // error and a hint, not the whole help (a trial: ~50 lines after each mistake).
      const viaUrl = await inDir(project, ["prompt", "hi", "--model", "garbage", "--url", "http://127.0.0.1:9"]);
      expect(viaUrl.stderr.trimEnd().split("\n").at(-1)).toBe("(ledger <command> --help shows the usage)");
      expect(viaUrl.stderr).not.toContain("Usage:");
      // --dir names the directory of a new session: with --session it would be ignored.
      const both = await inDir(project, [
        "prompt",
        "hi",
        "--session",
        "ses_01JD000000000000000000000A",
        "--dir",
        "/tmp",
        "--url",
        "http://127.0.0.1:9",
      ]);
      expect(both).toMatchObject({ code: 1, stdout: "" });
      expect(both.stderr).toBe(
        "error: option '--dir <dir>' cannot be used with option '--session <id>'\n(ledger <command> --help shows the usage)\n",
      );
      expect(viaUrl.code, viaUrl.stderr).toBe(1);
      expect(viaUrl.stderr).toContain('"garbage" is not a model reference: no "/"');
      expect(viaUrl.stderr).not.toMatch(/ECONNREFUSED|Unavailable/);
      const after = await inDir(project, ["sessions", "--json", ...dbArgs()]);
      expect(after.stdout).toBe(before.stdout);
      expect(fake.requests.length).toBe(requests);
    },
    CLI_TIMEOUT,
  );

  it(
    "an unknown --model ends in model_not_found with steps 0; the session's next prompt without --model answers with the default",
    async () => {
      const requests = fake.requests.length;
      const failed = await prompt("one", "--model", "fake/nope");
      expect(failed.code, failed.stderr).toBe(1);
      expect(failed.stderr).toMatch(/^error: model_not_found: model fake\/nope is not configured; configured models: local\/qwen$/m);
      expect(SUMMARY.exec(failed.stdout)?.[7]).toBe("0");
      expect(fake.requests.length).toBe(requests);
      const sessionId = SESSION_LINE.exec(failed.stdout.split("\n")[0])?.[1];
      expect(sessionId, failed.stdout).toBeDefined();

      fake.push({ kind: "stream", chunks: [{ text: "back on qwen" }], usage: { prompt_tokens: 4, completion_tokens: 3 } });
      const again = await prompt("two", "--session", sessionId!);
      expectOk(again);
      expect(again.stdout.split("\n")).toContain("back on qwen");
      expect(SUMMARY.exec(again.stdout)?.[7]).toBe("1");
      expect(fake.requests.at(-1)?.body.model).toBe("qwen");
    },
    CLI_TIMEOUT,
  );

  it(
    "a 401 from the provider: an error line on stderr and exit 1",
    async () => {
      fake.push({ kind: "error", status: 401 });
      const run = await prompt("hi");
      expect(run.code, run.stderr).toBe(1);
      expect(run.stdout.split("\n")[0]).toMatch(SESSION_LINE);
      expect(run.stderr).toMatch(/^error: provider_auth: .*401/m);
      expect(SUMMARY.exec(run.stdout)?.[7]).toBe("1");
    },
    CLI_TIMEOUT,
  );

  it(
    "Ctrl-C aborts the run, waits for it to end, and exits 130",
    async () => {
      fake.push({ kind: "stream", chunks: [{ text: "partial answer" }, { hang: true }] });
      // A real process and a real SIGINT.
      const child = spawnLedger(["prompt", "tell me a long story", ...dbArgs()], project);
      const exited = finished(child);
      await waitForOutput(child, /partial answer/, exited);
      child.kill("SIGINT");
      const run = await exited;
      expect(run.code, run.stderr).toBe(130);
      expect(run.stderr).toContain("interrupted: aborting the run");
      expect(run.stderr).toMatch(/^error: aborted: /m);
      expect(run.stdout).toMatch(SUMMARY);
    },
    CLI_TIMEOUT,
  );

  it(
    "ledger abort against ledger serve stops a running prompt --url, which exits 130",
    async () => {
      const serveArgs = ["serve", "--port", "0", ...(TEST_ENGINE === "pglite" ? ["--db", path.join(dir, "project-serve-db")] : [])];
      const serve = spawnLedger(serveArgs, project);
      const served = finished(serve);
      try {
        const url = (await waitForOutput(serve, /listening on (http:\/\/\S+)\n/, served))[1]!;
        fake.push({ kind: "stream", chunks: [{ text: "partial answer" }, { hang: true }] });
        const child = startCli(["prompt", "--url", url, "tell me a long story"], { cwd: project, env: childEnv() });
        const sessionId = (await child.waitForStdout(/^session (ses_\w+)\n[^]*partial answer/))[1]!;

        const abort = await inDir(project, ["abort", sessionId, "--url", url]);
        expectOk(abort);
        expect(abort.stdout).toBe("aborted\n");
        const run = await child.done;
        expect(run.code, run.stderr).toBe(130);
        expect(run.stderr).toMatch(/^error: aborted: /m);
        expect(run.stdout).toMatch(SUMMARY);

        const again = await inDir(project, ["abort", sessionId, "--url", url]);
        expectOk(again);
        expect(again.stdout).toBe("no loop was running\n");
        // Like every command's --json: one compact line (a trial, 2026-12-03: "unknown option").
        const json = await inDir(project, ["abort", sessionId, "--url", url, "--json"]);
        expectOk(json);
        expect(json.stdout).toBe("{}\n");
      } finally {
        if (serve.exitCode === null) serve.kill("SIGTERM");
      }
      expect((await served).code).toBe(0);
    },
    CLI_TIMEOUT,
  );
});
