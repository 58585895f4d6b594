import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { MessageWithPartsSchema, type MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { CONTINUE_TEXT, estimateTokens, isOverflow, modelHistory, sinceCompaction, toPrune } from "../../src/agent/compacted-history.js";
import { conversationOrder, nextWork } from "../../src/agent/conversation.js";

// The pure rules of compaction (src/agent/compacted-history.ts) and how compactions sit in the
// conversation (conversationOrder, nextWork), on hand-built stored messages.

type PartKind = NonNullable<MessageInitShape<typeof PartSchema>["kind"]>;
const SESSION = "ses_test";

function user(id: string, kinds: PartKind[]): MessageWithParts {
  return create(MessageWithPartsSchema, {
    message: { kind: { case: "user", value: { id, sessionId: SESSION, agent: "build" } } },
    parts: kinds.map((kind, i) => ({ id: `prt_${id}_${i}`, sessionId: SESSION, messageId: id, kind })),
  });
}

function assistant(id: string, parentId: string, kinds: PartKind[], extra: { finish?: string; summary?: boolean; error?: boolean } = {}) {
  return create(MessageWithPartsSchema, {
    message: {
      kind: {
        case: "assistant",
        value: {
          id,
          sessionId: SESSION,
          parentId,
          finish: extra.finish ?? "stop",
          summary: extra.summary ?? false,
          time: { created: timestampNow(), completed: timestampNow() },
          error: extra.error ? { message: "boom", kind: { case: "unknown", value: {} } } : undefined,
        },
      },
    },
    parts: kinds.map((kind, i) => ({ id: `prt_${id}_${i}`, sessionId: SESSION, messageId: id, kind })),
  });
}

const say = (text: string): PartKind => ({ case: "text", value: { text } });
const compaction: PartKind = { case: "compaction", value: { auto: true, overflow: true } };
const output = (callId: string, chars: number, compacted = false): PartKind => ({
  case: "tool",
  value: {
    callId,
    tool: "read",
    state: { status: { case: "completed", value: { output: "x".repeat(chars), timeCompacted: compacted ? timestampNow() : undefined } } },
  },
});
const ids = (history: MessageWithParts[]) => history.map((m) => m.message!.kind.value!.id);

describe("isOverflow", () => {
  const usage = { input: 800, output: 50, reasoning: 0, cacheRead: 100, cacheWrite: 0 };
  it("counts input and cache tokens plus the output reserve against the context limit", () => {
    expect(isOverflow(usage, { context: 1000, output: 100 })).toBe(false); // 900 + 100 = 1000: not past it
    expect(isOverflow({ ...usage, cacheWrite: 1 }, { context: 1000, output: 100 })).toBe(true);
    expect(isOverflow(usage, { context: 950 })).toBe(false);
    expect(isOverflow(usage, { context: 899 })).toBe(true);
  });
  it("reserves at most 32,000 output tokens (OpenCode's output cap, which each step asks for at most)", () => {
    const big = { input: 160_000, output: 0, reasoning: 0, cacheRead: 0, cacheWrite: 0 };
    expect(isOverflow(big, { context: 200_000, output: 64_000 })).toBe(false); // 160,000 + 32,000 ≤ 200,000
    expect(isOverflow({ ...big, input: 168_001 }, { context: 200_000, output: 64_000 })).toBe(true);
  });
  it("never for a model without a context limit, or a step without usage", () => {
    expect(isOverflow(usage, undefined)).toBe(false);
    expect(isOverflow(usage, { output: 100 })).toBe(false);
    expect(isOverflow(usage, { context: 0, output: 100 })).toBe(false);
    expect(isOverflow(undefined, { context: 10 })).toBe(false);
  });
});

describe("compactions in the conversation", () => {
  it("sinceCompaction keeps the latest finished compaction and what follows; a failed summary is not used", () => {
    const history = [
      user("msg_1", [say("q1")]),
      assistant("msg_2", "msg_1", [say("a1")]),
      user("msg_3", [compaction]),
      assistant("msg_4", "msg_3", [say("S1")], { summary: true }),
      user("msg_5", [say("q2")]),
      assistant("msg_6", "msg_5", [say("a2")]),
      user("msg_7", [compaction]),
      assistant("msg_8", "msg_7", [], { summary: true, error: true }),
    ];
    expect(ids(sinceCompaction(history))).toEqual(["msg_3", "msg_4", "msg_5", "msg_6", "msg_7", "msg_8"]);
    expect(sinceCompaction(history.slice(0, 2))).toEqual(history.slice(0, 2));
  });

  it("the model is not sent a compaction whose summary failed: neither its question nor the failed summary", () => {
    const history = [
      user("msg_1", [say("q1")]),
      assistant("msg_2", "msg_1", [say("a1")]),
      user("msg_3", [compaction]),
      assistant("msg_4", "msg_3", [], { summary: true, error: true }),
      user("msg_5", [say("q2")]),
    ];
    expect(ids(modelHistory(history, { continuing: false }))).toEqual(["msg_1", "msg_2", "msg_5"]);
    // After a finished compaction, a later failed one is left out the same way.
    const later = [
      ...history.slice(0, 2),
      user("msg_6", [compaction]),
      assistant("msg_7", "msg_6", [say("S1")], { summary: true }),
      ...history.slice(2),
    ];
    expect(ids(modelHistory(later, { continuing: false }))).toEqual(["msg_6", "msg_7", "msg_5"]);
    // A compaction whose summary is still being written is kept (the summary step itself).
    const running = assistant("msg_4", "msg_3", [], { summary: true });
    const kind = running.message!.kind;
    if (kind.case === "assistant") kind.value.time!.completed = undefined;
    expect(ids(modelHistory([...history.slice(0, 3), running], { continuing: false }))).toEqual(["msg_1", "msg_2", "msg_3", "msg_4"]);
  });

  it("a compaction made half-way through a turn stays among its steps, and the turn goes on with the continuation text", () => {
    // Stored order: the prompt, its first step, a prompt queued meanwhile, the compaction, its summary, the next step.
    const stored = [
      user("msg_1", [say("q1")]),
      assistant("msg_2", "msg_1", [say("step 1")], { finish: "tool-calls" }),
      user("msg_3", [say("queued")]),
      user("msg_4", [compaction]),
      assistant("msg_5", "msg_4", [say("S")], { summary: true }),
      assistant("msg_6", "msg_1", [say("step 2")], { finish: "tool-calls" }),
    ];
    expect(ids(conversationOrder(stored))).toEqual(["msg_1", "msg_2", "msg_4", "msg_5", "msg_6", "msg_3"]);
    const work = nextWork(stored)!;
    expect(work.user.id).toBe("msg_1");
    expect(work.steps).toBe(2);
    const sent = modelHistory(work.conversation, { continuing: true });
    expect(sent.map((m) => m.parts.map((p) => (p.kind.case === "text" ? p.kind.value.text : p.kind.case)).join())).toEqual([
      "compaction",
      "S",
      CONTINUE_TEXT,
      "step 2",
    ]);
    // Right after the compaction the history ends with the summary: continuing adds the text, a summary request does not.
    expect(modelHistory(work.conversation.slice(0, 4), { continuing: true }).at(-1)!.parts[0]!.kind.value).toMatchObject({
      text: CONTINUE_TEXT,
    });
    expect(modelHistory(work.conversation.slice(0, 4), { continuing: false })).toHaveLength(2);
  });

  it("a compaction is never answered as a prompt, and a prompt after it is sent the summary without the continuation text", () => {
    const stored = [
      user("msg_1", [say("q1")]),
      assistant("msg_2", "msg_1", [say("a1")]),
      user("msg_3", [compaction]),
      user("msg_4", [say("q2")]),
    ];
    expect(nextWork(stored)?.user.id).toBe("msg_4");
    stored.splice(3, 0, assistant("msg_5", "msg_3", [say("S")], { summary: true }));
    const work = nextWork(stored)!;
    expect(work.user.id).toBe("msg_4");
    expect(ids(modelHistory(work.conversation, { continuing: true }))).toEqual(["msg_3", "msg_5", "msg_4"]);
  });
});

describe("toPrune", () => {
  const limits = { protectTokens: 300, minimumTokens: 100 };
  // Each output of 800 characters is 200 estimated tokens.
  const turn = (n: number, callId?: string) => [
    user(`msg_${n}a`, [say(`q${n}`)]),
    assistant(`msg_${n}b`, `msg_${n}a`, callId ? [output(callId, 800)] : [say("ok")]),
  ];

  it("skips the last two turns, keeps the newest protected tokens and clears the older outputs once they pass the minimum", () => {
    expect(estimateTokens("x".repeat(800))).toBe(200);
    const history = [...turn(1, "c1"), ...turn(2, "c2"), ...turn(3, "c3"), ...turn(4, "c4"), ...turn(5, "c5")];
    // c5 and c4 are in the last two turns; c3 (200 tokens) is protected; c2 takes the total past 300: c2 and c1 (400 > 100) go.
    expect(toPrune(history, limits).map((p) => p.id)).toEqual(["prt_msg_2b_0", "prt_msg_1b_0"]);
  });

  it("prunes nothing when the outputs past the protected ones do not pass the minimum", () => {
    const history = [...turn(1, "c1"), ...turn(2, "c2"), ...turn(3), ...turn(4)];
    expect(toPrune(history, { protectTokens: 300, minimumTokens: 250 })).toEqual([]);
  });

  it("stops at an output already pruned and at a summary", () => {
    // c9 is older than c0, which was pruned before: the walk stops at c0.
    const pruned = [...turn(9, "c9"), user("msg_0a", [say("q0")]), assistant("msg_0b", "msg_0a", [output("c0", 800, true)])];
    const history = [...pruned, ...turn(1, "c1"), ...turn(2, "c2"), ...turn(3, "c3"), ...turn(4), ...turn(5)];
    expect(toPrune(history, limits).map((p) => p.id)).toEqual(["prt_msg_2b_0", "prt_msg_1b_0"]);
    const summarized = [
      ...turn(1, "c1"),
      user("msg_s", [compaction]),
      assistant("msg_t", "msg_s", [say("S")], { summary: true }),
      ...turn(2, "c2"),
      ...turn(3, "c3"),
      ...turn(4),
      ...turn(5),
    ];
    expect(toPrune(summarized, limits).map((p) => p.id)).toEqual(["prt_msg_2b_0"]);
  });
});
