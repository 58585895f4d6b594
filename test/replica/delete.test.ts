import { Code, ConnectError } from "@connectrpc/connect";
import type pg from "pg";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { codeOf as code } from "../support/errors.js";
import { collectEvents } from "../support/event-stream.js";
import type { FakeOpenAI } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { startReplicaPair, type Replica, type ReplicaPair } from "../support/replica.js";
import { sleep, waitFor } from "../support/wait.js";

// DeleteSession across real `ledger serve` processes sharing one Postgres: the delete's
// transaction sends a NOTIFY, so every replica ends its watchers (WatchSession, PromptStream)
// with `session_deleted` and stops its loop for that session (and for the child sessions the
// cascade removed). A replica whose listener lost a notice while reconnecting finds the deletion
// when it resyncs. Postgres only: PGlite is one process by construction.

const POSTGRES = process.env.LEDGER_TEST_DB === "postgres";
const START_MS = 60_000;
/** The one line a replica logs when a loop stops because its session was deleted elsewhere. */
const STOPPED = /"msg":"agent loop stopped: session deleted"/g;

let pair: ReplicaPair | undefined;
let dir: string | undefined;
let A: Replica;
let B: Replica;

const sql = (): pg.Client => pair!.sql;
const model = (): FakeOpenAI => pair!.model();

beforeAll(
  async () => {
    if (!POSTGRES) return;
    // Info level: the tests count the loop's "stopped" line and look for anything worse.
    // No periodic catch-up check: (v) is about the resync after a reconnect, and the check (1 s by
    // default) finds a deleted row too, so it could end B's watcher before the listeners drop.
    // Every other case here goes through the deletion's NOTIFY.
    pair = await startReplicaPair({
      prefix: "ledger-delete-",
      timeoutMs: START_MS,
      env: { LEDGER_LOG_LEVEL: "info" },
      config: { events: { catch_up_ms: 0 } },
    });
    ({ dir, A, B } = pair);
  },
  2 * START_MS + 30_000,
);

beforeEach(async () => {
  if (!POSTGRES) return;
  await pair!.freshModel();
});

afterAll(async () => {
  // Both replicas must still be up (nothing crashed) and exit cleanly.
  const exits = POSTGRES ? await Promise.all([A, B].map(async (r) => ({ name: r.name, ...(await r.stop(20_000)) }))) : [];
  await pair?.close();
  for (const e of exits) expect({ name: e.name, code: e.code, forced: e.forced }).toEqual({ name: e.name, code: 0, forced: false });
}, 60_000);

// ---------------------------------------------------------------------------------------------
// helpers

function watch(r: Replica, sessionId: string, afterSeq = 0n) {
  return collectEvents((signal) => r.grpc.watchSession({ sessionId, afterSeq }, { signal }));
}

function promptStream(r: Replica, sessionId: string, prompt: string) {
  return collectEvents((signal) => r.grpc.promptStream({ sessionId, parts: [text(prompt)] }, { signal }));
}

const deletedId = (e: SessionEvent | undefined) =>
  e?.kind.case === "sessionDeleted" ? e.kind.value.session?.id : `(last event: ${e?.kind.case})`;

async function sessionRows(...ids: string[]): Promise<string[]> {
  const { rows } = await sql().query<{ id: string }>("select id from session where id = any($1)", [ids]);
  return rows.map((r) => r.id);
}

/** True when nobody holds the session's loop lock (it is taken and given back at once). */
async function lockFree(sessionId: string): Promise<boolean> {
  const { rows } = await sql().query<{ locked: boolean }>("select pg_try_advisory_lock(hashtextextended($1, 0)) as locked", [sessionId]);
  if (rows[0]?.locked) await sql().query("select pg_advisory_unlock(hashtextextended($1, 0))", [sessionId]);
  return rows[0]?.locked === true;
}

/** Lines of `r`'s stderr at warn/error level, or mentioning an unhandled error, since `from`. */
function trouble(r: Replica, from: number): string[] {
  return r
    .stderr()
    .slice(from)
    .split("\n")
    .filter((line) => /"level":"(error|warn)"|unhandled|uncaught|failed/i.test(line));
}

const stoppedLines = (r: Replica, from: number) => r.stderr().slice(from).match(STOPPED)?.length ?? 0;

async function statusesOn(r: Replica): Promise<string[]> {
  return Object.keys((await r.connect.getStatus({})).statuses);
}

/** A session on `on` whose loop (on `on`) hangs in a model stream after some text. */
async function hangingLoop(on: Replica) {
  const sessionId = (await on.connect.createSession({ directory: dir })).session!.id;
  const before = model().requests.length;
  model().push({ kind: "stream", chunks: [{ text: "working " }, { text: "on it" }, { hang: true }], delayMs: 20 });
  const prompt = promptStream(on, sessionId, "take forever");
  await waitFor("the model request", () => model().requests.length > before);
  await waitFor("streamed text", () => prompt.events.some((e) => e.kind.case === "partDelta"));
  return { sessionId, request: model().requests[before]!, prompt };
}

// ---------------------------------------------------------------------------------------------

describe.skipIf(!POSTGRES)("DeleteSession with replicas sharing one Postgres", () => {
  it("(i) on the replica running the loop: the hanging loop is aborted, the session is gone, GetStatus clears, nothing is logged as an error", async () => {
    const fromB = B.stderr().length;
    const { sessionId, request, prompt } = await hangingLoop(B);
    const watcher = watch(B, sessionId);
    await waitFor("the busy status", async () => (await statusesOn(B)).includes(sessionId));
    // The watch is open (its replay has begun) before the deletion: otherwise, on a loaded
    // machine, it may reach the server after it and rightly get NOT_FOUND.
    await waitFor("the watch's replay", () => watcher.events.length > 0);

    await B.connect.deleteSession({ sessionId });

    await waitFor("the model request to be aborted", () => request.end === "aborted", 5_000);
    expect(await watcher.settle(), "WatchSession ends by itself").toBe(true);
    expect(watcher.failure()).toBeUndefined();
    expect(deletedId(watcher.events.at(-1))).toBe(sessionId);
    expect(await prompt.settle(), "PromptStream ends by itself").toBe(true);
    expect(prompt.failure()).toBeUndefined();

    expect(await code(A.connect.getSession({ sessionId }))).toBe(Code.NotFound);
    expect(await sessionRows(sessionId)).toEqual([]);
    expect(await statusesOn(A)).not.toContain(sessionId);
    expect(await statusesOn(B)).not.toContain(sessionId);
    expect(await lockFree(sessionId)).toBe(true);
    await sleep(300);
    expect(trouble(B, fromB)).toEqual([]);
    expect(B.hasExited()).toBe(false);
  }, 60_000);

  it("(ii) WatchSession on B ends with session_deleted when A deletes the session", async () => {
    const sessionId = (await A.connect.createSession({ directory: dir, title: "to be deleted" })).session!.id;
    await A.connect.prompt({ sessionId, noReply: true, parts: [text("some context")] });
    const watcher = watch(B, sessionId);
    // The whole stored log replayed (noReply prompt: every event is stored), so B follows live.
    const { rows } = await sql().query<{ last_seq: string }>("select last_seq from session where id = $1", [sessionId]);
    await waitFor("B's replay", () => watcher.events.at(-1)?.seq === BigInt(rows[0]!.last_seq));
    const replayed = watcher.events.length;

    await A.connect.deleteSession({ sessionId });

    expect(await watcher.settle(), "B's WatchSession ends by itself").toBe(true);
    expect(watcher.failure()).toBeUndefined();
    expect(watcher.events.length).toBe(replayed + 1);
    const last = watcher.events.at(-1)!;
    expect(deletedId(last)).toBe(sessionId);
    expect(last.kind.case === "sessionDeleted" ? last.kind.value.session?.title : "").toBe("to be deleted");
    expect(last.seq).toBe(watcher.events.at(-2)!.seq + 1n);
    // A watch opened afterwards: NOT_FOUND.
    const late = watch(B, sessionId);
    await late.settle(5_000);
    expect(ConnectError.from(late.failure()).code).toBe(Code.NotFound);
  }, 60_000);

  it("(iii) a loop hanging on B stops when A deletes the session: request aborted, B's streams end, status clears, one info line", async () => {
    const fromA = A.stderr().length;
    const fromB = B.stderr().length;
    const { sessionId, request, prompt } = await hangingLoop(B);
    const watcher = watch(B, sessionId);
    // A second prompt, unary, joins B's running loop; it gets NOT_FOUND once the session goes.
    const unary = code(B.connect.prompt({ sessionId, parts: [text("and this one?")] }));
    await waitFor(
      "the second prompt stored",
      async () => (await sql().query("select 1 from message where session_id = $1 and role = 'user'", [sessionId])).rowCount === 2,
    );
    await waitFor("the busy status", async () => (await statusesOn(A)).includes(sessionId));
    await waitFor("the watch's replay", () => watcher.events.length > 0);

    await A.connect.deleteSession({ sessionId });

    await waitFor("the model request to be aborted", () => request.end === "aborted", 5_000);
    expect(await watcher.settle(), "B's WatchSession ends by itself").toBe(true);
    expect(deletedId(watcher.events.at(-1))).toBe(sessionId);
    expect(await prompt.settle(), "B's PromptStream ends by itself").toBe(true);
    expect(prompt.failure()).toBeUndefined();
    expect(deletedId(prompt.events.at(-1))).toBe(sessionId);
    expect(await unary).toBe(Code.NotFound);

    await waitFor("B's lock released", () => lockFree(sessionId), 5_000);
    expect(await statusesOn(B)).not.toContain(sessionId);
    expect(await statusesOn(A)).not.toContain(sessionId);
    expect(await sessionRows(sessionId)).toEqual([]);
    await sleep(300);
    expect(stoppedLines(B, fromB)).toBe(1);
    expect(trouble(B, fromB)).toEqual([]);
    expect(trouble(A, fromA)).toEqual([]);
    expect(B.hasExited()).toBe(false);
    // B still answers prompts.
    const next = (await B.connect.createSession({ directory: dir })).session!.id;
    model().push({ kind: "stream", chunks: [{ text: "fine" }] });
    const answer = (await B.connect.prompt({ sessionId: next, parts: [text("still there?")] })).message!;
    expect(answer.parts.some((p) => p.kind.case === "text" && p.kind.value.text === "fine")).toBe(true);
  }, 60_000);

  it("(iv) deleting a parent on A ends the child session's watchers on B and stops the subagent loop running there", async () => {
    const fromB = B.stderr().length;
    const parentId = (await B.connect.createSession({ directory: dir })).session!.id;
    const before = model().requests.length;
    const taskArgs = JSON.stringify({ description: "dig", prompt: "look around", subagent_type: "general" });
    model().push(
      {
        kind: "stream",
        chunks: [{ text: "Delegating" }, { toolCall: { id: "call_dig", name: "task", arguments: taskArgs } }],
        delayMs: 10,
      },
      { kind: "stream", chunks: [{ text: "child at work" }, { hang: true }], delayMs: 10 },
    );
    await B.connect.promptAsync({ sessionId: parentId, parts: [text("delegate")] });
    await waitFor("the child's model request", () => model().requests.length >= before + 2);
    const childId = await waitFor("the child session", async () => (await A.connect.listChildren({ sessionId: parentId })).sessions[0]?.id);
    const childWatcher = watch(B, childId);
    const parentWatcher = watch(B, parentId);
    await waitFor("both replays", () => childWatcher.events.length > 0 && parentWatcher.events.length > 0);

    await A.connect.deleteSession({ sessionId: parentId });

    await waitFor("the child's model request to be aborted", () => model().requests[before + 1]!.end === "aborted", 5_000);
    expect(await childWatcher.settle(), "the child's watcher ends").toBe(true);
    expect(await parentWatcher.settle(), "the parent's watcher ends").toBe(true);
    expect(deletedId(childWatcher.events.at(-1))).toBe(childId);
    expect(deletedId(parentWatcher.events.at(-1))).toBe(parentId);
    expect(await sessionRows(parentId, childId)).toEqual([]);
    await waitFor("both locks released", async () => (await lockFree(parentId)) && (await lockFree(childId)), 5_000);
    const statuses = await statusesOn(B);
    expect(statuses).not.toContain(parentId);
    expect(statuses).not.toContain(childId);
    await sleep(300);
    expect(stoppedLines(B, fromB)).toBe(1);
    expect(trouble(B, fromB)).toEqual([]);
  }, 60_000);

  it("(v) a deletion B's listener missed while reconnecting: B's resync ends its watchers and stops its loop", async () => {
    const fromB = B.stderr().length;
    const { sessionId, request } = await hangingLoop(B);
    const watcher = watch(B, sessionId);
    await waitFor("B's replay", () => watcher.events.length > 0);
    await sleep(100);

    // Deleted behind the replicas' backs (no NOTIFY: as if it was sent while B was not listening),
    // then the listeners' connections drop; they reconnect and resync from the table.
    await sql().query("delete from session where id = $1", [sessionId]);
    await sleep(200);
    expect(watcher.ended()).toBe(false);
    const { rows } = await sql().query<{ n: string }>(
      "select count(pg_terminate_backend(pid))::text as n from pg_stat_activity where datname = current_database() and application_name = 'ledger-relay'",
    );
    expect(Number(rows[0]!.n)).toBe(2);

    expect(await watcher.settle(), "B's WatchSession ends after the resync").toBe(true);
    expect(watcher.failure()).toBeUndefined();
    expect(deletedId(watcher.events.at(-1))).toBe(sessionId);
    await waitFor("the model request to be aborted", () => request.end === "aborted", 5_000);
    await waitFor("B's lock released", () => lockFree(sessionId), 5_000);
    await sleep(300);
    expect(stoppedLines(B, fromB)).toBe(1);
    expect(trouble(B, fromB)).toEqual([]);
    // Both listeners are back: a deletion on A reaches B's watcher again.
    const other = (await A.connect.createSession({ directory: dir })).session!.id;
    const again = watch(B, other);
    await waitFor("the replay", () => again.events.length > 0);
    await waitFor("both listeners back", async () => {
      const { rows: back } = await sql().query<{ n: string }>(
        "select count(*)::text as n from pg_stat_activity where datname = current_database() and application_name = 'ledger-relay'",
      );
      return Number(back[0]!.n) === 2;
    });
    await A.connect.deleteSession({ sessionId: other });
    expect(await again.settle()).toBe(true);
    expect(deletedId(again.events.at(-1))).toBe(other);
  }, 60_000);
});
