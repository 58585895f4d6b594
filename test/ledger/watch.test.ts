import { writeFile } from "node:fs/promises";
import path from "node:path";
import { clone, equals, toJson } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { MessageSchema, type AssistantMessage, type Message, type MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { PartSchema, type Part } from "../../gen/ledger/v1/part_pb.js";
import { sql } from "kysely";
import { pruneEvents } from "../../src/storage/event-store.js";
import { compatibleProvider } from "../support/mock-models.js";
import { connectError as failure } from "../support/errors.js";
import { TEST_ENGINE } from "../support/db.js";
import { collectEvents, type EventCollector } from "../support/event-stream.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { idOf, storedEvents } from "../support/stored.js";
import { startFakeOpenAI, type FakeOpenAI, type ReplyChunk, type ScriptedReply } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { sleep, waitFor } from "../support/wait.js";

// WatchSession / PromptStream / ResumeSession end to end through the Connect client: gap-free
// seqs under concurrent writers, client-side reconstruction across random disconnects, stale
// and ahead cursors, identical streams for PromptStream and WatchSession, and resuming an
// aborted answer. Runs on Postgres and PGlite (vitest projects).

/** Disconnect/re-attach attempts of the soak test: 200 in CI, `SOAK_ITERATIONS` to raise it (`npm run soak`). */
const SOAK_ITERATIONS = Number(process.env.SOAK_ITERATIONS ?? 200);
/** Seed of the soak's random cut points (printed with every failure); `SOAK_SEED` to replay one. */
const SOAK_SEED = Number(process.env.SOAK_SEED ?? Date.now() % 2 ** 31);
/** Sessions answered concurrently by the soak, each lane with its own fake model server. */
const LANES = 4;
/** Text chunks of the soak's streamed answer, and the delay (ms) between SSE chunks. */
const TEXT_CHUNKS = 40;
const CHUNK_DELAY_MS = 10;

let t: TestLedger;
let main: FakeOpenAI;
/** Model server of the tests that may leave a scripted reply unconsumed. */
let spare: FakeOpenAI;
const lanes: FakeOpenAI[] = [];

beforeAll(async () => {
  main = await startFakeOpenAI();
  spare = await startFakeOpenAI();
  for (let i = 0; i < LANES; i++) lanes.push(await startFakeOpenAI());
  const provider = (url: string) => compatibleProvider(url, { m: {} }, "test");
  t = await startTestLedger(
    {
      model: "main/m",
      provider: Object.fromEntries([
        ["main", provider(main.url)],
        ["spare", provider(spare.url)],
        ...lanes.map((f, i) => [`lane${i}`, provider(f.url)]),
      ]),
      retry: { attempts: 1, initial_ms: 10, max_ms: 20 },
    },
    { transport: "http" },
  );
  await writeFile(path.join(t.dir, "notes.txt"), "hello from notes\n");
});

afterAll(async () => {
  await t?.close();
  await main?.close();
  await spare?.close();
  for (const f of lanes) await f.close();
});

// ---------------------------------------------------------------------------------------------
// helpers

const range = (from: number, to: number) => Array.from({ length: Math.max(0, to - from + 1) }, (_, i) => from + i);
const newSession = async () => (await t.client.createSession({ directory: t.dir })).session!.id;

/** The session row's `last_seq` and `pruned_seq`. */
async function bounds(sessionId: string): Promise<{ lastSeq: bigint; prunedSeq: bigint }> {
  const row = await t.ledger.deps.db
    .selectFrom("session")
    .select(["last_seq", "pruned_seq"])
    .where("id", "=", sessionId)
    .executeTakeFirstOrThrow();
  return { lastSeq: BigInt(row.last_seq), prunedSeq: BigInt(row.pruned_seq) };
}

/** The seqs of the session's `session_event` rows, ascending. */
async function storedSeqs(sessionId: string): Promise<number[]> {
  return (await storedEvents(t.ledger.deps.db, sessionId)).map((e) => e.seq);
}

/** Waits until another connection to the test database waits for a lock in a query like `pattern` (Postgres only). */
async function lockWaiter(what: string, pattern: string): Promise<void> {
  await waitFor(
    what,
    async () => {
      const waiting = await sql<{ n: number }>`
      select count(*)::int as n from pg_stat_activity
      where datname = current_database() and pid <> pg_backend_pid() and wait_event_type = 'Lock' and query like ${pattern}`.execute(
        t.ledger.deps.db,
      );
      return waiting.rows[0]!.n > 0;
    },
    10_000,
    5,
  );
}

/** A WatchSession reader in the background (see test/support/event-stream.ts). */
const tail = (sessionId: string, afterSeq: bigint) => collectEvents((signal) => t.client.watchSession({ sessionId, afterSeq }, { signal }));

const isStored = (e: SessionEvent) => e.kind.case !== "partDelta";
const messageId = (m: Message | undefined) => m?.kind.value?.id ?? "";
const assistantOf = (m: Message | undefined): AssistantMessage | undefined => (m?.kind.case === "assistant" ? m.kind.value : undefined);
const isIdle = (e: SessionEvent) => e.kind.case === "sessionStatus" && e.kind.value.status.case === "idle";

/** The text of a text or reasoning part, else undefined. */
function textOf(part: Part): string | undefined {
  return part.kind.case === "text" || part.kind.case === "reasoning" ? part.kind.value.text : undefined;
}

/** What the brief compares: message ids, roles, completion; part ids, kinds, texts (and tool status). */
function view(messages: Array<{ message: Message; parts: Part[] }>) {
  return messages.map(({ message, parts }) => ({
    id: messageId(message),
    role: message.kind.case,
    completed: assistantOf(message) ? assistantOf(message)!.time?.completed !== undefined : undefined,
    error: assistantOf(message)?.error?.kind.case,
    finish: assistantOf(message)?.finish,
    parts: parts.map((p) => ({
      id: p.id,
      kind: p.kind.case,
      text: textOf(p),
      tool: p.kind.case === "tool" ? p.kind.value.state?.status.case : undefined,
    })),
  }));
}

/** Deterministic PRNG (mulberry32) so a failing soak can be replayed with SOAK_SEED. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 2 ** 32;
  };
}

// ---------------------------------------------------------------------------------------------
// client-side reconstruction from events

/** A client's view of one session, rebuilt from events the way a UI would. */
class ClientState {
  readonly messages = new Map<string, Message>();
  readonly parts = new Map<string, Part>();
  /** Part ids per message, in the order they were first announced. */
  readonly partOrder = new Map<string, string[]>();
  /** Seqs of stored (non-delta) events received, across attachments, in arrival order. */
  readonly stored: number[] = [];
  /** Every text a part had after applying a delta (must each be a prefix of the final text). */
  readonly intermediate = new Map<string, string[]>();
  readonly stats = {
    applied: 0,
    overlapped: 0,
    skipped: 0,
    gaps: 0,
    unknownPart: 0,
    deltaAhead: 0,
    duplicates: 0,
    seqGaps: 0,
    unsynced: 0,
  };
  /**
   * Parts that had a delta applied exactly on this attachment: the stream is then live for them,
   * so every later delta must apply exactly too (a snapshot in between only catches up). A
   * replayed snapshot does not count: deltas sent after it, before this stream subscribed, are lost.
   */
  private readonly synced = new Set<string>();
  answered = false;
  finished = false;

  constructor(
    /** The last stored seq seen (the WatchSession cursor). */
    public lastSeq: bigint,
    private readonly userId?: string,
  ) {}

  /** A new stream (PromptStream or WatchSession) starts: deltas missed while away may gap. */
  attach(): void {
    this.synced.clear();
  }

  apply(event: SessionEvent): void {
    if (event.kind.case === "partDelta") return this.applyDelta(event);
    const seq = Number(event.seq);
    if (this.stored.includes(seq) || event.seq <= this.lastSeq) this.stats.duplicates++;
    else if (event.seq !== this.lastSeq + 1n) this.stats.seqGaps++;
    this.stored.push(seq);
    if (event.seq > this.lastSeq) this.lastSeq = event.seq;
    switch (event.kind.case) {
      case "messageUpdated": {
        const message = clone(MessageSchema, event.kind.value.message!);
        this.messages.set(messageId(message), message);
        if (!this.partOrder.has(messageId(message))) this.partOrder.set(messageId(message), []);
        const a = assistantOf(message);
        if (a && a.time?.completed && (a.error !== undefined || a.finish !== "tool-calls") && (!this.userId || a.parentId === this.userId))
          this.answered = true;
        break;
      }
      case "messageRemoved":
        this.messages.delete(event.kind.value.messageId);
        for (const id of this.partOrder.get(event.kind.value.messageId) ?? []) this.parts.delete(id);
        this.partOrder.delete(event.kind.value.messageId);
        break;
      case "partUpdated": {
        const part = clone(PartSchema, event.kind.value.part!);
        if (!this.parts.has(part.id)) {
          const order = this.partOrder.get(part.messageId) ?? [];
          order.push(part.id);
          this.partOrder.set(part.messageId, order);
        }
        this.parts.set(part.id, part);
        break;
      }
      case "partRemoved": {
        const { messageId: owner, partId } = event.kind.value;
        this.parts.delete(partId);
        const order = this.partOrder.get(owner);
        if (order)
          this.partOrder.set(
            owner,
            order.filter((id) => id !== partId),
          );
        break;
      }
      case "sessionStatus":
        if (event.kind.value.status.case === "idle" && this.answered) this.finished = true;
        break;
      default:
        break;
    }
  }

  /** The documented rule: apply at offset == length (code points), skip what is present, ignore a gap. */
  private applyDelta(event: SessionEvent): void {
    if (event.kind.case !== "partDelta") return;
    const d = event.kind.value;
    // A delta extends a snapshot that was delivered before it.
    if (event.seq > this.lastSeq) this.stats.deltaAhead++;
    const part = this.parts.get(d.partId);
    if (!part || (part.kind.case !== "text" && part.kind.case !== "reasoning") || d.field !== "text") {
      this.stats.unknownPart++;
      return;
    }
    const have = [...part.kind.value.text];
    const add = [...d.delta];
    const offset = Number(d.offset);
    if (offset !== have.length && this.synced.has(d.partId)) this.stats.unsynced++;
    if (offset > have.length) {
      this.stats.gaps++;
      return;
    }
    if (offset + add.length <= have.length) {
      this.stats.skipped++;
      return;
    }
    if (offset < have.length) this.stats.overlapped++;
    else this.stats.applied++;
    this.synced.add(d.partId);
    part.kind.value.text += add.slice(have.length - offset).join("");
    const seen = this.intermediate.get(part.id) ?? [];
    seen.push(part.kind.value.text);
    this.intermediate.set(part.id, seen);
  }

  /** Messages in first-seen order, each with its parts in first-seen order. */
  snapshot(): Array<{ message: Message; parts: Part[] }> {
    return [...this.messages.values()].map((message) => ({
      message,
      parts: (this.partOrder.get(messageId(message)) ?? []).map((id) => this.parts.get(id)!).filter(Boolean),
    }));
  }
}

/** ListMessages, all pages. */
async function listAll(sessionId: string): Promise<MessageWithParts[]> {
  const out: MessageWithParts[] = [];
  let pageToken = "";
  do {
    const res = await t.client.listMessages({ sessionId, pageToken });
    out.push(...res.messages);
    pageToken = res.nextPageToken;
  } while (pageToken);
  return out;
}

const serverView = (messages: MessageWithParts[]) => messages.map((m) => ({ message: m.message!, parts: m.parts }));

// ---------------------------------------------------------------------------------------------

describe("WatchSession under 32 concurrent writers", () => {
  /** Text parts per prompt: 32 prompts write more than one 500-row replay page of events. */
  const PARTS = 15;

  it("stores seq 1..N without a gap, last_seq = N, and a tailing reader gets start+1..N in order, once each", async () => {
    const sessionId = await newSession();
    await t.client.prompt({ sessionId, noReply: true, parts: [text("before the writers")] });
    const start = (await bounds(sessionId)).lastSeq;
    // Attach from one before `start` and wait for that event: the reader is then subscribed live.
    const reader = tail(sessionId, start - 1n);
    await reader.reach(start);

    const written = await Promise.all(
      Array.from({ length: 32 }, (_, i) =>
        t.client.prompt({ sessionId, noReply: true, parts: Array.from({ length: PARTS }, (_, j) => text(`writer ${i} part ${j}`)) }),
      ),
    );
    const { lastSeq } = await bounds(sessionId);
    const n = Number(lastSeq);
    expect(await storedSeqs(sessionId)).toEqual(range(1, n));
    expect(n).toBeGreaterThanOrEqual(Number(start) + 32 * (PARTS + 2));

    await reader.reach(lastSeq);
    await sleep(50); // anything after N would be a duplicate or an invented event
    await reader.stop();
    expect(reader.events.map((e) => Number(e.seq))).toEqual(range(Number(start), n));
    expect(reader.events.every(isStored)).toBe(true);

    // Each prompt's events are one transaction: a contiguous run of seqs.
    for (const res of written) {
      const id = messageId(res.message!.message);
      const mine = reader.events
        .filter(
          (e) =>
            (e.kind.case === "messageUpdated" && messageId(e.kind.value.message) === id) ||
            (e.kind.case === "partUpdated" && e.kind.value.part?.messageId === id) ||
            (e.kind.case === "prompted" && e.kind.value.messageId === id),
        )
        .map((e) => Number(e.seq));
      expect(mine.length).toBe(PARTS + 2);
      expect(mine).toEqual(range(mine[0]!, mine[0]! + mine.length - 1));
    }
    expect(await listAll(sessionId)).toHaveLength(33);

    // A late reader replays the same log from the table (more than one page), then stops.
    const late = tail(sessionId, start);
    await late.reach(lastSeq);
    await sleep(20);
    await late.stop();
    expect(late.events.map((e) => toJson(SessionEventSchema, e))).toEqual(reader.events.slice(1).map((e) => toJson(SessionEventSchema, e)));
  });
});

describe("disconnect at random points and re-attach", () => {
  /** A tool step (read notes.txt) then a slow text step with non-BMP characters (offsets count code points). */
  function script(n: number, rng: () => number): { replies: ScriptedReply[]; answer: string } {
    const chunks: ReplyChunk[] = [];
    for (let i = 0; i < TEXT_CHUNKS; i++) {
      const extra = rng() < 0.2 ? "😀" : rng() < 0.2 ? "é" : rng() < 0.1 ? "𝄞x" : "";
      chunks.push({ text: `w${i}${extra} ` });
    }
    return {
      replies: [
        {
          kind: "stream",
          chunks: [
            { text: "Let me read. " },
            { toolCall: { id: `call_${n}`, name: "read", arguments: JSON.stringify({ filePath: "notes.txt" }) } },
          ],
          delayMs: 5,
        },
        { kind: "stream", chunks, delayMs: CHUNK_DELAY_MS },
      ],
      answer: chunks.map((c) => ("text" in c ? c.text : "")).join(""),
    };
  }

  interface SessionSoak {
    sessionId: string;
    attachments: number;
    stats: ClientState["stats"];
  }

  async function soakOne(lane: number, n: number, rng: () => number, attempts: { count: number }): Promise<SessionSoak> {
    const sessionId = await newSession();
    const { lastSeq: initial } = await bounds(sessionId);
    const { replies, answer } = script(n, rng);
    lanes[lane]!.push(...replies);
    const state = new ClientState(initial);
    const seed = `SOAK_SEED=${SOAK_SEED} lane ${lane} session ${n} (${sessionId})`;
    let attachments = 0;
    while (!state.finished) {
      const controller = new AbortController();
      const limit = 1 + Math.floor(rng() * 12);
      const byBreak = rng() < 0.5;
      const stream =
        attachments === 0
          ? t.client.promptStream(
              { sessionId, model: { providerId: `lane${lane}`, modelId: "m" }, parts: [text(`question ${n}`)] },
              { signal: controller.signal },
            )
          : t.client.watchSession({ sessionId, afterSeq: state.lastSeq }, { signal: controller.signal });
      attachments++;
      attempts.count++;
      state.attach();
      let received = 0;
      try {
        for await (const res of stream) {
          state.apply(res.event!);
          if (state.finished) break;
          if (++received >= limit) {
            // Disconnect: either abort the call, or just stop iterating (the client cancels the stream).
            if (!byBreak) controller.abort();
            break;
          }
        }
      } catch (error) {
        if (!controller.signal.aborted) throw new Error(`${seed}: attachment ${attachments} failed: ${String(error)}`, { cause: error });
      }
      const pause = rng();
      if (pause < 0.3) await sleep(Math.floor(rng() * 30));
      else if (pause < 0.6) await sleep(0);
      if (attachments > 2000) throw new Error(`${seed}: no final idle after ${attachments} attachments`);
    }

    // The client's reconstruction equals the server's messages.
    const server = await listAll(sessionId);
    const client = state.snapshot();
    expect(view(client), seed).toEqual(view(serverView(server)));
    // ...down to every field of every message and part.
    expect(client.length, seed).toBe(server.length);
    client.forEach((c, i) => {
      const s = server[i]!;
      expect(
        equals(MessageSchema, c.message, s.message!),
        `${seed}: message ${i} ${JSON.stringify(toJson(MessageSchema, c.message))} vs ${JSON.stringify(toJson(MessageSchema, s.message!))}`,
      ).toBe(true);
      c.parts.forEach((p, j) => {
        expect(
          equals(PartSchema, p, s.parts[j]!),
          `${seed}: part ${p.id} ${JSON.stringify(toJson(PartSchema, p))} vs ${JSON.stringify(toJson(PartSchema, s.parts[j]!))}`,
        ).toBe(true);
      });
    });
    // The answer is the scripted one: tool step, then the streamed text.
    expect(
      server.map((m) => m.message?.kind.case),
      seed,
    ).toEqual(["user", "assistant", "assistant"]);
    expect(server[1]!.parts.find((p) => p.kind.case === "tool")?.kind.value, seed).toMatchObject({
      callId: `call_${n}`,
      state: { status: { case: "completed" } },
    });
    expect(server[2]!.parts.find((p) => p.kind.case === "text")?.kind.value, seed).toMatchObject({ text: answer });
    // Every text a part had while streaming was a prefix of its final text.
    const finalText = new Map(server.flatMap((m) => m.parts.map((p) => [p.id, textOf(p) ?? ""] as const)));
    for (const [id, texts] of state.intermediate)
      for (const x of texts) expect(finalText.get(id)!.startsWith(x), `${seed}: part ${id} had ${JSON.stringify(x)}`).toBe(true);

    // Stored seqs: each once, no gap across attachments, exactly the table's.
    expect(state.stats.duplicates, seed).toBe(0);
    expect(state.stats.seqGaps, seed).toBe(0);
    expect(state.stats.unknownPart, seed).toBe(0);
    expect(state.stats.deltaAhead, seed).toBe(0);
    expect(state.stats.unsynced, seed).toBe(0);
    expect(state.stored, seed).toEqual(range(Number(initial) + 1, Number(state.lastSeq)));
    const { lastSeq } = await bounds(sessionId);
    expect(state.lastSeq, seed).toBe(lastSeq);
    expect(
      (await storedSeqs(sessionId)).filter((s) => s > Number(initial)),
      seed,
    ).toEqual(state.stored);
    return { sessionId, attachments, stats: state.stats };
  }

  it(
    `rebuilds messages and parts equal to ListMessages over ${SOAK_ITERATIONS} disconnects, with no duplicate or missing seq`,
    async () => {
      const started = Date.now();
      const attempts = { count: 0 };
      const results: SessionSoak[] = [];
      await Promise.all(
        lanes.map(async (_, lane) => {
          // One generator per lane, so a lane's cut points replay from the seed.
          const rng = prng(SOAK_SEED + lane * 7919);
          for (let k = 0; attempts.count < SOAK_ITERATIONS; k++) results.push(await soakOne(lane, lane * 100_000 + k, rng, attempts));
        }),
      );
      const total = results.reduce(
        (sum, r) => {
          for (const k of Object.keys(sum) as Array<keyof typeof sum>) sum[k] += r.stats[k];
          return sum;
        },
        { applied: 0, overlapped: 0, skipped: 0, gaps: 0, unknownPart: 0, deltaAhead: 0, duplicates: 0, seqGaps: 0, unsynced: 0 },
      );
      // The cuts did land mid-stream: some re-attachments resumed deltas, some had to wait for a snapshot.
      expect(total.applied).toBeGreaterThan(0);
      expect(attempts.count).toBeGreaterThanOrEqual(SOAK_ITERATIONS);
      // No stream outlives its client: every cut subscription was released on the server.
      const ids = new Set(results.map((r) => r.sessionId));
      await waitFor(
        "the server to drop the cut streams' subscriptions",
        () => t.ledger.deps.bus.watchedSessions().every((id) => !ids.has(id)),
        5000,
        5,
      );
      process.stdout.write(
        `soak (seed ${SOAK_SEED}): ${attempts.count} attachments over ${results.length} sessions in ${Date.now() - started} ms; deltas ${JSON.stringify(total)}\n`,
      );
    },
    Math.max(60_000, SOAK_ITERATIONS * 60),
  );
});

describe("stale and ahead cursors", () => {
  it("after pruning, after_seq=0 is OUT_OF_RANGE CURSOR_EXPIRED (reload with ListMessages), after_seq=last_seq follows, beyond last is CURSOR_AHEAD", async () => {
    const sessionId = await newSession();
    await t.client.prompt({ sessionId, noReply: true, parts: [text("one")] });
    await t.client.prompt({ sessionId, noReply: true, parts: [text("two")] });
    const before = await bounds(sessionId);
    expect(await storedSeqs(sessionId)).toEqual(range(1, Number(before.lastSeq)));

    const deleted = await pruneEvents(t.ledger.deps.db, new Date(Date.now() + 1000));
    expect(deleted).toBeGreaterThanOrEqual(Number(before.lastSeq));
    expect(await storedSeqs(sessionId)).toEqual([]);
    const after = await bounds(sessionId);
    expect(after).toEqual({ lastSeq: before.lastSeq, prunedSeq: before.lastSeq });

    const expired = await failure(t.client.watchSession({ sessionId, afterSeq: 0n }));
    expect(expired.code).toBe(Code.OutOfRange);
    const info = expired.findDetails(ErrorInfoSchema)[0];
    expect(info).toMatchObject({
      reason: "CURSOR_EXPIRED",
      domain: "ledger.v1",
      metadata: {
        field: "after_seq",
        after_seq: "0",
        pruned_seq: String(after.prunedSeq),
        last_seq: String(after.lastSeq),
        action: "reload with ListMessages",
      },
    });
    expect(expired.rawMessage).toContain("ListMessages");
    // One below the pruned seq is expired too.
    const justBelow = await failure(t.client.watchSession({ sessionId, afterSeq: after.prunedSeq - 1n }));
    expect(justBelow.findDetails(ErrorInfoSchema)[0]?.reason).toBe("CURSOR_EXPIRED");

    // The reload the error asks for still works: messages are not events.
    expect((await listAll(sessionId)).map((m) => m.parts.map(textOf))).toEqual([["one"], ["two"]]);

    // Watching from last_seq works and receives the next prompt's events.
    const reader = tail(sessionId, after.lastSeq);
    const next = await t.client.prompt({ sessionId, noReply: true, parts: [text("three")] });
    const { lastSeq } = await bounds(sessionId);
    await reader.reach(lastSeq);
    await reader.stop();
    expect(reader.events.map((e) => Number(e.seq))).toEqual(range(Number(after.lastSeq) + 1, Number(lastSeq)));
    expect(reader.events.find((e) => e.kind.case === "prompted")?.kind.value).toMatchObject({
      messageId: messageId(next.message!.message),
    });

    const ahead = await failure(t.client.watchSession({ sessionId, afterSeq: lastSeq + 1n }));
    expect(ahead.code).toBe(Code.OutOfRange);
    expect(ahead.findDetails(ErrorInfoSchema)[0]).toMatchObject({
      reason: "CURSOR_AHEAD",
      metadata: { after_seq: String(lastSeq + 1n), last_seq: String(lastSeq) },
    });
    // A cursor past any log (up to uint64's largest) is the same CURSOR_AHEAD, not a failed query.
    for (const afterSeq of [2n ** 53n, 2n ** 63n, 2n ** 64n - 1n]) {
      const far = await failure(t.client.watchSession({ sessionId, afterSeq }));
      expect([far.code, far.findDetails(ErrorInfoSchema)[0]?.metadata.after_seq]).toEqual([Code.OutOfRange, String(afterSeq)]);
    }
  });
});

describe("cursor pruned during the replay", () => {
  // Postgres only: PGlite runs one statement at a time, so no lock can hold the replay alone.
  it.skipIf(TEST_ENGINE === "pglite")(
    "events pruned between WatchSession's cursor check and its replay end the stream with CURSOR_EXPIRED, not a silent gap",
    async () => {
      const db = t.ledger.deps.db;
      const sessionId = await newSession();
      await t.client.prompt({ sessionId, noReply: true, parts: [text("old")] });
      const before = await bounds(sessionId);
      expect(before.prunedSeq).toBe(0n);
      let watcher: EventCollector | undefined;
      await db.transaction().execute(async (trx) => {
        // Readers of session_event wait for this transaction; the cursor check (session row) does not.
        await sql`lock table session_event in access exclusive mode`.execute(trx);
        watcher = tail(sessionId, 0n);
        await lockWaiter("WatchSession's replay to wait on session_event", "%session_event%");
        // Retention runs now: the cursor (0) was valid when checked, and is not any more.
        await pruneEvents(trx, new Date(Date.now() + 1000));
      });
      // Something happens in the session; a follower at cursor 0 cannot get seq 1 any more.
      await t.client.prompt({ sessionId, noReply: true, parts: [text("new")] });
      const { lastSeq } = await bounds(sessionId);
      const w = watcher!;
      await waitFor("the watcher to end or catch up", () => w.failure() !== undefined || w.events.some((e) => e.seq >= lastSeq), 10_000, 5);
      await w.cancel();
      const failed = w.failure() === undefined ? undefined : ConnectError.from(w.failure());
      // Correct: no event after a gap, and the stream ends with OUT_OF_RANGE CURSOR_EXPIRED.
      expect({
        seqs: w.events.map((e) => Number(e.seq)),
        code: failed?.code,
        reason: failed?.findDetails(ErrorInfoSchema)[0]?.reason,
      }).toEqual({
        seqs: [],
        code: Code.OutOfRange,
        reason: "CURSOR_EXPIRED",
      });
    },
  );
});

describe("a PromptStream client that goes away early", () => {
  it("does not stop the run when it leaves before its prompt is stored (re-attaching with WatchSession gets the answer)", async () => {
    const db = t.ledger.deps.db;
    const sessionId = await newSession();
    spare.push({ kind: "stream", chunks: [{ text: "answered " }, { text: "anyway" }] });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    // Hold the session row so the server's storePrompt waits (slow drafts or a busy session do the same).
    const holder = db.transaction().execute(async (trx) => {
      await trx.selectFrom("session").select("id").where("id", "=", sessionId).forUpdate().execute();
      locked();
      await gate;
    });
    await isLocked;
    const call = collectEvents((signal) =>
      t.client.promptStream({ sessionId, model: { providerId: "spare", modelId: "m" }, parts: [text("are you there?")] }, { signal }),
    );
    // Wait until the request is at the server, blocked on the row (PGlite: everything waits for the holder).
    if (TEST_ENGINE === "postgres") {
      await lockWaiter("PromptStream's write to wait for the session row", "%for update%");
    } else {
      await sleep(300);
    }
    await call.stop();
    await sleep(50);
    release();
    await holder;
    expect(call.events).toEqual([]);

    // The prompt was stored; the client re-attaches as the contract says and waits for the answer.
    await waitFor("the prompt to be stored", async () => (await listAll(sessionId)).length >= 1, 10_000, 5);
    const reader = tail(sessionId, 0n);
    const answered = await waitFor(
      "the answer",
      async () =>
        reader.events.some((e) => e.kind.case === "messageUpdated" && assistantOf(e.kind.value.message)?.time?.completed !== undefined),
      3000,
      5,
    ).then(
      () => true,
      () => false,
    );
    await reader.stop();
    expect({ answered, modelCalls: spare.requests.length, messages: (await listAll(sessionId)).map((m) => m.message?.kind.case) }).toEqual({
      answered: true,
      modelCalls: 1,
      messages: ["user", "assistant"],
    });
  });
});

describe("PromptStream and WatchSession agree", () => {
  it("a PromptStream reader and a WatchSession started before the prompt see the same events (deltas included) in the same order", async () => {
    const sessionId = await newSession();
    await t.client.prompt({ sessionId, noReply: true, parts: [text("marker")] });
    const { lastSeq } = await bounds(sessionId);
    const watcher = tail(sessionId, lastSeq - 1n);
    // The watcher is subscribed once it has replayed the marker's last event.
    await watcher.reach(lastSeq);

    main.push(
      {
        kind: "stream",
        chunks: [
          { reasoning: "thinking " },
          { reasoning: "hard" },
          { toolCall: { id: "call_same", name: "read", arguments: JSON.stringify({ filePath: "notes.txt" }) } },
        ],
        delayMs: 5,
      },
      { kind: "stream", chunks: Array.from({ length: 30 }, (_, i) => ({ text: `tok${i}${i % 4 === 0 ? "🎉" : ""} ` })), delayMs: 8 },
    );
    const streamed: SessionEvent[] = [];
    for await (const res of t.client.promptStream({ sessionId, parts: [text("stream it")] })) streamed.push(res.event!);
    expect(streamed.at(-1) && isIdle(streamed.at(-1)!)).toBe(true);
    const finalSeq = streamed.at(-1)!.seq;
    await watcher.reach(finalSeq);
    await sleep(30);
    await watcher.stop();

    const first = streamed[0]!.seq;
    const watched = watcher.events.filter((e) => e.seq >= first && e.seq <= finalSeq);
    const json = (events: SessionEvent[]) => events.map((e) => toJson(SessionEventSchema, e));
    expect(streamed.filter((e) => e.kind.case === "partDelta").length).toBeGreaterThanOrEqual(30);
    expect(json(watched)).toEqual(json(streamed));

    // Read without a cut, every delta applies exactly at its offset, counted in code points.
    const state = new ClientState(first - 1n);
    for (const e of streamed) state.apply(e);
    const deltas = streamed.filter((e) => e.kind.case === "partDelta");
    expect(state.stats).toMatchObject({
      applied: deltas.length,
      gaps: 0,
      skipped: 0,
      overlapped: 0,
      unknownPart: 0,
      deltaAhead: 0,
      duplicates: 0,
      seqGaps: 0,
    });
    const offsets = new Map<string, number>();
    for (const e of deltas) {
      if (e.kind.case !== "partDelta") continue;
      const d = e.kind.value;
      expect(Number(d.offset)).toBe(offsets.get(d.partId) ?? 0);
      offsets.set(d.partId, (offsets.get(d.partId) ?? 0) + [...d.delta].length);
    }
    const server = await listAll(sessionId);
    expect(view(state.snapshot())).toEqual(view(serverView(server)).slice(1)); // the marker came before the stream
    // Nothing else arrived after the final idle.
    expect(watcher.events.filter((e) => e.seq > finalSeq)).toEqual([]);
  });
});

describe("ResumeSession", () => {
  // A trial, 2026-12-02: after an aborted Shell, ResumeSession had the model answer the Shell's
  // synthetic "The following tool was executed by the user", also past a later no_reply prompt.
  it("after an aborted Shell: NOTHING_TO_RESUME naming the Shell's message, no model call, nothing stored; also past a later no_reply prompt", async () => {
    const sessionId = await newSession();
    const shell = t.client.shell({ sessionId, agent: "build", command: "sleep 30" }).catch((e: unknown) => ConnectError.from(e));
    await waitFor("the Shell to hold the session", () => t.ledger.deps.replier!.isRunning(sessionId));
    expect((await t.client.abort({ sessionId })).aborted).toBe(true);
    await shell;
    await waitFor("the Shell to let go", () => !t.ledger.deps.replier!.isRunning(sessionId));
    const messages = await listAll(sessionId);
    expect(view(serverView(messages)).map((m) => [m.role, m.error])).toEqual([
      ["user", undefined],
      ["assistant", "aborted"],
    ]);
    const shellUser = messages[0]!.message!.kind.value!.id;
    const calls = main.requests.length;
    const expectNothingToResume = async () => {
      const error = await failure(t.client.resumeSession({ sessionId }));
      expect([error.code, error.rawMessage, error.findDetails(ErrorInfoSchema)[0]?.reason]).toEqual([
        Code.FailedPrecondition,
        `the last turn of session ${sessionId} is a Shell command (message ${shellUser}), which has no answer to resume; send a new prompt`,
        "NOTHING_TO_RESUME",
      ]);
    };
    await expectNothingToResume();
    await t.client.prompt({ sessionId, noReply: true, parts: [text("a note, no answer wanted")] });
    await expectNothingToResume();
    expect(main.requests.length).toBe(calls);
    expect((await listAll(sessionId)).map((m) => m.message!.kind.case)).toEqual(["user", "assistant", "user"]);
  });

  // A review, 2026-12-03: a prompt left without parts (deleted, or a Shell interrupted between
  // its two writes) was resumed: the model was asked to answer an empty message.
  it("of a prompt whose parts were deleted: NOTHING_TO_RESUME, no model call", async () => {
    const sessionId = await newSession();
    const before = main.requests.length;
    main.push({ kind: "stream", chunks: [{ text: "partial" }, { hang: true }] });
    const user = (await t.client.promptAsync({ sessionId, parts: [text("a question")] })).message!;
    await waitFor("the model to be asked", () => main.requests.length > before);
    await t.client.abort({ sessionId });
    await waitFor("the run to let go", () => !t.ledger.deps.replier!.isRunning(sessionId));
    await t.client.deletePart({ sessionId, messageId: idOf(user), partId: user.parts[0]!.id });
    const calls = main.requests.length;
    const error = await failure(t.client.resumeSession({ sessionId }));
    expect([error.code, error.rawMessage, error.findDetails(ErrorInfoSchema)[0]?.reason]).toEqual([
      Code.FailedPrecondition,
      `the last prompt of session ${sessionId} (message ${idOf(user)}) has no parts, so there is nothing to answer; send a new prompt`,
      "NOTHING_TO_RESUME",
    ]);
    expect(main.requests.length).toBe(calls);
  });

  it("after Abort, streams a new answer to the same user message and ends after idle; an answered session has NOTHING_TO_RESUME", async () => {
    const sessionId = await newSession();
    main.push({ kind: "stream", chunks: [{ text: "partial answer" }, { hang: true }] });
    const first: SessionEvent[] = [];
    let firstError: unknown;
    const firstDone = (async () => {
      try {
        for await (const res of t.client.promptStream({ sessionId, parts: [text("a long question")] })) first.push(res.event!);
      } catch (error) {
        firstError = error;
      }
    })();
    await waitFor("the answer to stream", () => first.some((e) => e.kind.case === "partDelta"), 10_000, 5);
    expect((await t.client.abort({ sessionId })).aborted).toBe(true);
    await firstDone;
    expect(firstError).toBeUndefined();
    expect(isIdle(first.at(-1)!)).toBe(true);

    const userId = first.flatMap((e) =>
      e.kind.case === "messageUpdated" && e.kind.value.message?.kind.case === "user" ? [messageId(e.kind.value.message)] : [],
    )[0]!;
    const { lastSeq } = await bounds(sessionId);
    main.push({ kind: "stream", chunks: [{ text: "the " }, { text: "resumed " }, { text: "answer" }], delayMs: 5 });
    const resumed: SessionEvent[] = [];
    for await (const res of t.client.resumeSession({ sessionId })) resumed.push(res.event!);
    expect(resumed.length).toBeGreaterThan(0);
    expect(resumed[0]!.seq).toBe(lastSeq + 1n);
    expect(isIdle(resumed.at(-1)!)).toBe(true);
    const stored = resumed.filter(isStored).map((e) => Number(e.seq));
    expect(stored).toEqual(range(Number(lastSeq) + 1, Number(lastSeq) + stored.length));
    const deltas = resumed.flatMap((e) => (e.kind.case === "partDelta" ? [e.kind.value.delta] : []));
    expect(deltas.join("")).toBe("the resumed answer");

    const messages = await listAll(sessionId);
    expect(view(serverView(messages)).map((m) => [m.role, m.completed, m.error, m.finish])).toEqual([
      ["user", undefined, undefined, undefined],
      ["assistant", true, "aborted", "error"],
      ["assistant", true, undefined, "stop"],
    ]);
    expect(messages.slice(1).map((m) => assistantOf(m.message)!.parentId)).toEqual([userId, userId]);
    expect(messages[1]!.parts.find((p) => p.kind.case === "text")?.kind.value).toMatchObject({ text: "partial answer" });
    expect(messages[2]!.parts.find((p) => p.kind.case === "text")?.kind.value).toMatchObject({ text: "the resumed answer" });
    // The resumed stream carried the new answer's completion.
    expect(
      resumed.some(
        (e) =>
          e.kind.case === "messageUpdated" &&
          messageId(e.kind.value.message) === messageId(messages[2]!.message) &&
          assistantOf(e.kind.value.message)?.time?.completed,
      ),
    ).toBe(true);

    const nothing = await failure(t.client.resumeSession({ sessionId }));
    expect(nothing.code).toBe(Code.FailedPrecondition);
    expect(nothing.findDetails(ErrorInfoSchema)[0]).toMatchObject({
      reason: "NOTHING_TO_RESUME",
      metadata: { session_id: sessionId, message_id: userId },
    });
    expect(await listAll(sessionId)).toHaveLength(3);
  });
});
