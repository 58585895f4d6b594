import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { ServiceError } from "@grpc/grpc-js";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { encodeEnvelope } from "@connectrpc/connect/protocol";
import { endStreamFlag, endStreamFromJson, errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { ShellRequestSchema, SummarizeRequestSchema } from "../../gen/ledger/v1/service_pb.js";
import { StoppedWaitingError } from "../../src/errors.js";
import { newId } from "../../src/ids.js";
import { runShell } from "../../src/ledger/shell.js";
import { summarizeSession } from "../../src/ledger/summarize.js";
import { grpcLedgerClient, type GrpcLedger } from "../support/grpc-js.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { sleep, waitFor } from "../support/wait.js";

// A client deadline (connect-timeout-ms, grpc-timeout) that passes while the call waits for the
// model ends the call with DEADLINE_EXCEEDED — never a success carrying a half-finished answer —
// and the run goes on: ErrorInfo names the stored message, and WatchSession picks the run up.

let t: FakeModelLedger;
let grpc: GrpcLedger;

/** A reply that takes about 1.2 s: six words, 200 ms apart. */
const SLOW = {
  kind: "stream" as const,
  chunks: ["one ", "two ", "three ", "four ", "five ", "six"].map((w) => ({ text: w })),
  delayMs: 200,
};

let pluginDir: string;
beforeAll(async () => {
  // A chat.message hook that takes 600 ms for a "[slow]" prompt: a prompt still being prepared
  // (as while a large file is read) when its call's deadline (300 ms) passes.
  pluginDir = await mkdtemp(path.join(os.tmpdir(), "ledger-deadline-plugin-"));
  await writeFile(
    path.join(pluginDir, "slow.mjs"),
    `export async function chatMessage({ parts }) {
       if (parts.some((p) => p.text?.text === "[slow]")) await new Promise((r) => setTimeout(r, 600));
     }`,
  );
  t = await startFakeModelLedger({ plugin: [path.join(pluginDir, "slow.mjs")] }, { provider: "main", transport: "http" });
  grpc = grpcLedgerClient(t.ledger.url);
});
afterAll(async () => {
  grpc?.close();
  await t?.close();
  await rm(pluginDir, { recursive: true, force: true });
});

const newSession = async () => (await t.client.createSession({ directory: t.dir })).session!.id;

/** The RUN_CONTINUES ErrorInfo of a deadline error. */
function runContinues(error: ConnectError): Record<string, string> {
  expect(error.code).toBe(Code.DeadlineExceeded);
  const [info] = error.findDetails(ErrorInfoSchema);
  expect(info?.reason).toBe("RUN_CONTINUES");
  expect(error.rawMessage).toMatch(
    /the prompt is stored and its run goes on: follow it with WatchSession\(session_id=ses_\w+, after_seq=\d+\)/,
  );
  return info!.metadata;
}

// Connect and grpc-js clients enforce their deadline themselves and see their own error first;
// these raw calls send only the deadline header and read what the server answers.
const url = (method: string) => `${t.ledger.url}/ledger.v1.SessionService/${method}`;

/** A unary Connect JSON call with `connect-timeout-ms`; the HTTP status and the error it answered. */
async function rawUnary(method: string, body: object, timeoutMs: number): Promise<{ status: number; error: ConnectError }> {
  const res = await fetch(url(method), {
    method: "POST",
    headers: { "content-type": "application/json", "connect-timeout-ms": String(timeoutMs) },
    body: JSON.stringify(body),
  });
  return {
    status: res.status,
    error: errorFromJsonBytes(new Uint8Array(await res.arrayBuffer()), undefined, new ConnectError("not an error body", Code.Unknown)),
  };
}

/** A server-streaming Connect JSON call with `connect-timeout-ms`: its messages and its end-stream error. */
async function rawStream(method: string, body: object, timeoutMs: number): Promise<{ events: SessionEvent[]; error?: ConnectError }> {
  const json = new TextEncoder().encode(JSON.stringify(body));
  const res = await fetch(url(method), {
    method: "POST",
    headers: { "content-type": "application/connect+json", "connect-protocol-version": "1", "connect-timeout-ms": String(timeoutMs) },
    body: encodeEnvelope(0, json),
  });
  const bytes = new Uint8Array(await res.arrayBuffer());
  const events: SessionEvent[] = [];
  for (let at = 0; at < bytes.length;) {
    const flags = bytes[at]!;
    const length = new DataView(bytes.buffer, bytes.byteOffset + at + 1, 4).getUint32(0);
    const payload = bytes.subarray(at + 5, at + 5 + length);
    at += 5 + length;
    if (flags & endStreamFlag) return { events, error: endStreamFromJson(payload).error };
    events.push(fromJson(SessionEventSchema, (JSON.parse(new TextDecoder().decode(payload)) as { event: JsonValue }).event));
  }
  return { events };
}

/** Waits until the session's last assistant message is complete and returns its text. */
async function finalText(sessionId: string): Promise<string> {
  return waitFor("the run to finish", async () => {
    const { messages } = await t.client.listMessages({ sessionId });
    const last = messages.at(-1);
    const message = last?.message?.kind;
    if (message?.case !== "assistant" || !message.value.time?.completed) return undefined;
    expect(message.value.error).toBeUndefined();
    return last!.parts.flatMap((p) => (p.kind.case === "text" ? [p.kind.value.text] : [])).join("");
  });
}

// A probe, 2026-12-02: a Prompt whose deadline passed while a large file draft was read answered
// 200 after 17.8 s, and one whose client had given up was stored later, after a prompt sent after it.
describe("a client deadline while the prompt is prepared, before it is stored", () => {
  // Concurrent: each waits on the hook and its own session.
  it.concurrent.for(["Prompt", "PromptAsync", "PromptStream"])(
    "%s: DEADLINE_EXCEEDED (NOT_STORED), and nothing is stored, then or later",
    async (method, { expect }) => {
      const sessionId = await newSession();
      const messageId = newId("msg");
      const body = { sessionId, messageId, noReply: true, parts: [{ text: { text: "[slow]" } }] };
      const error = method === "PromptStream" ? (await rawStream(method, body, 300)).error! : (await rawUnary(method, body, 300)).error;
      expect(error.code).toBe(Code.DeadlineExceeded);
      const [info] = error.findDetails(ErrorInfoSchema);
      expect(info).toMatchObject({ reason: "NOT_STORED", metadata: { session_id: sessionId, message_id: messageId } });
      expect(error.rawMessage).toBe(
        `the call ended (its deadline passed or it was cancelled) while the prompt was being prepared, before it was stored: nothing was stored; send it again (message_id ${messageId})`,
      );
      await sleep(1000); // past the hook's 600 ms (from a request sent 300 ms ago): the write would have happened by now
      expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
      // Sent again (same message_id, no deadline), it is stored once.
      const stored = await t.client.prompt({ sessionId, messageId, noReply: true, parts: [text("[slow]")] });
      expect(stored.message!.message!.kind.value!.id).toBe(messageId);
    },
  );
});

describe("a client deadline on Shell and Summarize", () => {
  /** Checks a RUN_CONTINUES deadline error of Shell or Summarize and returns its after_seq. */
  function goesOn(status: number, error: ConnectError, sessionId: string, name: string): bigint {
    expect(status).toBe(504);
    expect(error.code).toBe(Code.DeadlineExceeded);
    const [info] = error.findDetails(ErrorInfoSchema);
    expect(info?.reason).toBe("RUN_CONTINUES");
    expect(info?.metadata.session_id).toBe(sessionId);
    expect(error.rawMessage).toContain(`the call ended before the ${name} finished (its deadline passed or it was cancelled); it goes on`);
    return BigInt(info!.metadata.after_seq!);
  }

  it("Shell: DEADLINE_EXCEEDED (RUN_CONTINUES) instead of a late success; the command finishes and its events follow after_seq (a trial, 2026-12-04)", async () => {
    const sessionId = await newSession();
    const { status, error } = await rawUnary("Shell", { sessionId, agent: "build", command: "sleep 1; echo done" }, 300);
    const afterSeq = goesOn(status, error, sessionId, "shell command");
    const done = await waitFor("the command to finish", async () => {
      const last = (await t.client.listMessages({ sessionId })).messages.at(-1);
      const tool = last?.parts[0]?.kind;
      return tool?.case === "tool" && tool.value.state?.status.case === "completed" ? tool.value.state.status.value : undefined;
    });
    expect(done.output).toContain("done");
    const events: SessionEvent[] = [];
    for await (const res of t.client.watchSession({ sessionId, afterSeq })) {
      events.push(res.event!);
      if (res.event!.kind.case === "sessionStatus" && res.event!.kind.value.status.case === "idle") break;
    }
    expect(events[0]!.seq).toBe(afterSeq + 1n);
    expect(events.filter((e) => e.kind.case === "messageUpdated").length).toBeGreaterThanOrEqual(2);
  });

  it("Summarize: DEADLINE_EXCEEDED (RUN_CONTINUES); the summary is still written", async () => {
    const sessionId = await newSession();
    t.fake.push({ kind: "stream", chunks: [{ text: "hi" }] });
    await t.client.prompt({ sessionId, parts: [text("hello")] });
    t.fake.push(SLOW);
    const { status, error } = await rawUnary("Summarize", { sessionId }, 300);
    goesOn(status, error, sessionId, "summary");
    expect(await finalText(sessionId)).toBe("one two three four five six");
  });
});

describe("a call whose deadline passed before its Shell or Summarize started", () => {
  // The review of 2026-12-04: the deadline passed while the work waited for the session's lock,
  // the call answered "it goes on" (RUN_CONTINUES), and then the command ran (or failed busy) anyway.
  const expired = () => AbortSignal.abort(new ConnectError("the deadline passed", Code.DeadlineExceeded));

  it("Shell: NOT_STORED, the command never runs and nothing is stored", async () => {
    const sessionId = await newSession();
    const marker = path.join(t.dir, `ran-${sessionId}`);
    const error = await runShell(
      t.ledger.deps,
      create(ShellRequestSchema, { sessionId, agent: "build", command: `touch ${JSON.stringify(marker)}` }),
      expired(),
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoppedWaitingError);
    expect(error).toMatchObject({ reason: "NOT_STORED", metadata: { session_id: sessionId } });
    expect((error as Error).message).toContain("the call ended before the shell command started");
    await sleep(300);
    expect(existsSync(marker)).toBe(false);
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
    // The session is free again: a Shell with time to spare runs.
    const ran = await runShell(t.ledger.deps, create(ShellRequestSchema, { sessionId, agent: "build", command: "echo ok" }));
    expect(ran.parts[0]?.kind.case).toBe("tool");
  });

  it("Summarize: NOT_STORED, no summary is written", async () => {
    const sessionId = await newSession();
    t.fake.push({ kind: "stream", chunks: [{ text: "hi" }] });
    await t.client.prompt({ sessionId, parts: [text("hello")] });
    const before = (await t.client.listMessages({ sessionId })).messages.map((m) => m.message!.kind.value!.id);
    const error = await summarizeSession(t.ledger.deps, create(SummarizeRequestSchema, { sessionId }), expired()).catch((e: unknown) => e);
    expect(error).toMatchObject({ reason: "NOT_STORED", metadata: { session_id: sessionId } });
    await sleep(300);
    expect((await t.client.listMessages({ sessionId })).messages.map((m) => m.message!.kind.value!.id)).toEqual(before);
  });
});

describe("a prompt queued behind another", () => {
  const idOf = (res: { message?: { message?: { kind: { value?: { id: string } } } } }) => res.message!.message!.kind.value!.id;
  const parentOf = (e: SessionEvent) =>
    e.kind.case === "messageUpdated" && e.kind.value.message?.kind.case === "assistant"
      ? e.kind.value.message.kind.value.parentId
      : undefined;

  it("Prompt and PromptStream end with their own answer, not when the prompts queued after them are answered (a trial, 2026-12-04)", async () => {
    const sessionId = await newSession();
    // A runs 1.2 s; B and D answer at once; C never ends until aborted.
    t.fake.push(SLOW, { kind: "stream", chunks: [{ text: "B done" }] }, { kind: "stream", chunks: [{ text: "C starts" }, { hang: true }] });
    await t.client.promptAsync({ sessionId, parts: [text("A")] });
    const b = t.client.prompt({ sessionId, parts: [text("B")] });
    await waitFor("B to be stored", async () => (await t.client.listMessages({ sessionId })).messages.length >= 2);
    const c = await t.client.promptAsync({ sessionId, parts: [text("C")] });
    const answer = await b;
    expect(answer.message?.parts.flatMap((p) => (p.kind.case === "text" ? [p.kind.value.text] : []))).toEqual(["B done"]);
    // C still runs (it never ends until aborted): B's call did not wait for it.
    expect((await t.client.getStatus({})).statuses[sessionId]).toBeDefined();
    await stopRun(sessionId);

    // The same with PromptStream: its events end with its answer, none of E's run is in it.
    t.fake.push(SLOW, { kind: "stream", chunks: [{ text: "D done" }] }, { kind: "stream", chunks: [{ text: "E starts" }, { hang: true }] });
    await t.client.promptAsync({ sessionId, parts: [text("first")] });
    const events: SessionEvent[] = [];
    const stream = (async () => {
      for await (const res of t.client.promptStream({ sessionId, parts: [text("D")] })) events.push(res.event!);
    })();
    await waitFor("D to be stored", async () => events.some((e) => e.kind.case === "prompted"));
    const e = await t.client.promptAsync({ sessionId, parts: [text("E")] });
    await stream;
    const d = events.find((ev) => ev.kind.case === "prompted")!;
    const dId = d.kind.case === "prompted" ? d.kind.value.messageId : "";
    const parents = new Set(events.map(parentOf).filter((p) => p !== undefined));
    expect([...parents]).toContain(dId);
    expect(parents.has(idOf(e))).toBe(false);
    expect(events.at(-1)!.kind.case).not.toBe("partDelta");
    await stopRun(sessionId);
    void c;
  });

  /** Aborts the session's run, waits for idle, and drops a scripted reply the abort left unused. */
  async function stopRun(sessionId: string): Promise<void> {
    await t.client.abort({ sessionId });
    await waitFor("idle", async () => (await t.client.getStatus({})).statuses[sessionId] === undefined);
    t.fake.reset();
  }
});

describe("a client deadline while waiting for the model", () => {
  it("Prompt (connect-timeout-ms): DEADLINE_EXCEEDED with ErrorInfo.metadata.message_id, not a half-finished answer; the run completes and WatchSession follows it", async () => {
    const sessionId = await newSession();
    t.fake.push(SLOW);
    const { status, error } = await rawUnary("Prompt", { sessionId, parts: [{ text: { text: "slow please" } }] }, 400);
    expect(status).toBe(504);
    const metadata = runContinues(error);
    const { messages } = await t.client.listMessages({ sessionId });
    expect(messages[0]!.message!.kind.value!.id).toBe(metadata.message_id);
    expect(metadata.session_id).toBe(sessionId);
    // Following the run from the cursor in the error ends with the answer and idle.
    const events: SessionEvent[] = [];
    for await (const res of t.client.watchSession({ sessionId, afterSeq: BigInt(metadata.after_seq!) })) {
      events.push(res.event!);
      if (res.event!.kind.case === "sessionStatus" && res.event!.kind.value.status.case === "idle") break;
    }
    // (Live part_delta events carry the seq of the snapshot they extend, so only stored ones count here.)
    expect(events.find((e) => e.kind.case !== "partDelta")!.seq).toBe(BigInt(metadata.after_seq!) + 1n);
    expect(await finalText(sessionId)).toBe("one two three four five six");
  });

  it("PromptStream (connect-timeout-ms): the events so far, then DEADLINE_EXCEEDED, never a success before idle", async () => {
    const sessionId = await newSession();
    t.fake.push(SLOW);
    const { events, error } = await rawStream("PromptStream", { sessionId, parts: [{ text: { text: "slow stream" } }] }, 600);
    const metadata = runContinues(error!);
    expect(events.map((e) => e.kind.case)).toContain("prompted");
    expect(metadata.after_seq).toBe(String(events.at(-1)!.seq));
    expect(events.some((e) => e.kind.case === "sessionStatus" && e.kind.value.status.case === "idle")).toBe(false);
    expect(await finalText(sessionId)).toBe("one two three four five six");
  });

  it("a Connect client's own timeoutMs: DEADLINE_EXCEEDED, and the server logs and counts the call as deadline_exceeded", async () => {
    const sessionId = await newSession();
    t.fake.push(SLOW);
    const error = await t.client.prompt({ sessionId, parts: [text("slow client")] }, { timeoutMs: 400 }).then(
      () => new ConnectError("expected DEADLINE_EXCEEDED", Code.Unknown),
      (e: unknown) => ConnectError.from(e),
    );
    expect(error.code).toBe(Code.DeadlineExceeded);
    expect(await finalText(sessionId)).toBe("one two three four five six");
    const metrics = await (await fetch(`${t.ledger.url}/metrics`)).text();
    expect(metrics).toMatch(/ledger_rpc_requests_total\{procedure="\/ledger\.v1\.SessionService\/Prompt",code="deadline_exceeded"\} [1-9]/);
  });

  it("Prompt over gRPC (grpc-js deadline): status DEADLINE_EXCEEDED (4); the run completes", async () => {
    const sessionId = await newSession();
    t.fake.push(SLOW);
    const error = await new Promise<ServiceError | null>((resolve) => {
      const prompt = grpc.prompt!.bind(grpc) as unknown as (
        request: object,
        options: { deadline: number },
        callback: (error: ServiceError | null) => void,
      ) => void;
      prompt({ sessionId, parts: [{ text: { text: "slow grpc" } }] }, { deadline: Date.now() + 400 }, resolve);
    });
    expect(error?.code).toBe(4);
    expect(await finalText(sessionId)).toBe("one two three four five six");
  });

  it("a retry with the same message_id while the answer runs waits for the final answer (Prompt), or follows the run to idle (PromptStream)", async () => {
    const sessionId = await newSession();
    const messageId = newId("msg");
    const request = { sessionId, messageId, parts: [text("slow, retried")] };
    t.fake.push(SLOW);
    const first = await t.client.prompt(request, { timeoutMs: 300 }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e).code,
    );
    expect(first).toBe(Code.DeadlineExceeded);
    // The answer has started and is not complete: a retry must not take it for the answer.
    const [retried, streamed] = await Promise.all([
      t.client.prompt(request),
      (async () => {
        const events: SessionEvent[] = [];
        for await (const res of t.client.promptStream(request)) events.push(res.event!);
        return events;
      })(),
    ]);
    const answer = retried.message!.message!.kind;
    expect(answer.case === "assistant" && [answer.value.parentId, answer.value.finish, answer.value.time?.completed !== undefined]).toEqual(
      [messageId, "stop", true],
    );
    expect(retried.message!.parts.flatMap((p) => (p.kind.case === "text" ? [p.kind.value.text] : []))).toEqual([
      "one two three four five six",
    ]);
    const last = streamed.at(-1)!;
    expect(last.kind.case === "sessionStatus" && last.kind.value.status.case).toBe("idle");
    expect(
      streamed.some(
        (e) =>
          e.kind.case === "messageUpdated" &&
          e.kind.value.message?.kind.case === "assistant" &&
          e.kind.value.message.kind.value.finish === "stop",
      ),
    ).toBe(true);
  });

  it("WatchSession (connect-timeout-ms) ends with DEADLINE_EXCEEDED (WATCH_INTERRUPTED, after_seq = the last seq sent)", async () => {
    const sessionId = await newSession();
    const { events, error } = await rawStream("WatchSession", { sessionId, afterSeq: "0" }, 300);
    expect(events.map((e) => e.seq)).toEqual([1n]);
    expect(error?.code).toBe(Code.DeadlineExceeded);
    const [info] = error!.findDetails(ErrorInfoSchema);
    expect(info?.reason).toBe("WATCH_INTERRUPTED");
    expect(info?.metadata).toEqual({ session_id: sessionId, after_seq: "1" });
  });
});
