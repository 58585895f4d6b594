import { fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import pg from "pg";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { MessageWithPartsSchema, type MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { PartSchema, type Part } from "../../gen/ledger/v1/part_pb.js";
import { newId } from "../../src/ids.js";
import { collectEvents } from "../support/event-stream.js";
import type { FakeOpenAI, ReplyChunk } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { assistantOf } from "../support/stored.js";
import { startReplica, startReplicaPair, type Replica, type ReplicaPair } from "../support/replica.js";
import { sleep, waitFor } from "../support/wait.js";

// Several real `ledger serve` processes sharing one Postgres database: events relayed between
// them (LISTEN/NOTIFY hints and batched deltas), one agent loop per session across processes
// (advisory locks), idempotent prompts, and crash recovery after `kill -9`.
// Postgres only: PGlite is one process by construction.

const POSTGRES = process.env.LEDGER_TEST_DB === "postgres";
const START_MS = 60_000;

let pair: ReplicaPair | undefined;
let dir: string | undefined;
let A: Replica;
let B: Replica;
const extra: Replica[] = [];

const sql = (): pg.Client => pair!.sql;
const model = (): FakeOpenAI => pair!.model();
async function replica(name: string): Promise<Replica> {
  const r = await startReplica({ name, cwd: dir!, databaseUrl: pair!.database.url!, timeoutMs: START_MS });
  extra.push(r);
  return r;
}

beforeAll(
  async () => {
    if (!POSTGRES) return;
    // A starts first (it runs the migrations), then B.
    pair = await startReplicaPair({ prefix: "ledger-replicas-", timeoutMs: START_MS });
    ({ dir, A, B } = pair);
  },
  2 * START_MS + 30_000,
);

// Every test scripts its own fake model: replies a failed test left queued (or a reply still
// hanging) go away with the old server instead of answering the next test's requests.
beforeEach(async () => {
  if (!POSTGRES) return;
  await pair!.freshModel();
});

afterAll(async () => {
  await pair?.close();
}, 60_000);

// ---------------------------------------------------------------------------------------------
// helpers

/** One comparable line per event: seq and kind; deltas with part, field, offset and text. */
function describeEvent(e: SessionEvent): string {
  switch (e.kind.case) {
    case "partDelta": {
      const d = e.kind.value;
      return `${e.seq} partDelta ${d.partId} ${d.field}@${d.offset} ${JSON.stringify(d.delta)}`;
    }
    case "partUpdated": {
      const p = e.kind.value.part;
      return `${e.seq} partUpdated ${p?.id} ${p?.kind.case}${p?.kind.case === "text" ? ` ${JSON.stringify(p.kind.value.text)}` : ""}`;
    }
    case "messageUpdated": {
      const m = e.kind.value.message?.kind;
      return `${e.seq} messageUpdated ${m?.case} ${m?.value?.id}${m?.case === "assistant" ? (m.value.time?.completed ? " completed" : " open") : ""}`;
    }
    case "sessionStatus":
      return `${e.seq} sessionStatus ${e.kind.value.status.case}`;
    default:
      return `${e.seq} ${e.kind.case}`;
  }
}

const idOf = (m: MessageWithParts | undefined): string => m?.message?.kind.value?.id ?? "";
const ms = (t: Timestamp | undefined): number => (t ? timestampMs(t) : Number.NaN);
const textOf = (m: MessageWithParts): string =>
  m.parts.flatMap((p) => (p.kind.case === "text" && !p.kind.value.synthetic ? [p.kind.value.text] : [])).join("");

async function messagesOf(r: Replica, sessionId: string): Promise<MessageWithParts[]> {
  const out: MessageWithParts[] = [];
  let pageToken = "";
  do {
    const res = await r.connect.listMessages({ sessionId, pageSize: 200, pageToken });
    out.push(...res.messages);
    pageToken = res.nextPageToken;
  } while (pageToken);
  return out;
}

/** The session's stored events, in seq order, straight from the table. */
async function storedEvents(sessionId: string): Promise<SessionEvent[]> {
  const { rows } = await sql().query<{ data: JsonObject }>("select data from session_event where session_id = $1 order by seq", [
    sessionId,
  ]);
  return rows.map((r) => fromJson(SessionEventSchema, r.data, { ignoreUnknownFields: true }));
}

async function lastStatus(sessionId: string): Promise<string | undefined> {
  const { rows } = await sql().query<{ data: JsonObject }>(
    "select data from session_event where session_id = $1 and kind = 'session_status' order by seq desc limit 1",
    [sessionId],
  );
  const event = rows[0] ? fromJson(SessionEventSchema, rows[0].data, { ignoreUnknownFields: true }) : undefined;
  return event?.kind.case === "sessionStatus" ? event.kind.value.status.case : undefined;
}

/** Parts straight from the table (with their positions), in position order. */
async function storedParts(sessionId: string): Promise<Array<{ position: number; messageId: string; part: Part }>> {
  const { rows } = await sql().query<{ position: string; message_id: string; data: JsonObject }>(
    "select position, message_id, data from part where session_id = $1 order by position",
    [sessionId],
  );
  return rows.map((r) => ({
    position: Number(r.position),
    messageId: r.message_id,
    part: fromJson(PartSchema, r.data, { ignoreUnknownFields: true }),
  }));
}

async function danglingParts(): Promise<number> {
  const { rows } = await sql().query<{ n: string }>(
    "select count(*)::text as n from part p left join message m on m.id = p.message_id where m.id is null",
  );
  return Number(rows[0]!.n);
}

/** Starts a `WatchSession` on `r`, collecting events until `stop()`. */
function watch(r: Replica, sessionId: string, afterSeq = 0n) {
  return collectEvents((signal) => r.grpc.watchSession({ sessionId, afterSeq }, { signal }));
}

/**
 * Waits until an assistant message of the session has a text part whose stored text is
 * non-empty and has not changed for `quietMs`; returns it. A streaming part is stored at most
 * every 100 ms while deltas arrive, so after the model stream hangs the stored text settles.
 */
async function settledText(sessionId: string, quietMs = 600): Promise<{ id: string; text: string }> {
  let last: { id: string; text: string; since: number } | undefined;
  return waitFor(`a settled assistant text part in ${sessionId}`, async () => {
    const answers = await assistantIds(sessionId);
    const found = (await storedParts(sessionId))
      .filter((p) => answers.has(p.messageId))
      .flatMap((p) =>
        p.part.kind.case === "text" && p.part.kind.value.text !== "" ? [{ id: p.part.id, text: p.part.kind.value.text }] : [],
      );
    const current = found.at(-1);
    if (!current) return undefined;
    if (!last || last.id !== current.id || last.text !== current.text) {
      last = { ...current, since: Date.now() };
      return undefined;
    }
    return Date.now() - last.since >= quietMs ? current : undefined;
  });
}

/** Ids of the session's assistant messages, from the table. */
async function assistantIds(sessionId: string): Promise<Set<string>> {
  const { rows } = await sql().query<{ id: string }>("select id from message where session_id = $1 and role = 'assistant'", [sessionId]);
  return new Set(rows.map((r) => r.id));
}

const words = (prefix: string, n: number): Array<{ text: string }> => Array.from({ length: n }, (_, i) => ({ text: `${prefix}${i} ` }));
const joined = (chunks: ReplyChunk[]) => chunks.map((c) => ("text" in c ? c.text : "")).join("");

// ---------------------------------------------------------------------------------------------

describe.skipIf(!POSTGRES)("replicas sharing one Postgres", () => {
  it("1. a prompt streamed on A is seen live on B's WatchSession, event for event, deltas included, after B's replay", async () => {
    const sessionId = (await A.connect.createSession({ directory: dir })).session!.id;
    // Earlier events: a no_reply prompt (its transaction's events, with their seqs).
    const earlier: SessionEvent[] = [];
    for await (const res of A.grpc.promptStream({ sessionId, noReply: true, parts: [text("some earlier context")] }))
      earlier.push(res.event!);
    expect(earlier.length).toBeGreaterThan(0);
    // Everything stored so far (session creation included): what B replays first.
    const history = await storedEvents(sessionId);
    expect(history.at(-1)?.seq).toBe(earlier.at(-1)?.seq);

    const watcher = watch(B, sessionId, 0n);
    // B has replayed the earlier events: it is subscribed (it subscribes before reading the table).
    await waitFor("B's replay", () => watcher.events.length >= history.length || watcher.failure() !== undefined);
    expect(watcher.failure()).toBeUndefined();

    const chunks = words("w", 20);
    model().push({ kind: "stream", chunks, delayMs: 20, usage: { prompt_tokens: 5, completion_tokens: 20 } });
    const streamed: SessionEvent[] = [];
    for await (const res of A.grpc.promptStream({ sessionId, parts: [text("stream me twenty words")] })) streamed.push(res.event!);

    const last = streamed.at(-1)!;
    expect(describeEvent(last)).toMatch(/sessionStatus idle$/);
    const deltas = streamed.filter((e) => e.kind.case === "partDelta");
    expect(deltas).toHaveLength(20);
    expect(deltas.map((e) => (e.kind.value as { delta: string }).delta).join("")).toBe(joined(chunks));

    // B reaches A's last event (the idle status), then a little more time for stragglers.
    await waitFor(
      "B to see A's final idle",
      () => watcher.events.some((e) => e.seq === last.seq && e.kind.case === "sessionStatus"),
      15_000,
    );
    await sleep(300);
    await watcher.stop();

    expect(watcher.events.slice(0, history.length).map(describeEvent)).toEqual(history.map(describeEvent));
    const live = watcher.events.slice(history.length);
    // The stored events agree one for one, and B's deltas are a subsequence of A's...
    const stored = (events: SessionEvent[]) => events.filter((e) => e.kind.case !== "partDelta").map(describeEvent);
    expect(stored(live)).toEqual(stored(streamed));
    const aDeltas = deltas.map(describeEvent);
    let cursor = 0;
    for (const d of live.filter((e) => e.kind.case === "partDelta").map(describeEvent)) {
      cursor = aDeltas.indexOf(d, cursor) + 1;
      expect(cursor, `B's delta ${d} is one of A's, in order`).toBeGreaterThan(0);
    }
    // ...and B yields exactly what A's PromptStream yielded, deltas included.
    expect(live.map(describeEvent)).toEqual(streamed.map(describeEvent));
  }, 60_000);

  it("2. a prompt stored on B while A runs the session's loop is answered once, one runner at a time", async () => {
    const sessionId = (await A.connect.createSession({ directory: dir })).session!.id;
    const first = words("first", 12);
    const second = words("second", 6);
    const before = model().requests.length;
    model().push({ kind: "stream", chunks: first, delayMs: 60 }, { kind: "stream", chunks: second, delayMs: 20 });

    const asked = await A.connect.promptAsync({ sessionId, parts: [text("question one")] });
    const user1 = idOf(asked.message);
    // A's loop is running: its assistant message exists.
    await waitFor("A's first assistant message", async () =>
      (await messagesOf(A, sessionId)).some((m) => assistantOf(m)?.parentId === user1),
    );
    const answered = await B.connect.prompt({ sessionId, parts: [text("question two")] });
    const answer2 = answered.message!;
    expect(assistantOf(answer2)?.time?.completed).toBeDefined();
    expect(textOf(answer2)).toBe(joined(second));

    // Both answered, then idle.
    await waitFor("both answers and idle", async () => {
      const stored = await messagesOf(A, sessionId);
      return stored.filter((m) => assistantOf(m)?.time?.completed).length === 2 && (await lastStatus(sessionId)) === "idle";
    });
    const messages = await messagesOf(B, sessionId);
    const users = messages.filter((m) => m.message?.kind.case === "user");
    const assistants = messages.filter((m) => m.message?.kind.case === "assistant");
    expect(users.map(idOf)).toEqual([user1, idOf(users[1])]);
    const user2 = idOf(users[1]);
    expect(assistants.map((m) => assistantOf(m)!.parentId)).toEqual([user1, user2]);
    expect(idOf(answer2)).toBe(idOf(assistants[1]));
    for (const a of assistants) {
      expect(assistantOf(a)).toMatchObject({ finish: "stop" });
      expect(assistantOf(a)!.error).toBeUndefined();
      expect(a.parts.map((p) => p.kind.case)).toEqual(["stepStart", "text", "stepFinish"]);
    }
    expect(textOf(assistants[0]!)).toBe(joined(first));
    expect(textOf(assistants[1]!)).toBe(joined(second));
    // Exactly two model calls: nobody ran a step twice.
    expect(model().requests.length - before).toBe(2);

    // One runner at a time: the answers do not overlap in time...
    const spans = assistants
      .map((m) => ({ created: ms(assistantOf(m)!.time?.created), completed: ms(assistantOf(m)!.time?.completed) }))
      .sort((x, y) => x.created - y.created);
    expect(spans[0]!.completed).toBeLessThanOrEqual(spans[1]!.created);
    // ...and their parts are never interleaved (positions of one answer form a block).
    const parts = await storedParts(sessionId);
    const ranges = assistants.map((m) => {
      const positions = parts.filter((p) => p.messageId === idOf(m)).map((p) => p.position);
      return [Math.min(...positions), Math.max(...positions)] as const;
    });
    expect(ranges[0]![1]).toBeLessThan(ranges[1]![0]);
    // Session status: busy/idle alternate, never busy twice in a row (two loops at once).
    const statuses = (await storedEvents(sessionId)).flatMap((e) => (e.kind.case === "sessionStatus" ? [e.kind.value.status.case] : []));
    expect(statuses.length).toBeGreaterThanOrEqual(2);
    statuses.forEach((s, i) => expect(s).toBe(i % 2 === 0 ? "busy" : "idle"));
    expect(A.stderr() + B.stderr()).not.toMatch(/agent loop of .* failed/);
  }, 60_000);

  it("3. the same message_id sent to A and B at the same moment is stored once; both calls return it", async () => {
    const sessionId = (await A.connect.createSession({ directory: dir })).session!.id;
    for (let round = 0; round < 5; round++) {
      const messageId = newId("msg");
      const request = { sessionId, messageId, noReply: true, parts: [text(`the same prompt, round ${round}`)] };
      const [a, b] = await Promise.all([A.connect.prompt(request), B.grpc.prompt(request)]);
      expect(idOf(a.message)).toBe(messageId);
      expect(idOf(b.message)).toBe(messageId);
      expect(toJson(MessageWithPartsSchema, b.message!)).toEqual(toJson(MessageWithPartsSchema, a.message!));
      const { rows } = await sql().query<{ n: string; parts: string }>(
        "select (select count(*) from message where id = $1)::text as n, (select count(*) from part where message_id = $1)::text as parts",
        [messageId],
      );
      expect(rows[0]).toEqual({ n: "1", parts: "1" });
      const prompted = (await storedEvents(sessionId)).filter((e) => e.kind.case === "prompted" && e.kind.value.messageId === messageId);
      expect(prompted).toHaveLength(1);
    }
    expect(await messagesOf(A, sessionId)).toHaveLength(5);
  }, 60_000);

  it("4. kill -9 mid-stream: a new process recovers the interrupted answer, ResumeSession completes it", async () => {
    const sessionId = (await A.connect.createSession({ directory: dir })).session!.id;
    const taskArgs = JSON.stringify({ description: "dig deeper", prompt: "look around the project", subagent_type: "general" });
    model().push(
      // The parent's step: text, then a task call (a subagent runs in a child session)...
      {
        kind: "stream",
        chunks: [
          { text: "Partial " },
          { text: "answer " },
          { text: "so far" },
          { toolCall: { id: "call_task", name: "task", arguments: taskArgs } },
        ],
        delayMs: 150,
      },
      // ...whose model stream hangs after some text.
      { kind: "stream", chunks: [...words("child", 6), { hang: true }], delayMs: 150 },
    );
    const asked = await A.connect.promptAsync({ sessionId, parts: [text("start something long")] });
    const user1 = idOf(asked.message);

    const childId = await waitFor("the child session", async () => {
      const { rows } = await sql().query<{ id: string }>("select id from session where parent_id = $1", [sessionId]);
      return rows[0]?.id;
    });
    await waitFor("the parent's running task", async () =>
      (await storedParts(sessionId)).some((p) => p.part.kind.case === "tool" && p.part.kind.value.state?.status.case === "running"),
    );
    const childText = await settledText(childId);
    expect(joined(words("child", 6)).startsWith(childText.text)).toBe(true);
    const textsBefore = new Map(
      [...(await storedParts(sessionId)), ...(await storedParts(childId))].flatMap((p) =>
        p.part.kind.case === "text" ? [[p.part.id, p.part.kind.value.text] as const] : [],
      ),
    );
    // The parent's text part ended with its step's stream; the child's is cut off mid-stream.
    expect([...textsBefore.values()]).toEqual(expect.arrayContaining(["Partial answer so far", childText.text]));

    const killed = await A.kill9();
    expect(killed.signal).toBe("SIGKILL");
    // B is unaffected and still serves.
    expect(B.hasExited()).toBe(false);
    expect((await B.connect.getSession({ sessionId })).session?.id).toBe(sessionId);

    // A new process recovers what A left behind, before it listens.
    const C = await replica("C");
    expect(C.stderr()).toMatch(/recovered 2 interrupted answer\(s\) in 2 session\(s\)/);
    await waitFor("recovered state", async () => (await lastStatus(sessionId)) === "idle" && (await lastStatus(childId)) === "idle", 5_000);

    for (const sid of [sessionId, childId]) {
      const messages = await messagesOf(C, sid);
      const assistants = messages.filter((m) => m.message?.kind.case === "assistant");
      expect(assistants.length, `assistants of ${sid}`).toBe(1);
      const a = assistantOf(assistants[0]!)!;
      expect(a.time?.completed, `completed (${sid})`).toBeDefined();
      expect(a.error?.kind.case, `error kind (${sid})`).toBe("interrupted");
      for (const m of messages) expect(m.parts.length, `parts of ${idOf(m)}`).toBeGreaterThan(0);
      for (const p of assistants[0]!.parts) {
        if (p.kind.case === "tool") expect(p.kind.value.state?.status.case, `tool ${p.kind.value.tool}`).toBe("error");
        if (p.kind.case === "text") {
          expect(p.kind.value.text).toBe(textsBefore.get(p.id));
          expect(p.kind.value.time?.end).toBeDefined();
        }
      }
      expect(await lastStatus(sid)).toBe("idle");
    }
    const task = (await messagesOf(C, sessionId)).flatMap((m) => m.parts).find((p) => p.kind.case === "tool");
    expect(task?.kind.case === "tool" ? task.kind.value.tool : "").toBe("task");
    expect(await danglingParts()).toBe(0);

    // ResumeSession on C, the model answering now: a new completed answer to the same prompt.
    model().push({ kind: "stream", chunks: [{ text: "Resumed " }, { text: "answer" }], delayMs: 10 });
    const events: SessionEvent[] = [];
    for await (const res of C.grpc.resumeSession({ sessionId })) events.push(res.event!);
    expect(describeEvent(events.at(-1)!)).toMatch(/sessionStatus idle$/);
    const messages = await messagesOf(C, sessionId);
    const answers = messages.filter((m) => assistantOf(m)?.parentId === user1);
    expect(answers).toHaveLength(2);
    const resumed = assistantOf(answers[1]!)!;
    expect(resumed.time?.completed).toBeDefined();
    expect(resumed.error).toBeUndefined();
    expect(resumed.finish).toBe("stop");
    expect(textOf(answers[1]!)).toBe("Resumed answer");
    expect(assistantOf(answers[0]!)!.error?.kind.case).toBe("interrupted");
    expect(await lastStatus(sessionId)).toBe("idle");
    expect(await danglingParts()).toBe(0);
  }, 120_000);

  it("4b. kill -9 while B waits for the session's lock: B takes the lock over, closes the dead answer and answers its queued prompt", async () => {
    const victim = await replica("A2");
    const sessionId = (await victim.connect.createSession({ directory: dir })).session!.id;
    model().push(
      { kind: "stream", chunks: [...words("half", 6), { hang: true }], delayMs: 150 },
      { kind: "stream", chunks: [{ text: "Second " }, { text: "answer" }], delayMs: 10 },
    );
    const asked = await victim.connect.promptAsync({ sessionId, parts: [text("first, on the victim")] });
    const user1 = idOf(asked.message);
    const stored = await settledText(sessionId);
    expect(joined(words("half", 6)).startsWith(stored.text)).toBe(true);

    // A prompt on B: stored, then B's run waits for the lock the victim holds.
    const second = B.connect.prompt({ sessionId, parts: [text("second, on B")] });
    second.catch(() => {}); // awaited below
    await waitFor("B waiting for the session lock", async () => {
      const { rows } = await sql().query<{ n: string }>(
        "select count(*)::text as n from pg_stat_activity where datname = current_database() and application_name = 'ledger-loop-lock' and wait_event_type = 'Lock'",
      );
      return Number(rows[0]!.n) > 0;
    });
    const messagesBefore = await messagesOf(B, sessionId);
    expect(messagesBefore.filter((m) => m.message?.kind.case === "user")).toHaveLength(2);

    await victim.kill9();
    const answer = (await second).message!;
    expect(assistantOf(answer)?.parentId).not.toBe(user1);
    expect(assistantOf(answer)).toMatchObject({ finish: "stop" });
    expect(assistantOf(answer)?.error).toBeUndefined();
    expect(textOf(answer)).toBe("Second answer");
    await waitFor("idle after B's answer", async () => (await lastStatus(sessionId)) === "idle");

    // B closed the victim's answer when it took the lock over; a restart finds nothing left.
    const stopped = await B.stop(20_000);
    expect({ code: stopped.code, forced: stopped.forced }, B.stderr()).toEqual({ code: 0, forced: false });
    B = await startReplica({ name: "B", cwd: dir!, databaseUrl: pair!.database.url!, timeoutMs: START_MS });
    expect(B.stderr()).not.toMatch(/recovered/);

    const messages = await messagesOf(B, sessionId);
    const first = messages.find((m) => assistantOf(m)?.parentId === user1)!;
    expect(assistantOf(first)!.time?.completed).toBeDefined();
    expect(assistantOf(first)!.error?.kind.case).toBe("interrupted");
    const textPart = first.parts.find((p) => p.kind.case === "text");
    expect(textPart?.kind.value).toMatchObject({ text: stored.text });
    expect(textPart?.kind.case === "text" ? textPart.kind.value.time?.end : undefined).toBeDefined();
    for (const m of messages) expect(m.parts.length, `parts of ${idOf(m)}`).toBeGreaterThan(0);
    expect(await lastStatus(sessionId)).toBe("idle");
    expect(await danglingParts()).toBe(0);
  }, 120_000);

  it("5. a replica starting while another runs a subagent leaves the live child session alone", async () => {
    const sessionId = (await B.connect.createSession({ directory: dir })).session!.id;
    const taskArgs = JSON.stringify({ description: "wait a while", prompt: "take your time", subagent_type: "general" });
    model().push(
      {
        kind: "stream",
        chunks: [{ text: "Delegating" }, { toolCall: { id: "call_live", name: "task", arguments: taskArgs } }],
        delayMs: 20,
      },
      { kind: "stream", chunks: [...words("child", 3), { hang: true }], delayMs: 150 },
    );
    await B.connect.promptAsync({ sessionId, parts: [text("delegate something")] });
    const childId = await waitFor("the child session", async () => {
      const { rows } = await sql().query<{ id: string }>("select id from session where parent_id = $1", [sessionId]);
      return rows[0]?.id;
    });
    // The child's answer is under way: its message and a text part are stored.
    await waitFor("the child's answer", async () => {
      const ids = await assistantIds(childId);
      return (await storedParts(childId)).some((p) => ids.has(p.messageId) && p.part.kind.case === "text");
    });

    // B's run is alive (its model stream hangs). A new replica starts and runs recovery.
    const D = await replica("D");
    const child = (await messagesOf(D, childId)).filter((m) => m.message?.kind.case === "assistant");
    const parent = (await messagesOf(D, sessionId)).filter((m) => m.message?.kind.case === "assistant");
    const statusOfChild = await lastStatus(childId);
    const recoveredLine = /recovered .*/.exec(D.stderr())?.[0] ?? "(nothing recovered)";

    // Clean up the live run before asserting.
    expect((await B.connect.abort({ sessionId })).aborted).toBe(true);

    expect(parent.map((m) => assistantOf(m)!.error?.kind.case)).toEqual([undefined]);
    expect({ recoveredLine, childError: child.map((m) => assistantOf(m)!.error?.kind.case), childStatus: statusOfChild }).toEqual({
      recoveredLine: "(nothing recovered)",
      childError: [undefined],
      childStatus: "busy",
    });
  }, 120_000);

  it("6. recovery at start does not overwrite an answer that another replica completed meanwhile", async () => {
    // S1: an answer left open by a crashed replica V (low message positions).
    const V = await replica("V");
    const s1 = (await V.connect.createSession({ directory: dir })).session!.id;
    model().push({ kind: "stream", chunks: [{ text: "doomed" }, { hang: true }] });
    await V.connect.promptAsync({ sessionId: s1, parts: [text("crash while answering")] });
    await waitFor("V's open answer", async () => {
      const { rows } = await sql().query(
        "select 1 from part p join message m on m.id = p.message_id where m.session_id = $1 and m.role = 'assistant' and p.kind = 'text'",
        [s1],
      );
      return rows.length > 0;
    });
    await V.kill9();

    // X: a live answer on B, at higher positions than S1's (recovery handles S1 first).
    const x = (await B.connect.createSession({ directory: dir })).session!.id;
    for (let i = 0; i < 3; i++) await B.connect.prompt({ sessionId: x, noReply: true, parts: [text(`context ${i}`)] });
    const reply = words("x", 4);
    model().push({ kind: "stream", chunks: reply, delayMs: 400 });
    const asked = await B.connect.promptAsync({ sessionId: x, parts: [text("answer slowly")] });
    const userX = idOf(asked.message);
    await waitFor("X's open answer", async () => (await messagesOf(B, x)).some((m) => assistantOf(m)?.parentId === userX));

    // Recovery on a new replica E reads the open answers (S1's and X's), then works through
    // them; S1's session row is held here, which keeps E busy with S1 until X's answer is done.
    const holder = new pg.Client({ connectionString: pair!.database.url });
    await holder.connect();
    let E: Promise<Replica> | undefined;
    try {
      await holder.query("begin");
      await holder.query("select id from session where id = $1 for update", [s1]);
      E = replica("E");
      E.catch(() => {}); // awaited below
      try {
        await waitFor(
          "E's recovery to wait on S1's row",
          async () => {
            const { rows } = await sql().query<{ n: string }>(
              "select count(*)::text as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%for update%' and pid <> $1",
              [(holder as unknown as { processID: number }).processID],
            );
            return Number(rows[0]!.n) > 0;
          },
          START_MS,
        );
      } catch (error) {
        await holder.query("rollback").catch(() => {});
        const started = await E.then(
          (r) => `E started; stderr:\n${r.stderr()}`,
          (e: unknown) => String(e),
        );
        throw new Error(`${String(error)}\n${started}`);
      }
      await waitFor(
        "X's answer completed and idle",
        async () => {
          const done = (await messagesOf(B, x)).some((m) => assistantOf(m)?.parentId === userX && assistantOf(m)?.time?.completed);
          return done && (await lastStatus(x)) === "idle";
        },
        30_000,
      );
      await sleep(300); // B's loop releases X's lock
      await holder.query("commit");
    } finally {
      await holder.query("rollback").catch(() => {});
      await holder.end().catch(() => {});
    }
    const e = await E!;

    const s1Answer = (await messagesOf(e, s1)).find((m) => m.message?.kind.case === "assistant");
    expect(assistantOf(s1Answer!)!.error?.kind.case).toBe("interrupted");
    const answer = (await messagesOf(e, x)).find((m) => assistantOf(m)?.parentId === userX)!;
    expect(textOf(answer)).toBe(joined(reply));
    expect({
      error: assistantOf(answer)!.error?.kind.case,
      finish: assistantOf(answer)!.finish,
      recovered: /recovered .*/.exec(e.stderr())?.[0],
    }).toEqual({
      error: undefined,
      finish: "stop",
      recovered: "recovered 1 interrupted answer(s) in 1 session(s); ResumeSession reruns them",
    });
  }, 120_000);

  it("7. every process exits cleanly on SIGTERM", async () => {
    const running = [B, ...extra].filter((r) => !r.hasExited());
    expect(running.length).toBeGreaterThan(0);
    const exits = await Promise.all(running.map(async (r) => ({ name: r.name, ...(await r.stop(20_000)), stderr: r.stderr() })));
    for (const e of exits)
      expect({ name: e.name, code: e.code, forced: e.forced }, e.stderr).toEqual({ name: e.name, code: 0, forced: false });
  }, 60_000);
});
