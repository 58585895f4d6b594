import { spawn } from "node:child_process";
import { mkdir, readFile, stat } from "node:fs/promises";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FakeOpenAI, ScriptedReply } from "../support/openai-server.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { waitFor } from "../support/wait.js";
import { pgrep } from "../support/pgrep.js";

// The CLI side of agent edits (issue 15) against a running server (--url): permission requests
// without a terminal (rejected with a note, or allowed once with --yes), `ledger diff`, `ledger shell`.

const BIN = path.resolve(import.meta.dirname, "../../bin/ledger.js");
const CLI_TIMEOUT = 120_000;

let t: FakeModelLedger;
let fake: FakeOpenAI;

beforeAll(async () => {
  t = await startFakeModelLedger({
    retry: { attempts: 0 },
    agent: { build: { permission: { write: "ask", bash: { "*": "allow", "curl *": "ask" } } } },
  });
  fake = t.fake;
});
afterAll(async () => {
  await t?.close();
});

/** Spawns `ledger <args> --url <the test server>`; `done` resolves with its exit code and output once it closes. */
function spawnLedger(args: string[]) {
  const child = spawn(process.execPath, [BIN, ...args, "--url", t.ledger.url], { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c));
  child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.once("close", (code) => resolve({ code, stdout, stderr })),
  );
  return { child, done };
}

function ledger(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return spawnLedger(args).done;
}

const write = (file: string, content: string): ScriptedReply => ({
  kind: "stream",
  chunks: [{ toolCall: { id: `call_${file}`, name: "write", arguments: JSON.stringify({ filePath: file, content }) } }],
});

describe("ledger prompt, diff and shell with permission asks", () => {
  it(
    "rejects a request without a terminal, allows it once with --yes, then shows the diff and runs a shell command",
    async () => {
      const dir = path.join(t.dir, "cli");
      await mkdir(dir);
      fake.push(write("a.txt", "one\n"), { kind: "stream", chunks: [{ text: "Not allowed." }] });
      const rejected = await ledger("prompt", "--dir", dir, "write a.txt");
      expect(rejected.code).toBe(0);
      expect(rejected.stderr).toContain("permission: write a.txt\nrejected\n");
      await expect(stat(path.join(dir, "a.txt"))).rejects.toThrow(/ENOENT/);
      const sessionId = /^session (ses_\S+)$/m.exec(rejected.stdout)![1]!;
      const second = fake.requests.at(-1)!.body.messages as Array<{ role: string; content: unknown }>;
      expect(JSON.stringify(second.find((m) => m.role === "tool")?.content)).toContain(
        "The user rejected permission to use this specific tool call with the following feedback: ledger prompt is not interactive (pass --yes to allow once)",
      );

      fake.push(write("a.txt", "one\ntwo\n"), { kind: "stream", chunks: [{ text: "Written." }] });
      const allowed = await ledger("prompt", "--session", sessionId, "--yes", "write a.txt again");
      expect(allowed.code).toBe(0);
      expect(allowed.stderr).toContain("permission: write a.txt\nallowed once\n");
      expect(await readFile(path.join(dir, "a.txt"), "utf8")).toBe("one\ntwo\n");

      const diff = await ledger("diff", sessionId);
      expect(diff).toMatchObject({ code: 0, stdout: "--- a/a.txt\n+++ b/a.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n" });

      // stdout is the command's own output (a trial, 2026-12-02: the note written for the model,
      // "<bash_metadata>exit code: 4", was printed after it); the exit code is the command's.
      const shell = await ledger("shell", sessionId, "echo hi; exit 4");
      expect(shell).toMatchObject({ code: 4, stdout: "hi\n", stderr: "" });
      const long = await ledger("shell", sessionId, "seq 1 3000");
      expect(long.code).toBe(0);
      expect(long.stdout.split("\n").slice(0, 3)).toEqual(["1", "2", "3"]);
      expect(long.stdout).not.toContain("bash_metadata");
      expect(long.stderr).toMatch(/^note: Output truncated: showed the first \d+ lines or \d+ KB of \d+ bytes\.\n$/);
      const asked = await ledger("shell", sessionId, "curl http://example.invalid");
      expect(asked.code).toBe(1);
      expect(asked.stderr).toContain("permission: bash curl http://example.invalid\nrejected\n");
      // The rejection's feedback names the command that could not ask.
      const listed = await ledger("messages", sessionId);
      expect(listed.stdout).toContain("ledger shell is not interactive (pass --yes to allow once)");
      expect(listed.stdout).not.toContain("undefined");
      // An unknown session: the error alone (a trial, 2026-12-04: a "could not follow permission requests" warning came first).
      const unknown = await ledger("shell", "ses_01JD000000000000000000000A", "echo hi");
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toMatch(/^error: NotFound: [^\n]*\n$/);
    },
    CLI_TIMEOUT,
  );
});

describe("ledger shell and Ctrl-C", () => {
  it(
    "aborts the command (no process of it is left), prints what it wrote and exits 130",
    async () => {
      const dir = path.join(t.dir, "shell-interrupt");
      await mkdir(dir);
      const sessionId = (await t.client.createSession({ directory: dir })).session!.id;
      const marker = `ledger-shell-sigint-${Date.now()}`;
      const { child, done } = spawnLedger(["shell", sessionId, `echo started; sleep 61 # ${marker}`]);
      // Two: this CLI (its arguments hold the marker) and the server's /bin/sh running the command.
      await waitFor("the command to run", async () => (await pgrep(marker)).length >= 2);
      child.kill("SIGINT");
      const { code, stdout, stderr } = await done;
      expect(code, stderr).toBe(130);
      expect(stderr).toContain("interrupted: aborting the run");
      expect(stdout).toContain("started\n");
      expect(await pgrep(marker)).toEqual([]);
      expect((await t.client.getStatus({})).statuses[sessionId]).toBeUndefined();
    },
    CLI_TIMEOUT,
  );
});

describe("stored text on a terminal", () => {
  it(
    "ledger messages and ledger prompt show a session's control characters instead of sending them (no title set, no screen cleared)",
    async () => {
      const dir = path.join(t.dir, "controls");
      await mkdir(dir);
      const hostile = "title\u001b]0;pwned\u0007 clear\u001b[2J back\rover";
      fake.push({ kind: "stream", chunks: [{ text: `answer ${hostile}` }] });
      const prompted = await ledger("prompt", "--dir", dir, `say ${hostile}`);
      expect(prompted.code).toBe(0);
      expect(prompted.stdout).toContain("answer title^[]0;pwned^G clear^[[2J back^Mover");
      const sessionId = /^session (ses_\S+)$/m.exec(prompted.stdout)![1]!;
      const listed = await ledger("messages", sessionId);
      expect(listed.stdout).toContain("say title^[]0;pwned^G clear^[[2J back^Mover");
      for (const out of [prompted.stdout, prompted.stderr, listed.stdout, listed.stderr])
        expect(out).not.toMatch(/[\u001b\u0007]|\r(?!\n)/);
      // JSON keeps the text exact (escaped by JSON itself).
      const json = await ledger("messages", sessionId, "--json");
      expect(json.stdout).toContain("title\\u001b]0;pwned\\u0007 clear\\u001b[2J back\\rover");

      // One line per session, whatever its title holds (a trial: a title's line break made a line without an id).
      const titled = (await t.client.createSession({ directory: dir, title: "line1\nline2\tend" })).session!;
      const sessions = await ledger("sessions");
      const row = sessions.stdout.split("\n").find((line) => line.startsWith(titled.id));
      expect(row).toMatch(/ {2}line1\\nline2\\tend$/);
      expect(sessions.stdout.split("\n").filter((line) => line && !/^ses_/.test(line))).toEqual([]);
    },
    CLI_TIMEOUT,
  );
});
