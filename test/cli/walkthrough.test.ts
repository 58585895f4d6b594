import { spawn, type ChildProcess } from "node:child_process";
import { mkdir, readFile, stat } from "node:fs/promises";
import path from "node:path";
import { parse as parseJsonc } from "jsonc-parser";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { finished, LEDGER_BIN, runCli, waitForOutput, type CliRun } from "../support/cli.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { sleep, waitFor } from "../support/wait.js";

// docs/walkthrough.md, step by step, for real: the scripted model of examples/ (spawned), a
// ledger with examples/scripted-model.json (its baseURL pointed at that model's port), `ledger
// prompt` on a terminal (a pseudo-terminal from util-linux `script`, a real process) that asks,
// a second client that lists the request and answers it (`ledger permissions`, `ledger reply`),
// then `ledger diff`, `ledger revert` (hello.txt is gone) and `ledger unrevert` (it is back).

const EXAMPLES = path.resolve(import.meta.dirname, "../../examples");
const CONTENT = "Hello from the scripted model.\nYou asked: create hello.txt\n";
const QUESTION = "allow once (o), always (a), reject (r)? ";

let model: ChildProcess | undefined;
let modelExit: Promise<CliRun> | undefined;
let terminal: ChildProcess | undefined;
let t: TestLedger;
let project: string;

beforeAll(async () => {
  model = spawn(process.execPath, [path.join(EXAMPLES, "scripted-model.mjs"), "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
  modelExit = finished(model);
  const [, url] = await waitForOutput(model, /^scripted model on (http:\/\/127\.0\.0\.1:\d+\/v1)\n/, modelExit);
  const config = parseJsonc(await readFile(path.join(EXAMPLES, "scripted-model.json"), "utf8")) as {
    provider: { scripted: { options: { baseURL: string } } };
  };
  expect(config.provider.scripted.options.baseURL).toBe("http://127.0.0.1:8089/v1");
  config.provider.scripted.options.baseURL = url!;
  t = await startTestLedger(config, { transport: "http" });
  project = path.join(t.dir, "project");
  await mkdir(project);
});
afterAll(async () => {
  terminal?.kill();
  model?.kill();
  await modelExit;
  await t?.close();
});

/** ListPermissions calls the server counted so far (its `ledger_rpc_requests_total`). */
async function listPermissionsCalls(): Promise<number> {
  const metric = await t.ledger.deps.metrics!.registry.getSingleMetric("ledger_rpc_requests_total")!.get();
  return metric.values.filter((v) => String(v.labels.procedure).endsWith("/ListPermissions")).reduce((sum, v) => sum + v.value, 0);
}

/** `ledger <args> --url <the server>` from a second terminal (in-process `main`), in the project. */
function ledger(...args: string[]): Promise<CliRun> {
  return runCli([...args, "--url", t.ledger.url], { cwd: project, env: {} });
}

/** Runs `command` (argv) on a pseudo-terminal in `cwd`: `script -qfec "..." /dev/null`; its stdin stays open. */
function onTerminal(command: string[], cwd: string): ChildProcess {
  const quoted = command.map((arg) => `'${arg.replace(/'/g, `'\\''`)}'`).join(" ");
  return spawn("script", ["-qfec", quoted, "/dev/null"], { cwd, env: { ...process.env, TERM: "xterm" }, stdio: ["pipe", "pipe", "pipe"] });
}

/** What a terminal shows, line by line: escape sequences and spinner frames (a braille glyph and a word) left out. */
function screenLines(output: string): string[] {
  return output
    .replace(/\u001b\[[0-9;?]*[A-Za-z]/g, "")
    .split(/\r\n|\r|\n/)
    .filter((line) => line !== "" && !/^[\u2800-\u28ff] /.test(line));
}

const partsOf = (m: MessageWithParts | undefined) => m?.parts.map((p) => ({ kind: p.kind.case, value: p.kind.value as unknown }));

describe("the walkthrough (docs/walkthrough.md)", () => {
  it("the scripted model proposes hello.txt, a second client approves it, the diff is shown, reverted and unreverted", async () => {
    // Terminal 3: the prompt asks on its terminal.
    terminal = onTerminal([process.execPath, LEDGER_BIN, "prompt", "create hello.txt", "--url", t.ledger.url], project);
    const prompted = finished(terminal);
    await waitForOutput(terminal, /allow once \(o\), always \(a\), reject \(r\)\? /, prompted);
    await expect(stat(path.join(project, "hello.txt"))).rejects.toThrow(/ENOENT/);
    // While it asks, the prompt learns of an answer from elsewhere on its own stream: it does not
    // poll ListPermissions (it did, twice a second, filling the server's log).
    const before = await listPermissionsCalls();
    await sleep(1_200);
    expect(await listPermissionsCalls()).toBe(before);

    // Terminal 4: list the pending request, answer it.
    const listed = await ledger("permissions");
    const [, permissionId, sessionId] = /^(per_\w{26}) {2}(ses_\w{26}) {2}write hello\.txt\n/.exec(listed.stdout) ?? [];
    expect(listed).toEqual({
      code: 0,
      stdout:
        `${permissionId}  ${sessionId}  write hello.txt\n` +
        "Index: hello.txt\n===================================================================\n--- hello.txt\n+++ hello.txt\n" +
        "@@ -0,0 +1,2 @@\n+Hello from the scripted model.\n+You asked: create hello.txt\n",
      stderr: "",
    });
    expect(await ledger("reply", sessionId!, permissionId!, "once")).toEqual({ code: 0, stdout: "allowed once\n", stderr: "" });

    // Terminal 3 drops its question and finishes the reply.
    const run = await prompted;
    terminal = undefined;
    expect(run.code, run.stdout).toBe(0);
    expect(screenLines(run.stdout)).toEqual([
      `session ${sessionId}`,
      "→ write hello.txt … running",
      "permission: write hello.txt",
      "Index: hello.txt",
      "===================================================================",
      "--- hello.txt",
      "+++ hello.txt",
      "@@ -0,0 +1,2 @@",
      "+Hello from the scripted model.",
      "+You asked: create hello.txt",
      QUESTION,
      "answered by another client",
      "✓ write hello.txt",
      "Wrote hello.txt.",
      "tokens: in 0, out 0, reasoning 0, cache r/w 0/0 · cost $0.0000 · steps 2",
    ]);
    expect(await readFile(path.join(project, "hello.txt"), "utf8")).toBe(CONTENT);

    // What was stored: the user message with its summary, the step that wrote (tool completed,
    // patch part), the answer.
    const { messages } = await t.client.listMessages({ sessionId });
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant"]);
    const user = messages[0]!.message!.kind.value!;
    const userId = user.id;
    expect(messages[0]!.message!.kind.case === "user" && messages[0]!.message!.kind.value.summary).toMatchObject({
      title: "create hello.txt",
      body: "Wrote hello.txt.",
      diffs: [{ file: "hello.txt", before: "", after: CONTENT, additions: 2, deletions: 0 }],
    });
    const [start, tool, finish, patch] = partsOf(messages[1])!;
    expect([start!.kind, tool!.kind, finish!.kind, patch!.kind]).toEqual(["stepStart", "tool", "stepFinish", "patch"]);
    expect(tool!.value).toMatchObject({
      tool: "write",
      state: {
        status: {
          case: "completed",
          value: {
            input: { filePath: "hello.txt", content: CONTENT },
            output: "Wrote file successfully.",
            title: "hello.txt",
          },
        },
      },
    });
    expect(patch!.value).toMatchObject({ hash: (start!.value as { snapshot: string }).snapshot, files: ["hello.txt"] });
    expect(partsOf(messages[2])!.filter((p) => p.kind === "text")).toMatchObject([{ value: { text: "Wrote hello.txt." } }]);
    expect(messages[2]!.message!.kind.value).toMatchObject({ finish: "stop" });

    // `ledger messages` shows the same; `ledger diff` the change.
    const shown = (await ledger("messages", sessionId!)).stdout;
    expect(shown).toContain(`message ${userId}  user  agent=build  model=scripted/demo\n`);
    expect(shown).toMatch(/ tool {6}write {2}completed {2}hello\.txt\n/);
    expect(shown).toMatch(/ patch {5}[0-9a-f]{40} {2}hello\.txt\n/);
    expect(await ledger("diff", sessionId!)).toEqual({
      code: 0,
      stdout: "--- a/hello.txt\n+++ b/hello.txt\n@@ -0,0 +1,2 @@\n+Hello from the scripted model.\n+You asked: create hello.txt\n",
      stderr: "",
    });

    // Revert the turn: hello.txt is gone; unrevert: it is back.
    expect(await ledger("revert", sessionId!, userId)).toMatchObject({
      code: 0,
      stdout: expect.stringContaining(`reverted ${sessionId} to ${userId}`),
    });
    await expect(stat(path.join(project, "hello.txt"))).rejects.toThrow(/ENOENT/);
    expect(await ledger("unrevert", sessionId!)).toMatchObject({ code: 0, stdout: expect.stringContaining(`unreverted ${sessionId}`) });
    expect(await readFile(path.join(project, "hello.txt"), "utf8")).toBe(CONTENT);

    // The scripted model's other branch: a rejected write, which it reports.
    await t.client.promptAsync({ sessionId, parts: [text("create hello.txt again")] });
    const second = await waitFor(
      "the second permission request",
      async () => (await t.client.listPermissions({ sessionId })).permissions[0],
    );
    expect(await ledger("reply", sessionId!, second.id, "reject", "--message", "not now")).toMatchObject({ code: 0, stdout: "rejected\n" });
    await waitFor("the session to go idle", async () => (await t.client.getStatus({})).statuses[sessionId!] === undefined);
    expect(await readFile(path.join(project, "hello.txt"), "utf8")).toBe(CONTENT);
    const after = (await t.client.listMessages({ sessionId })).messages;
    expect(partsOf(after.at(-1))!.filter((p) => p.kind === "text")).toMatchObject([
      {
        value: {
          text: "I did not write hello.txt: The user rejected permission to use this specific tool call with the following feedback: not now",
        },
      },
    ]);
  });

  it("Ctrl-C at the permission question aborts the run (exit 130), as anywhere else in it: the request is rejected by the abort, nothing is written", async () => {
    terminal = onTerminal([process.execPath, LEDGER_BIN, "prompt", "create hello.txt, then stop", "--url", t.ledger.url], project);
    const prompted = finished(terminal);
    await waitForOutput(terminal, /allow once \(o\), always \(a\), reject \(r\)\? /, prompted);
    terminal.stdin!.write("\u0003");
    const run = await prompted;
    terminal = undefined;
    expect(run.code, run.stdout).toBe(130);
    expect(screenLines(run.stdout).slice(-1)).toEqual(["error: aborted: The run was aborted"]);
    expect(screenLines(run.stdout)).not.toContain("rejected");
    expect(await readFile(path.join(project, "hello.txt"), "utf8")).toBe(CONTENT);
    const sessionId = /session (ses_\w{26})/.exec(run.stdout)![1]!;
    expect((await t.client.listPermissions({ sessionId })).permissions).toEqual([]);
    const last = (await t.client.listMessages({ sessionId })).messages.at(-1)?.message?.kind;
    expect(last?.case === "assistant" && last.value.error?.kind.case).toBe("aborted");
  });
});
