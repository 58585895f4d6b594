import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { connectError } from "../support/errors.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { lastSeq } from "../support/stored.js";
import { shape, text, type Draft } from "../support/prompt.js";

// Agent rules: agents named inside a prompt (mentions, subtasks) must exist and be subagents,
// with nothing written otherwise; and a session keeps its agent across prompts that name none.

let t: TestLedger;
beforeAll(async () => {
  t = await startTestLedger({
    agent: {
      secret: { mode: "subagent", hidden: true, description: "hidden helper" },
      both: { mode: "all", description: "primary and subagent" },
      reviewer: { mode: "primary", description: "reviews", permission: { edit: "deny", task: { "*": "allow", explore: "deny" } } },
    },
    command: {
      // No agent: the subtask runs under the default, build, which is primary-only (a configured
      // primary agent is refused when the config loads: test/config/config.test.ts).
      delegate: { template: "Count $ARGUMENTS", subtask: true },
      review: { template: "Review $ARGUMENTS", agent: "reviewer" },
      plain: { template: "Plain $ARGUMENTS" },
    },
  });
});
afterAll(() => t?.close());

const newSession = async (agent = "") => (await t.client.createSession({ directory: t.dir, agent })).session!.id;
const mention = (name: string): Draft => ({ kind: { case: "agent", value: { name } } });
const subtask = (agent: string): Draft => ({ kind: { case: "subtask", value: { prompt: "look around", description: "look", agent } } });

/** The session's stored events, in seq order. */
async function events(sessionId: string): Promise<SessionEvent[]> {
  const out: SessionEvent[] = [];
  const controller = new AbortController();
  const { session } = await t.client.getSession({ sessionId });
  const last = await lastSeq(t.ledger.deps.db, session!.id);
  if (last === 0) return out;
  for await (const res of t.client.watchSession({ sessionId, afterSeq: 0n }, { signal: controller.signal })) {
    out.push(res.event!);
    if (res.event!.seq === BigInt(last)) break;
  }
  controller.abort();
  return out;
}

/** Asserts a refusal wrote nothing: no message, the event log unchanged. */
async function nothingWritten(sessionId: string, seqBefore: number): Promise<void> {
  expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
  expect((await events(sessionId)).length).toBe(seqBefore);
}

const userAgent = (message: MessageWithParts | undefined) =>
  message?.message?.kind.case === "user" ? message.message.kind.value.agent : undefined;

describe("agents named inside a prompt must exist and be subagents", () => {
  it("an agent mention naming no agent → NOT_FOUND on parts[1].agent.name with the visible agents; nothing written", async () => {
    const sessionId = await newSession();
    const error = await connectError(t.client.prompt({ sessionId, noReply: true, parts: [text("go"), mention("nope")] }));
    expect(error.code).toBe(Code.NotFound);
    expect(error.rawMessage).toBe(
      'parts[1].agent.name: agent "nope" not found; available agents: build, plan, general, explore, both, reviewer',
    );
    const [info] = error.findDetails(ErrorInfoSchema);
    expect([info?.reason, info?.metadata.available]).toEqual(["AGENT_NOT_FOUND", "build,plan,general,explore,both,reviewer"]);
    expect(error.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => v.field)).toEqual(["parts[1].agent.name"]);
    await nothingWritten(sessionId, 1);
  });

  it("a subtask naming no agent → NOT_FOUND on parts[0].subtask.agent; nothing written", async () => {
    const sessionId = await newSession();
    const error = await connectError(t.client.prompt({ sessionId, noReply: true, parts: [subtask("ghost")] }));
    expect(error.code).toBe(Code.NotFound);
    expect(error.rawMessage).toMatch(
      /^parts\[0\]\.subtask\.agent: agent "ghost" not found; available agents: build, plan, general, explore, both, reviewer$/,
    );
    await nothingWritten(sessionId, 1);
  });

  it("a mention or subtask of a primary-only agent → INVALID_ARGUMENT saying it is not a subagent; nothing written", async () => {
    const sessionId = await newSession();
    const viaMention = await connectError(t.client.prompt({ sessionId, noReply: true, parts: [text("go"), mention("build")] }));
    expect([viaMention.code, viaMention.rawMessage]).toEqual([
      Code.InvalidArgument,
      'parts[1].agent.name: agent "build" is a primary agent, not a subagent; delegate to one of: general, explore, both',
    ]);
    const viaSubtask = await connectError(t.client.promptAsync({ sessionId, noReply: true, parts: [subtask("reviewer")] }));
    expect([viaSubtask.code, viaSubtask.rawMessage]).toEqual([
      Code.InvalidArgument,
      'parts[0].subtask.agent: agent "reviewer" is a primary agent, not a subagent; delegate to one of: general, explore, both',
    ]);
    await nothingWritten(sessionId, 1);
  });

  it("subagents, agents of mode all and hidden subagents may be named", async () => {
    const sessionId = await newSession();
    const res = await t.client.prompt({
      sessionId,
      noReply: true,
      parts: [text("go"), mention("explore"), mention("both"), subtask("secret")],
    });
    expect(res.message!.parts.map((p) => p.kind.case)).toEqual(["text", "agent", "text", "agent", "text", "subtask"]);
  });

  it("a mention's task hint is weighed on the subagent's name (OpenCode resolvePart): a task map denying explore marks explore only", async () => {
    const sessionId = await newSession("reviewer");
    const res = await t.client.prompt({ sessionId, noReply: true, parts: [text("go"), mention("explore"), mention("both")] });
    const hint = " Use the above message and context to generate a prompt and call the task tool with subagent: ";
    expect(res.message!.parts.map(shape)).toEqual([
      { kind: "text", synthetic: false, text: "go" },
      { kind: "agent", name: "explore" },
      { kind: "text", synthetic: true, text: `${hint}explore . Invoked by user; guaranteed to exist.` },
      { kind: "agent", name: "both" },
      { kind: "text", synthetic: true, text: `${hint}both` },
    ]);
  });

  it("a subtask command whose agent (here the default) is primary-only → INVALID_ARGUMENT on command.agent", async () => {
    const sessionId = await newSession();
    const error = await connectError(t.client.command({ sessionId, command: "delegate", arguments: "files", noReply: true }));
    expect([error.code, error.rawMessage]).toEqual([
      Code.InvalidArgument,
      'command.agent: agent "build" is a primary agent, not a subagent; delegate to one of: general, explore, both',
    ]);
    await nothingWritten(sessionId, 1);
  });
});

describe("the session keeps its agent", () => {
  it("a session created for plan answers prompts without agent with plan, and stays plan (no agent_switched)", async () => {
    const sessionId = await newSession("plan");
    const first = await t.client.prompt({ sessionId, noReply: true, parts: [text("one")] });
    const second = await t.client.promptAsync({ sessionId, noReply: true, parts: [text("two")] });
    const streamed: SessionEvent[] = [];
    for await (const res of t.client.promptStream({ sessionId, noReply: true, parts: [text("three")] })) streamed.push(res.event!);
    const commanded = await t.client.command({ sessionId, command: "plain", arguments: "four", noReply: true });
    expect([first.message, second.message, commanded.message].map(userAgent)).toEqual(["plan", "plan", "plan"]);
    const streamedUser = streamed.find((e) => e.kind.case === "messageUpdated")!;
    expect(streamedUser.kind.case === "messageUpdated" && userAgent({ message: streamedUser.kind.value.message } as MessageWithParts)).toBe(
      "plan",
    );
    expect((await t.client.getSession({ sessionId })).session!.agent).toBe("plan");
    expect((await events(sessionId)).filter((e) => e.kind.case === "agentSwitched")).toEqual([]);
  });

  it("a prompt naming an agent switches the session to it; later prompts without agent keep it", async () => {
    const sessionId = await newSession("plan");
    await t.client.prompt({ sessionId, noReply: true, agent: "build", parts: [text("switch")] });
    const after = await t.client.prompt({ sessionId, noReply: true, parts: [text("keep")] });
    expect(userAgent(after.message)).toBe("build");
    expect((await t.client.getSession({ sessionId })).session!.agent).toBe("build");
    const switched = (await events(sessionId))
      .filter((e) => e.kind.case === "agentSwitched")
      .map((e) => (e.kind.case === "agentSwitched" ? [e.kind.value.previous, e.kind.value.current] : []));
    expect(switched).toEqual([["plan", "build"]]);
  });

  it("a command with its own agent names it: the session takes it", async () => {
    const sessionId = await newSession("plan");
    const res = await t.client.command({ sessionId, command: "review", arguments: "x", noReply: true });
    expect(userAgent(res.message)).toBe("reviewer");
    const next = await t.client.prompt({ sessionId, noReply: true, parts: [text("next")] });
    expect(userAgent(next.message)).toBe("reviewer");
  });

  it("a session without an agent takes the configured default on its first prompt", async () => {
    const sessionId = await newSession();
    const res = await t.client.prompt({ sessionId, noReply: true, parts: [text("hi")] });
    expect(userAgent(res.message)).toBe("build");
    expect((await t.client.getSession({ sessionId })).session!.agent).toBe("build");
  });

  it("a session whose agent is no longer configured → NOT_FOUND on session.agent, never the default in its place", async () => {
    const sessionId = await newSession("reviewer");
    const agents = t.ledger.deps.config.agents;
    const reviewer = agents.get("reviewer")!;
    agents.delete("reviewer");
    try {
      const error = await connectError(t.client.prompt({ sessionId, noReply: true, parts: [text("hi")] }));
      expect([error.code, error.rawMessage]).toEqual([
        Code.NotFound,
        'session.agent: agent "reviewer" not found; available agents: build, plan, general, explore, both',
      ]);
      expect((await t.client.prompt({ sessionId, noReply: true, agent: "plan", parts: [text("with an agent")] })).message).toBeDefined();
    } finally {
      agents.set("reviewer", reviewer);
    }
  });
});
