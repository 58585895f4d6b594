import { mkdir, readFile, stat } from "node:fs/promises";
import path from "node:path";
import { toJsonString } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PermissionRequestSchema, type PermissionRequest } from "../../gen/ledger/v1/permission_pb.js";
import { runCli, type CliRun } from "../support/cli.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { compatibleProvider, NO_RETRY } from "../support/mock-models.js";
import { startFakeOpenAI, type FakeOpenAI, type ScriptedReply } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { waitFor } from "../support/wait.js";

// The second client's commands of agent edits, run in-process through `main` against a real
// server (--url): `ledger permissions`, `reply`, `revert`, `unrevert`; their outputs, JSON Lines
// and usage errors.

let t: TestLedger;
let fake: FakeOpenAI;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  t = await startTestLedger(
    {
      model: "local/qwen",
      provider: { local: compatibleProvider(fake.url, { qwen: {} }, "test") },
      retry: NO_RETRY,
      agent: { build: { permission: { write: "ask" } } },
    },
    { transport: "http" },
  );
});
afterAll(async () => {
  await t?.close();
  await fake?.close();
});

/** `ledger <args> --url <the test server>`, in-process, in the test directory. */
function ledger(...args: string[]): Promise<CliRun> {
  return runCli([...args, "--url", t.ledger.url], { cwd: t.dir, env: {} });
}

const write = (id: string, file: string, content: string): ScriptedReply => ({
  kind: "stream",
  chunks: [{ toolCall: { id, name: "write", arguments: JSON.stringify({ filePath: file, content }) } }],
});
const say = (words: string): ScriptedReply => ({ kind: "stream", chunks: [{ text: words }] });

/** A session in a fresh subdirectory; a prompt asking to write `file`, waiting for the request. */
async function askToWrite(
  name: string,
  file: string,
  content: string,
): Promise<{ sessionId: string; dir: string; request: PermissionRequest }> {
  const dir = path.join(t.dir, name);
  await mkdir(dir);
  const sessionId = (await t.client.createSession({ directory: dir })).session!.id;
  fake.push(write(`call_${name}`, file, content), say(`Done with ${file}.`));
  await t.client.promptAsync({ sessionId, parts: [text(`write ${file}`)] });
  const request = await waitFor("the permission request", async () => (await t.client.listPermissions({ sessionId })).permissions[0]);
  return { sessionId, dir, request };
}

async function untilIdle(sessionId: string): Promise<void> {
  await waitFor("the session to go idle", async () => (await t.client.getStatus({})).statuses[sessionId] === undefined);
}

describe("ledger permissions and reply", () => {
  it("lists a pending request with its diff (all sessions, one session, --json), answers it once, refuses a second answer", async () => {
    expect(await ledger("permissions")).toEqual({ code: 0, stdout: "no pending permission requests\n", stderr: "" });
    const { sessionId, dir, request } = await askToWrite("once", "hello.txt", "one\ntwo\n");

    const listed = await ledger("permissions");
    expect(listed).toEqual({
      code: 0,
      stdout:
        `${request.id}  ${sessionId}  write hello.txt\n` +
        "Index: hello.txt\n===================================================================\n--- hello.txt\n+++ hello.txt\n" +
        "@@ -0,0 +1,2 @@\n+one\n+two\n",
      stderr: "",
    });
    expect((await ledger("permissions", sessionId)).stdout).toBe(listed.stdout);
    expect(await ledger("permissions", sessionId, "--json")).toEqual({
      code: 0,
      stdout: `${toJsonString(PermissionRequestSchema, request)}\n`,
      stderr: "",
    });

    expect(await ledger("reply", sessionId, request.id, "once")).toEqual({ code: 0, stdout: "allowed once\n", stderr: "" });
    await untilIdle(sessionId);
    expect(await readFile(path.join(dir, "hello.txt"), "utf8")).toBe("one\ntwo\n");
    expect(await ledger("permissions", sessionId)).toEqual({ code: 0, stdout: "no pending permission requests\n", stderr: "" });
    expect(await ledger("permissions", sessionId, "--json")).toEqual({ code: 0, stdout: "", stderr: "" });

    expect(await ledger("reply", sessionId, request.id, "always")).toEqual({
      code: 1,
      stdout: "",
      stderr: `error: FailedPrecondition: permission_id: permission request ${request.id} was already answered (once)\n`,
    });
  });

  it("rejects with --message (the model sees the feedback), and prints the request sent with --json", async () => {
    const { sessionId, dir, request } = await askToWrite("reject", "no.txt", "no\n");
    // "r", as the prompt's question teaches it, is "reject".
    expect(await ledger("reply", sessionId, request.id, "r", "--message", "not now", "--json")).toEqual({
      code: 0,
      stdout: `{"sessionId":"${sessionId}","permissionId":"${request.id}","reply":"PERMISSION_REPLY_REJECT","message":"not now"}\n`,
      stderr: "",
    });
    await untilIdle(sessionId);
    await expect(stat(path.join(dir, "no.txt"))).rejects.toThrow(/ENOENT/);
    const { messages } = await t.client.listMessages({ sessionId });
    const tool = messages[1]!.parts.find((p) => p.kind.case === "tool");
    expect(tool?.kind.case === "tool" && tool.kind.value.state?.status).toMatchObject({
      case: "error",
      value: { error: "The user rejected permission to use this specific tool call with the following feedback: not now" },
    });
  });

  it("refuses usage errors before sending anything, and shows the server's codes", async () => {
    const { sessionId, request } = await askToWrite("usage", "u.txt", "u\n");
    const maybe = await ledger("reply", sessionId, request.id, "maybe");
    expect(maybe.code).toBe(1);
    expect(maybe.stderr).toContain(
      "error: command-argument value 'maybe' is invalid for argument 'reply'. Allowed choices are once, always, reject, o, a, r.",
    );
    expect(await ledger("reply", sessionId, request.id, "once", "--message", "why")).toEqual({
      code: 1,
      stdout: "",
      stderr: "error: --message is the feedback of a rejection: use it with reject, not once\n",
    });
    expect((await t.client.listPermissions({ sessionId })).permissions.map((p) => p.id)).toEqual([request.id]);

    const unknown = "per_01JAAAAAAAAAAAAAAAAAAAAAAA";
    expect(await ledger("reply", sessionId, unknown, "once")).toEqual({
      code: 1,
      stdout: "",
      stderr: `error: NotFound: permission_id: permission request ${unknown} not found in this session\n`,
    });
    expect(await ledger("permissions", "ses_nope")).toMatchObject({
      code: 1,
      stdout: "",
      stderr: expect.stringMatching(/^error: InvalidArgument: session_id: must be ses_ followed by 26 Crockford base32 characters/),
    });
    const missing = await ledger("revert", sessionId);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("error: missing required argument 'message'");

    expect(await ledger("reply", sessionId, request.id, "reject")).toMatchObject({ code: 0, stdout: "rejected\n" });
    await untilIdle(sessionId);
  });
});

describe("ledger revert and unrevert", () => {
  it("revert restores the files of the turn and hides it; unrevert puts them back; --json prints the session", async () => {
    const { sessionId, dir, request } = await askToWrite("revert", "r.txt", "r\n");
    await ledger("reply", sessionId, request.id, "once");
    await untilIdle(sessionId);
    const { messages } = await t.client.listMessages({ sessionId });
    const userId = messages[0]!.message!.kind.value!.id;

    expect(await ledger("unrevert", sessionId)).toEqual({ code: 0, stdout: "no revert point\n", stderr: "" });
    expect(await ledger("revert", sessionId, userId)).toEqual({
      code: 0,
      stdout:
        `reverted ${sessionId} to ${userId}: it and everything after it are hidden (the next prompt removes them)\n` +
        `files restored as they were before; "ledger unrevert ${sessionId}" puts the changes back\n`,
      stderr: "",
    });
    await expect(stat(path.join(dir, "r.txt"))).rejects.toThrow(/ENOENT/);
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
    expect(await ledger("diff", sessionId)).toEqual({
      code: 0,
      stdout: `no changes (the session is reverted to ${userId}; "ledger unrevert ${sessionId}" brings its changes back)\n`,
      stderr: "",
    });
    // `messages` says why it shows nothing (not with --json: only messages there).
    expect(await ledger("messages", sessionId)).toEqual({
      code: 0,
      stdout: `reverted to ${userId}: it and the messages after it are hidden; "ledger unrevert ${sessionId}" shows them again\n`,
      stderr: "",
    });
    expect(await ledger("messages", sessionId, "--json")).toEqual({ code: 0, stdout: "", stderr: "" });

    expect(await ledger("unrevert", sessionId)).toEqual({
      code: 0,
      stdout: `unreverted ${sessionId}: the messages from ${userId} on are shown again\nfiles put back as they were before the revert\n`,
      stderr: "",
    });
    expect(await readFile(path.join(dir, "r.txt"), "utf8")).toBe("r\n");

    // A revert point on the answer's text: no step changed a file from there on.
    const answerId = messages[2]!.message!.kind.value!.id;
    const json = await ledger("revert", sessionId, answerId, "--json");
    expect(json.code).toBe(0);
    const session = JSON.parse(json.stdout) as { id: string; revert?: { messageId: string; snapshot?: string } };
    expect(session).toMatchObject({ id: sessionId, revert: { messageId: answerId } });
    expect(session.revert?.snapshot).toBeUndefined();
    expect(await ledger("unrevert", sessionId)).toEqual({
      code: 0,
      stdout: `unreverted ${sessionId}: the messages from ${answerId} on are shown again\nno files to put back\n`,
      stderr: "",
    });
    expect(JSON.parse((await ledger("unrevert", sessionId, "--json")).stdout)).toMatchObject({ id: sessionId });
    expect(await readFile(path.join(dir, "r.txt"), "utf8")).toBe("r\n");

    const busy = await askToWrite("busy", "b.txt", "b\n");
    expect(
      await ledger(
        "revert",
        busy.sessionId,
        (await t.client.listMessages({ sessionId: busy.sessionId })).messages[0]!.message!.kind.value!.id,
      ),
    ).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/^error: FailedPrecondition: /),
    });
    await ledger("reply", busy.sessionId, busy.request.id, "reject");
    await untilIdle(busy.sessionId);
  });
});
