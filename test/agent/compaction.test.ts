import { writeFile } from "node:fs/promises";
import path from "node:path";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import { COMPACTION_QUESTION, CONTINUE_TEXT, PRUNED_OUTPUT } from "../../src/agent/compacted-history.js";
import { SUMMARY_REQUEST, SUMMARY_SYSTEM } from "../../src/agent/compaction.js";
import { failure } from "../support/errors.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { NO_RETRY } from "../support/mock-models.js";
import type { RecordedRequest } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { assistantOf, storedMessages } from "../support/stored.js";
import { waitFor } from "../support/wait.js";

// Compaction and pruning (issue 16) through the real service and a scripted OpenAI-compatible
// server: what is stored, and what the server was sent. The model "m" has a context limit of
// 1,000 tokens with 100 reserved for output, so a step reporting 950 prompt tokens overflows.

let t: FakeModelLedger;
const BIG = Array.from({ length: 40 }, (_, i) => `line ${i} ${"x".repeat(40)}`).join("\n");

beforeAll(async () => {
  t = await startFakeModelLedger(
    { retry: NO_RETRY, compaction: { prune_protect_tokens: 300, prune_minimum_tokens: 100 } },
    { modelConfig: { limit: { context: 1000, output: 100 } } },
  );
  await writeFile(path.join(t.dir, "notes.txt"), "hello from notes\n");
  await writeFile(path.join(t.dir, "big.txt"), `${BIG}\n`);
});
afterAll(async () => {
  await t?.close();
});
beforeEach(() => {
  t.fake.reset();
  t.fake.requests.length = 0;
});

const OVERFLOW = { prompt_tokens: 950, completion_tokens: 5 };

/** The messages of a request as "role:text" lines (tool calls as `call:<tool>`, tool results as their text). */
function sent(request: RecordedRequest | undefined): string[] {
  const messages = (request?.body.messages ?? []) as Array<Record<string, unknown>>;
  return messages.map((m) => {
    const content = m.content;
    const body =
      typeof content === "string"
        ? content
        : Array.isArray(content)
          ? (content as Array<Record<string, unknown>>).map((c) => (typeof c.text === "string" ? c.text : `[${String(c.type)}]`)).join("")
          : "";
    const calls = Array.isArray(m.tool_calls)
      ? (m.tool_calls as Array<{ function: { name: string } }>).map((c) => `call:${c.function.name}`).join(",")
      : "";
    return `${String(m.role)}:${body}${calls}`;
  });
}

/** A stored part as a compact string: kind, synthetic text flag, tool state, compaction flags. */
function partShape(p: Part): string {
  switch (p.kind.case) {
    case "text":
      return p.kind.value.synthetic ? "text(synthetic)" : "text";
    case "tool":
      return `tool:${p.kind.value.tool}:${p.kind.value.state?.status.case}`;
    case "compaction":
      return `compaction(auto=${p.kind.value.auto},overflow=${p.kind.value.overflow})`;
    case "stepFinish":
      return `stepFinish:${p.kind.value.reason}`;
    default:
      return p.kind.case ?? "";
  }
}

/** Messages as compact shapes: role, the index of the parent, finish, summary, parts. */
function shapes(messages: MessageWithParts[]) {
  const ids = messages.map((m) => m.message!.kind.value!.id);
  return messages.map((m) => {
    const a = assistantOf(m);
    if (!a) return { role: "user", parts: m.parts.map(partShape) };
    return { role: "assistant", parent: ids.indexOf(a.parentId), finish: a.finish, summary: a.summary, parts: m.parts.map(partShape) };
  });
}

const answer = (parent: number, finish: string, parts: string[], summary = false) => ({
  role: "assistant",
  parent,
  finish,
  summary,
  parts,
});
const textStep = ["stepStart", "text", "stepFinish:stop"];

async function newSession(): Promise<string> {
  return (await t.client.createSession({ directory: t.dir })).session!.id;
}

describe("automatic compaction", () => {
  it("after a turn that passed the context limit: a compaction and a summary follow, and the next prompt is sent only the summary and what is newer", async () => {
    const sessionId = await newSession();
    t.fake.push(
      { kind: "stream", chunks: [{ text: "answer one" }], usage: OVERFLOW },
      { kind: "stream", chunks: [{ text: "SUMMARY ONE" }], usage: { prompt_tokens: 960, completion_tokens: 20 } },
    );
    const first = await t.client.prompt({ sessionId, parts: [text("first question")] });
    expect(first.message!.parts.map(partShape)).toEqual(textStep);

    const messages = await storedMessages(t.client, sessionId);
    expect(shapes(messages)).toEqual([
      { role: "user", parts: ["text"] },
      answer(0, "stop", textStep),
      { role: "user", parts: ["compaction(auto=true,overflow=true)"] },
      answer(2, "stop", textStep, true),
    ]);
    expect(messages[3]!.parts[1]!.kind.value).toMatchObject({ text: "SUMMARY ONE" });
    // The summary's request: the summarizing system prompt, the conversation, the request; no tools.
    expect(t.fake.requests).toHaveLength(2);
    expect(sent(t.fake.requests[1])).toEqual([
      `system:${SUMMARY_SYSTEM}`,
      "user:first question",
      "assistant:answer one",
      `user:${SUMMARY_REQUEST}`,
    ]);
    expect(t.fake.requests[1]!.body.tools).toBeUndefined();

    t.fake.push({ kind: "stream", chunks: [{ text: "answer two" }] });
    await t.client.prompt({ sessionId, parts: [text("second question")] });
    expect(sent(t.fake.requests[2]).slice(1)).toEqual([`user:${COMPACTION_QUESTION}`, "assistant:SUMMARY ONE", "user:second question"]);
    // The stored history stays whole.
    expect(shapes(await storedMessages(t.client, sessionId))).toEqual([
      { role: "user", parts: ["text"] },
      answer(0, "stop", textStep),
      { role: "user", parts: ["compaction(auto=true,overflow=true)"] },
      answer(2, "stop", textStep, true),
      { role: "user", parts: ["text"] },
      answer(4, "stop", textStep),
    ]);
  });

  it("half-way through a turn: the compaction comes before the next step, which is sent the summary and goes on answering the same prompt", async () => {
    const sessionId = await newSession();
    t.fake.push(
      {
        kind: "stream",
        chunks: [{ toolCall: { id: "c1", name: "read", arguments: JSON.stringify({ filePath: "notes.txt" }) } }],
        usage: OVERFLOW,
      },
      { kind: "stream", chunks: [{ text: "SUMMARY MID" }] },
      { kind: "stream", chunks: [{ text: "all done" }] },
    );
    const res = await t.client.prompt({ sessionId, parts: [text("read the notes")] });
    expect(res.message!.parts.map(partShape)).toEqual(textStep);

    const messages = await storedMessages(t.client, sessionId);
    expect(shapes(messages)).toEqual([
      { role: "user", parts: ["text"] },
      answer(0, "tool-calls", ["stepStart", "tool:read:completed", "stepFinish:tool-calls"]),
      { role: "user", parts: ["compaction(auto=true,overflow=true)"] },
      answer(2, "stop", textStep, true),
      answer(0, "stop", textStep),
    ]);
    expect(t.fake.requests).toHaveLength(3);
    const summaryRequest = sent(t.fake.requests[1]);
    expect(summaryRequest[1]).toBe("user:read the notes");
    expect(summaryRequest[2]).toBe("assistant:call:read");
    expect(summaryRequest[3]).toContain("hello from notes");
    expect(summaryRequest.at(-1)).toBe(`user:${SUMMARY_REQUEST}`);
    // The next step: the summary, then the (unstored) request to carry on.
    expect(sent(t.fake.requests[2]).slice(1)).toEqual([`user:${COMPACTION_QUESTION}`, "assistant:SUMMARY MID", `user:${CONTINUE_TEXT}`]);
  });

  it("a turn interrupted after its compaction is resumed (ResumeSession picks the turn's prompt, not the compaction)", async () => {
    const sessionId = await newSession();
    t.fake.push(
      {
        kind: "stream",
        chunks: [{ toolCall: { id: "c1", name: "read", arguments: JSON.stringify({ filePath: "notes.txt" }) } }],
        usage: OVERFLOW,
      },
      { kind: "stream", chunks: [{ text: "SUMMARY R" }] },
      { kind: "stream", chunks: [{ hang: true }] },
    );
    const stored = await t.client.promptAsync({ sessionId, parts: [text("read the notes")] });
    await waitFor("the step after the compaction", () => t.fake.requests.length === 3);
    await t.client.abort({ sessionId });
    t.fake.push({ kind: "stream", chunks: [{ text: "resumed" }] });
    for await (const _ of t.client.resumeSession({ sessionId })) void _;
    expect(sent(t.fake.requests[3]).slice(1)).toEqual([`user:${COMPACTION_QUESTION}`, "assistant:SUMMARY R", `user:${CONTINUE_TEXT}`]);
    const messages = await storedMessages(t.client, sessionId);
    expect(shapes(messages).map((m) => ("parent" in m ? `${m.parent}:${m.finish}` : "user"))).toEqual([
      "user",
      "0:tool-calls",
      "user",
      "2:stop",
      "0:error",
      "0:stop",
    ]);
    expect(assistantOf(messages.at(-1))?.parentId).toBe(stored.message!.message!.kind.value!.id);
  });

  it("a model without a known context limit is never compacted", async () => {
    const other = await startFakeModelLedger({ retry: NO_RETRY });
    try {
      const sessionId = (await other.client.createSession({ directory: other.dir })).session!.id;
      other.fake.push({ kind: "stream", chunks: [{ text: "big" }], usage: { prompt_tokens: 10_000_000, completion_tokens: 1 } });
      await other.client.prompt({ sessionId, parts: [text("q")] });
      expect(shapes(await storedMessages(other.client, sessionId))).toEqual([
        { role: "user", parts: ["text"] },
        answer(0, "stop", textStep),
      ]);
      expect(other.fake.requests).toHaveLength(1);
    } finally {
      await other.close();
    }
  });

  it('"compaction": {"auto": false} turns it off', async () => {
    const other = await startFakeModelLedger(
      { retry: NO_RETRY, compaction: { auto: false } },
      { modelConfig: { limit: { context: 1000, output: 100 } } },
    );
    try {
      const sessionId = (await other.client.createSession({ directory: other.dir })).session!.id;
      other.fake.push({ kind: "stream", chunks: [{ text: "big" }], usage: OVERFLOW });
      await other.client.prompt({ sessionId, parts: [text("q")] });
      expect(shapes(await storedMessages(other.client, sessionId))).toHaveLength(2);
      expect(other.fake.requests).toHaveLength(1);
    } finally {
      await other.close();
    }
  });
});

describe("Summarize", () => {
  it("stores a compaction (not auto) and a summary written by the session's model, and answers with the summary", async () => {
    const sessionId = await newSession();
    t.fake.push({ kind: "stream", chunks: [{ text: "answer" }] }, { kind: "stream", chunks: [{ text: "THE SUMMARY" }] });
    await t.client.prompt({ sessionId, parts: [text("question")] });
    const res = await t.client.summarize({ sessionId });
    const summary = assistantOf(res.message);
    expect(summary).toMatchObject({ summary: true, finish: "stop", agent: "build", model: { providerId: "fake", modelId: "m" } });
    expect(res.message!.parts.map(partShape)).toEqual(textStep);
    expect(res.message!.parts[1]!.kind.value).toMatchObject({ text: "THE SUMMARY" });
    const messages = await storedMessages(t.client, sessionId);
    expect(shapes(messages)).toEqual([
      { role: "user", parts: ["text"] },
      answer(0, "stop", textStep),
      { role: "user", parts: ["compaction(auto=false,overflow=false)"] },
      answer(2, "stop", textStep, true),
    ]);
    expect(summary!.id).toBe(messages[3]!.message!.kind.value!.id);
    expect(sent(t.fake.requests[1])).toEqual([`system:${SUMMARY_SYSTEM}`, "user:question", "assistant:answer", `user:${SUMMARY_REQUEST}`]);
    // The session is idle again, and its events tell the story in order.
    const { statuses } = await t.client.getStatus({});
    expect(statuses[sessionId]).toBeUndefined();
  });

  it("a second summary summarizes the first and what followed it", async () => {
    const sessionId = await newSession();
    t.fake.push(
      { kind: "stream", chunks: [{ text: "a1" }] },
      { kind: "stream", chunks: [{ text: "S1" }] },
      { kind: "stream", chunks: [{ text: "a2" }] },
      { kind: "stream", chunks: [{ text: "S2" }] },
    );
    await t.client.prompt({ sessionId, parts: [text("q1")] });
    await t.client.summarize({ sessionId });
    await t.client.prompt({ sessionId, parts: [text("q2")] });
    await t.client.summarize({ sessionId });
    expect(sent(t.fake.requests[3]).slice(1)).toEqual([
      `user:${COMPACTION_QUESTION}`,
      "assistant:S1",
      "user:q2",
      "assistant:a2",
      `user:${SUMMARY_REQUEST}`,
    ]);
  });

  it("is refused while the session's loop runs (FAILED_PRECONDITION, SESSION_BUSY), and for an unknown session (NOT_FOUND)", async () => {
    const sessionId = await newSession();
    t.fake.push({ kind: "stream", chunks: [{ hang: true }] });
    await t.client.promptAsync({ sessionId, parts: [text("hang")] });
    await waitFor("the model request", () => t.fake.requests.length === 1);
    expect(await failure(t.client.summarize({ sessionId }))).toMatchObject({ code: Code.FailedPrecondition, reason: "SESSION_BUSY" });
    await t.client.abort({ sessionId });
    expect(await failure(t.client.summarize({ sessionId: "ses_00000000000000000000000000" }))).toMatchObject({ code: Code.NotFound });
  });

  it("is refused for a session without messages (FAILED_PRECONDITION, NOTHING_TO_SUMMARIZE): no model call, nothing stored", async () => {
    const sessionId = await newSession();
    const before = t.fake.requests.length;
    expect(await failure(t.client.summarize({ sessionId }))).toEqual({
      code: Code.FailedPrecondition,
      reason: "NOTHING_TO_SUMMARIZE",
      field: undefined,
    });
    expect(t.fake.requests.length).toBe(before);
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
  });
});

describe("revert past a compaction", () => {
  it("brings the earlier history back to the model", async () => {
    const sessionId = await newSession();
    t.fake.push(
      { kind: "stream", chunks: [{ text: "a1" }] },
      { kind: "stream", chunks: [{ text: "S1" }] },
      { kind: "stream", chunks: [{ text: "a2" }] },
    );
    await t.client.prompt({ sessionId, parts: [text("q1")] });
    await t.client.summarize({ sessionId });
    const compaction = (await storedMessages(t.client, sessionId))[2]!;
    await t.client.revert({ sessionId, messageId: compaction.message!.kind.value!.id });
    await t.client.prompt({ sessionId, parts: [text("q2")] });
    expect(sent(t.fake.requests[2]).slice(1)).toEqual(["user:q1", "assistant:a1", "user:q2"]);
    expect(shapes(await storedMessages(t.client, sessionId))).toEqual([
      { role: "user", parts: ["text"] },
      answer(0, "stop", textStep),
      { role: "user", parts: ["text"] },
      answer(2, "stop", textStep),
    ]);
  });
});

describe("pruning old tool output", () => {
  it("stops sending outputs older than the protected ones, keeps them stored and marks them with the time they were compacted", async () => {
    const sessionId = await newSession();
    const readBig = (id: string) => ({
      kind: "stream" as const,
      chunks: [{ toolCall: { id, name: "read", arguments: JSON.stringify({ filePath: "big.txt" }) } }],
    });
    t.fake.push(
      readBig("c1"),
      { kind: "stream", chunks: [{ text: "ok1" }] },
      readBig("c2"),
      { kind: "stream", chunks: [{ text: "ok2" }] },
      { kind: "stream", chunks: [{ text: "ok3" }] },
      { kind: "stream", chunks: [{ text: "ok4" }] },
    );
    for (const q of ["t1", "t2", "t3"]) await t.client.prompt({ sessionId, parts: [text(q)] });
    const tools = (await storedMessages(t.client, sessionId)).flatMap((m) => m.parts.filter((p) => p.kind.case === "tool"));
    const completed = tools.map((p) =>
      p.kind.case === "tool" && p.kind.value.state?.status.case === "completed" ? p.kind.value.state.status.value : undefined,
    );
    // Turn 1's output is older than the last two turns and than 300 protected tokens: pruned, still stored.
    expect(completed[0]!.output).toContain("line 39");
    expect(completed[0]!.timeCompacted).toBeDefined();
    expect(completed[1]!.output).toContain("line 39");
    expect(completed[1]!.timeCompacted).toBeUndefined();

    await t.client.prompt({ sessionId, parts: [text("t4")] });
    const toolResults = sent(t.fake.requests[5]).filter((line) => line.startsWith("tool:"));
    expect(toolResults).toHaveLength(2);
    expect(toolResults[0]).toBe(`tool:${PRUNED_OUTPUT}`);
    expect(toolResults[1]).toContain("line 39");
  });
});
