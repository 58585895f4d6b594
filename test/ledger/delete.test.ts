import { Code } from "@connectrpc/connect";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { followSession } from "../../src/events/feed.js";
import { newId } from "../../src/ids.js";
import { codeOf as code } from "../support/errors.js";
import { collectEvents } from "../support/event-stream.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { sleep, waitFor } from "../support/wait.js";
import { pgrep } from "../support/pgrep.js";

// DeleteSession while the session's agent loop runs in this process: the loop is aborted before
// the row goes (its model request is cancelled, it writes nothing after), watchers end with
// `session_deleted`, GetStatus forgets the session, and nothing is logged as an error. Child
// sessions (cascade) get the same treatment. Runs on Postgres and PGlite (vitest projects).

let t: FakeModelLedger;

beforeAll(async () => {
  t = await startFakeModelLedger({ retry: { attempts: 1, initial_ms: 10, max_ms: 20 } }, { provider: "main" });
});

afterAll(async () => {
  await t?.close();
});

/** Error-level log lines and unhandled rejections seen during one test. */
let errors: string[] = [];
const onUnhandled = (reason: unknown) => errors.push(`unhandled rejection: ${String(reason)}`);
beforeEach(() => {
  errors = [];
  process.on("unhandledRejection", onUnhandled);
  const write = process.stderr.write.bind(process.stderr);
  vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const line = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
    if (/"level":"error"|failed|unhandled/i.test(line)) errors.push(line);
    return (write as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
  });
});
afterEach(() => {
  process.off("unhandledRejection", onUnhandled);
  vi.restoreAllMocks();
});

const rowsOf = async (table: "session" | "message" | "part" | "session_event", sessionId: string) =>
  table === "session"
    ? await t.ledger.deps.db.selectFrom("session").select("id").where("id", "=", sessionId).execute()
    : await t.ledger.deps.db.selectFrom(table).select("session_id").where("session_id", "=", sessionId).execute();

describe("DeleteSession while the loop runs in this process", () => {
  it("aborts the hanging loop, ends watchers with session_deleted, and leaves nothing running or listed", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const before = t.fake.requests.length;
    t.fake.push({ kind: "stream", chunks: [{ text: "thinking about it" }, { hang: true }] });
    const watcher = collectEvents((signal) => t.client.watchSession({ sessionId, afterSeq: 0n }, { signal }));
    const prompted = collectEvents((signal) => t.client.promptStream({ sessionId, parts: [text("never answered")] }, { signal }));
    await waitFor("the model request", () => t.fake.requests.length > before);
    await waitFor("streamed text", () => prompted.events.some((e) => e.kind.case === "partDelta"));
    expect(t.ledger.deps.replier!.isRunning(sessionId)).toBe(true);
    expect(Object.keys((await t.client.getStatus({})).statuses)).toContain(sessionId);

    await t.client.deleteSession({ sessionId });

    // The loop hears session_deleted after the commit, stops, and its model request is cancelled.
    await waitFor("the loop to stop", () => !t.ledger.deps.replier!.isRunning(sessionId));
    await waitFor("the model request to be aborted", () => t.fake.requests[before]!.end === "aborted");
    await Promise.race([Promise.all([watcher.done, prompted.done]), sleep(5_000)]);
    expect({ watcher: watcher.ended(), prompt: prompted.ended() }).toEqual({ watcher: true, prompt: true });
    expect(watcher.failure()).toBeUndefined();
    expect(prompted.failure()).toBeUndefined();
    const last = watcher.events.at(-1)!;
    expect(last.kind.case).toBe("sessionDeleted");
    // The prompt's own stream ends at session_deleted too, not at an aborted answer and idle.
    expect(prompted.events.at(-1)!.kind.case).toBe("sessionDeleted");
    expect(prompted.events.some((e) => e.kind.case === "sessionStatus" && e.kind.value.status.case === "idle")).toBe(false);
    expect(last.kind.case === "sessionDeleted" ? last.kind.value.session?.id : "").toBe(sessionId);
    // seq is one past the last stored event the watcher saw.
    expect(last.seq).toBe(watcher.events.at(-2)!.seq + 1n);

    expect(await code(t.client.getSession({ sessionId }))).toBe(Code.NotFound);
    for (const table of ["session", "message", "part", "session_event"] as const) expect(await rowsOf(table, sessionId), table).toEqual([]);
    expect(Object.keys((await t.client.getStatus({})).statuses)).not.toContain(sessionId);
    await sleep(200); // anything the loop might still try would show up by now
    expect(await rowsOf("session", sessionId)).toEqual([]);
    expect(errors).toEqual([]);
  });

  it("a unary Prompt whose session is deleted meanwhile answers NOT_FOUND", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const before = t.fake.requests.length;
    t.fake.push({ kind: "stream", chunks: [{ text: "working" }, { hang: true }] });
    const answer = code(t.client.prompt({ sessionId, parts: [text("never answered")] }));
    await waitFor("the model request", () => t.fake.requests.length > before);
    await t.client.deleteSession({ sessionId });
    expect(await answer).toBe(Code.NotFound);
    await waitFor("the loop to stop", () => !t.ledger.deps.replier!.isRunning(sessionId));
    await sleep(200);
    expect(errors).toEqual([]);
  });

  it("a running Shell is aborted like a loop: its command is killed and the call answers NOT_FOUND at once (a trial, 2026-12-04: it ran to its end)", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const marker = `ledger-delete-shell-${Date.now()}`;
    const started = Date.now();
    const shell = code(t.client.shell({ sessionId, agent: "build", command: `sleep 30 # ${marker}` }));
    await waitFor("the command to run", async () => (await pgrep(marker)).length > 0);
    await t.client.deleteSession({ sessionId });
    expect(await shell).toBe(Code.NotFound);
    expect(Date.now() - started).toBeLessThan(10_000);
    await waitFor("the command's processes to be gone", async () => (await pgrep(marker)).length === 0, 5000);
    await waitFor("the run to stop", () => !t.ledger.deps.replier!.isRunning(sessionId));
    for (const table of ["session", "message", "part", "session_event"] as const) expect(await rowsOf(table, sessionId), table).toEqual([]);
    await sleep(200);
    expect(errors).toEqual([]);
  });

  it("deleting a parent stops its subagent's loop and ends the child's watchers too", async () => {
    const parentId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const before = t.fake.requests.length;
    const taskArgs = JSON.stringify({ description: "dig", prompt: "look around", subagent_type: "general" });
    t.fake.push(
      { kind: "stream", chunks: [{ text: "Delegating" }, { toolCall: { id: "call_dig", name: "task", arguments: taskArgs } }] },
      { kind: "stream", chunks: [{ text: "child at work" }, { hang: true }] },
    );
    await t.client.promptAsync({ sessionId: parentId, parts: [text("delegate")] });
    await waitFor("the child's model request", () => t.fake.requests.length >= before + 2);
    const children = (await t.client.listChildren({ sessionId: parentId })).sessions;
    expect(children).toHaveLength(1);
    const childId = children[0]!.id;
    const childWatcher = collectEvents((signal) => t.client.watchSession({ sessionId: childId, afterSeq: 0n }, { signal }));
    const parentWatcher = collectEvents((signal) => t.client.watchSession({ sessionId: parentId, afterSeq: 0n }, { signal }));
    await waitFor("both watchers replayed", () => childWatcher.events.length > 0 && parentWatcher.events.length > 0);

    await t.client.deleteSession({ sessionId: parentId });

    await waitFor("the child's model request to be aborted", () => t.fake.requests[before + 1]!.end === "aborted");
    await Promise.race([Promise.all([childWatcher.done, parentWatcher.done]), sleep(5_000)]);
    for (const [name, w, id] of [
      ["parent", parentWatcher, parentId],
      ["child", childWatcher, childId],
    ] as const) {
      expect(w.ended(), name).toBe(true);
      expect(w.failure(), name).toBeUndefined();
      const last = w.events.at(-1)!;
      expect(last.kind.case === "sessionDeleted" ? last.kind.value.session?.id : last.kind.case, name).toBe(id);
    }
    expect(await rowsOf("session", childId)).toEqual([]);
    await waitFor("the parent's loop to stop", () => !t.ledger.deps.replier!.isRunning(parentId));
    const statuses = Object.keys((await t.client.getStatus({})).statuses);
    expect(statuses).not.toContain(parentId);
    expect(statuses).not.toContain(childId);
    await sleep(200);
    expect(errors).toEqual([]);
  });

  it("deleting only a child ends its watchers and its subagent run; the parent's task says so and the parent answers", async () => {
    const parentId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const before = t.fake.requests.length;
    const taskArgs = JSON.stringify({ description: "dig", prompt: "look around", subagent_type: "general" });
    t.fake.push(
      { kind: "stream", chunks: [{ toolCall: { id: "call_dig2", name: "task", arguments: taskArgs } }] },
      { kind: "stream", chunks: [{ text: "child at work" }, { hang: true }] },
      { kind: "stream", chunks: [{ text: "The child went away." }] },
    );
    const answer = t.client.prompt({ sessionId: parentId, parts: [text("delegate")] });
    await waitFor("the child's model request", () => t.fake.requests.length >= before + 2);
    const childId = (await t.client.listChildren({ sessionId: parentId })).sessions[0]!.id;
    const childWatcher = collectEvents((signal) => t.client.watchSession({ sessionId: childId, afterSeq: 0n }, { signal }));
    await waitFor("the child watcher's replay", () => childWatcher.events.length > 0);

    await t.client.deleteSession({ sessionId: childId });

    await waitFor("the child's model request to be aborted", () => t.fake.requests[before + 1]!.end === "aborted");
    await Promise.race([childWatcher.done, sleep(5_000)]);
    expect(childWatcher.ended()).toBe(true);
    expect(childWatcher.events.at(-1)?.kind.case).toBe("sessionDeleted");
    // The parent goes on: its task call ends (not hangs) and the model answers the next step.
    const reply = (await answer).message!;
    expect(reply.message?.kind.case === "assistant" ? reply.message.kind.value.error : "not assistant").toBeUndefined();
    const parts = (await t.client.listMessages({ sessionId: parentId })).messages.flatMap((m) => m.parts);
    const task = parts.find((p) => p.kind.case === "tool");
    const state = task?.kind.case === "tool" ? task.kind.value.state?.status : undefined;
    expect(state?.case).toBe("completed");
    expect(state?.case === "completed" ? state.value.output : "").toBe(`The subagent's session ${childId} was deleted before it answered.`);
    expect(errors).toEqual([]);
  });

  it("a feed opened on a session that is already gone ends with session_deleted at once", async () => {
    const events: SessionEvent[] = [];
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 3_000);
    for await (const event of followSession(t.ledger.deps, newId("ses"), 0n, controller.signal)) events.push(event);
    clearTimeout(timer);
    expect(controller.signal.aborted).toBe(false);
    expect(events.map((e) => e.kind.case)).toEqual(["sessionDeleted"]);
  });
});
