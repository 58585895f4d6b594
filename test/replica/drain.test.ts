import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { startLedger, type RunningLedger } from "../../src/app.js";
import { buildConfig, configFileSchema } from "../../src/config/config.js";
import { readEventPage } from "../../src/storage/event-store.js";
import { TEST_ENGINE, type TestDatabase } from "../support/db.js";
import { watchAcross, type WatchSegment } from "../support/drain.js";
import { compatibleProvider } from "../support/mock-models.js";
import type { FakeOpenAI, ScriptedReply } from "../support/openai-server.js";
import { replicaLifecycle } from "../support/replica-fixture.js";
import { text } from "../support/prompt.js";
import { killReplicas, startReplicaPair, type ReplicaPair } from "../support/replica.js";
import { waitFor } from "../support/wait.js";

// Drain across replicas (docs/operations.md, "Running behind a load balancer"): a client watches
// a session through replica A; A drains; the client reconnects to B with the cursor from A's
// UNAVAILABLE error and gets every stored event exactly once, in order. In-process ledgers on one
// Postgres database (like compaction.test.ts), then once end to end with SIGTERM to a real
// `ledger serve`. Postgres only: PGlite serves one process.

const POSTGRES = TEST_ENGINE === "postgres";

let dir: string;
let database: TestDatabase;
let fake: FakeOpenAI;
const running = replicaLifecycle("ledger-drain-", POSTGRES, (shared) => void ({ dir, database, fake } = shared));

interface Replica {
  ledger: RunningLedger;
  client: Client<typeof SessionService>;
}

async function replica(): Promise<Replica> {
  const config = configFileSchema.parse({
    model: "fake/m",
    provider: { fake: compatibleProvider(fake.url, { m: {} }, "test") },
    retry: { attempts: 0 },
  });
  const started = await startLedger({ config: buildConfig(config, undefined, dir), database: database.target });
  running.push(started);
  return { ledger: started, client: createClient(SessionService, createGrpcTransport({ baseUrl: started.url })) };
}

/** The session's stored events, in seq order, read from the table. */
async function table(db: RunningLedger["database"]["db"], sessionId: string): Promise<SessionEvent[]> {
  return (await readEventPage(db, sessionId, 0, { rows: 10_000, bytes: 1 << 30 })).events;
}

/** The stored events of the segments (live part_delta events carry their snapshot's seq), in arrival order. */
function storedOf(segments: WatchSegment[]): SessionEvent[] {
  return segments.flatMap((s) => s.events.filter((e) => e.kind.case !== "partDelta"));
}

/** A reply streamed over `n × delayMs` ms: "w1 w2 … wn". */
function slowReply(n: number, delayMs: number): ScriptedReply {
  return { kind: "stream", chunks: Array.from({ length: n }, (_, i) => ({ text: i === 0 ? "w1" : ` w${i + 1}` })), delayMs };
}

const isIdle = (e: SessionEvent) => e.kind.case === "sessionStatus" && e.kind.value.status.case === "idle";

describe.skipIf(!POSTGRES)("drain across two replicas (in-process)", () => {
  it("a client watching a streaming answer through A reconnects to B with after_seq when A drains: every stored event exactly once, in order", async () => {
    const A = await replica();
    const B = await replica();
    const sessionId = (await B.client.createSession({ directory: dir })).session!.id;
    // The loop runs on B (the prompt went there); A only relays the session to its watcher.
    fake.push(slowReply(30, 60));
    let closing: Promise<void> | undefined;
    let drainedAt = 0n;
    const watching = watchAcross([A.client, B.client], sessionId, isIdle, {
      onEvent: (e, segment) => {
        // Mid-answer: A drains (as on SIGTERM) with a long grace period.
        if (segment.replica === 0 && e.kind.case === "partDelta" && !closing) {
          drainedAt = e.seq;
          closing = A.ledger.close(20_000);
        }
      },
    });
    await waitFor("the watch through A", () => A.ledger.deps.bus.watchedSessions().includes(sessionId));
    await B.client.promptAsync({ sessionId, parts: [text("stream a long answer")] });
    const segments = await watching;
    const started = Date.now();
    await closing;
    // A has nothing running: its close does not wait out the 20 s (a hang bound).
    expect(Date.now() - started).toBeLessThan(10_000);

    const rows = await table(B.ledger.database.db, sessionId);
    expect(rows.map((e) => e.seq)).toEqual(rows.map((_, i) => BigInt(i + 1)));
    // Two streams: A's ended mid-answer with its cursor; B's went on from it.
    expect(segments.map((s) => s.replica)).toEqual([0, 1]);
    const [first, second] = segments as [WatchSegment, WatchSegment];
    expect(drainedAt).toBeGreaterThan(0n);
    const firstStored = first.events.filter((e) => e.kind.case !== "partDelta");
    expect(second.afterSeq).toBe(firstStored.at(-1)!.seq);
    expect(second.afterSeq).toBeLessThan(rows.at(-1)!.seq);
    expect(first.events.some(isIdle)).toBe(false);
    // Every stored event exactly once, in order, equal to the table.
    expect(storedOf(segments).map((e) => e.seq)).toEqual(rows.map((e) => e.seq));
    expect(storedOf(segments)).toEqual(rows);
    const answer = rows.flatMap((e) =>
      e.kind.case === "partUpdated" && e.kind.value.part?.kind.case === "text" ? [e.kind.value.part.kind.value.text] : [],
    );
    expect(answer.at(-1)).toBe(Array.from({ length: 30 }, (_, i) => `w${i + 1}`).join(" "));
  }, 60_000);

  it("a loop on A still running when A's grace period ends is handed over: its answer ends interrupted, the lock is free, ResumeSession on B completes it; the watcher misses nothing", async () => {
    const A = await replica();
    const B = await replica();
    const sessionId = (await A.client.createSession({ directory: dir })).session!.id;
    const requests = fake.requests.length;
    fake.push(
      { kind: "stream", chunks: [{ text: "partial" }, { hang: true }] },
      { kind: "stream", chunks: [{ text: "resumed " }, { text: "answer" }] },
    );
    let closing: Promise<void> | undefined;
    const watching = watchAcross([A.client, B.client], sessionId, isIdle, {
      onEvent: (e, segment) => {
        if (segment.replica === 0 && e.kind.case === "partDelta" && !closing) closing = A.ledger.close(500);
      },
    });
    await waitFor("the watch through A", () => A.ledger.deps.bus.watchedSessions().includes(sessionId));
    await A.client.promptAsync({ sessionId, parts: [text("hang on A")] });
    // B's stream ends at the idle A wrote when it handed the loop over.
    const segments = await watching;
    await closing;
    expect(fake.requests[requests]!.end).toBe("aborted");
    const interrupted = storedOf(segments).flatMap((e) =>
      e.kind.case === "messageUpdated" && e.kind.value.message?.kind.case === "assistant" ? [e.kind.value.message.kind.value] : [],
    );
    // Written by A as it handed the loop over (recovery's would say "the process running this answer stopped").
    expect(interrupted.at(-1)?.error).toMatchObject({
      message: "Interrupted: the server running this answer shut down; ResumeSession continues it",
      kind: { case: "interrupted" },
    });
    expect(storedOf(segments).at(-1)).toMatchObject({ kind: { case: "sessionStatus", value: { status: { case: "idle" } } } });

    // ResumeSession on B takes the session (the lock A released) and answers.
    const resumed: SessionEvent[] = [];
    for await (const res of B.client.resumeSession({ sessionId })) resumed.push(res.event!);
    const rows = await table(B.ledger.database.db, sessionId);
    const all = [...storedOf(segments), ...resumed.filter((e) => e.kind.case !== "partDelta")];
    expect(all.map((e) => e.seq)).toEqual(rows.map((_, i) => BigInt(i + 1)));
    expect(all).toEqual(rows);
    const last = rows.flatMap((e) =>
      e.kind.case === "messageUpdated" && e.kind.value.message?.kind.case === "assistant" ? [e.kind.value.message.kind.value] : [],
    );
    expect(last.at(-1)?.error).toBeUndefined();
    expect(last.at(-1)?.time?.completed).toBeDefined();
    const texts = rows.flatMap((e) =>
      e.kind.case === "partUpdated" && e.kind.value.part?.kind.case === "text" ? [e.kind.value.part.kind.value.text] : [],
    );
    expect(texts.at(-1)).toBe("resumed answer");
  }, 60_000);
});

describe.skipIf(!POSTGRES)("drain while another replica runs the session", () => {
  it("a run on A waiting for the lock B holds does not hold A's shutdown; B's loop goes on", async () => {
    const A = await replica();
    const B = await replica();
    const sessionId = (await B.client.createSession({ directory: dir })).session!.id;
    const requests = fake.requests.length;
    fake.push({ kind: "stream", chunks: [{ text: "working" }, { hang: true }] });
    await B.client.promptAsync({ sessionId, parts: [text("first, on B")] });
    await waitFor("B's model request", () => fake.requests.length > requests);
    // Stored on A; A's run waits for the session lock B holds.
    await A.client.promptAsync({ sessionId, parts: [text("second, on A")] });
    await waitFor("A's run", () => A.ledger.deps.replier!.isRunning(sessionId));
    expect(A.ledger.deps.replier!.activeRuns()).toBe(0);
    expect(B.ledger.deps.replier!.activeRuns()).toBe(1);

    const started = Date.now();
    await A.ledger.close(20_000);
    // A hang bound: were the waiting run counted, A would wait out its 20 s grace period.
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(A.ledger.deps.replier!.isRunning(sessionId)).toBe(false);
    // B's loop was not touched.
    expect(fake.requests[requests]!.end).toBeUndefined();
    expect(B.ledger.deps.replier!.isRunning(sessionId)).toBe(true);
    expect((await B.client.abort({ sessionId })).aborted).toBe(true);
    await waitFor("B's model request to end", () => fake.requests[requests]!.end === "aborted");
  }, 60_000);
});

describe.skipIf(!POSTGRES)("drain across two replicas: SIGTERM to a real ledger serve", () => {
  let pair: ReplicaPair;
  beforeAll(async () => {
    pair = await startReplicaPair({ prefix: "ledger-drain-serve-", timeoutMs: 60_000 });
  }, 150_000);
  afterAll(async () => {
    await killReplicas();
    await pair?.close();
  });

  it("SIGTERM to A while a client watches through A: A exits 0 well within its grace period, the client reconnects to B with its cursor and misses nothing", async () => {
    const { A, B } = pair;
    const model = await pair.freshModel();
    const sessionId = (await B.grpc.createSession({ directory: pair.dir })).session!.id;
    model.push(slowReply(30, 60));
    let stopping: ReturnType<typeof A.stop> | undefined;
    let sawFirst!: () => void;
    const first = new Promise<void>((resolve) => (sawFirst = resolve));
    const watching = watchAcross([A.grpc, B.grpc], sessionId, isIdle, {
      onEvent: (e, segment) => {
        if (segment.replica === 0 && e.seq === 1n) sawFirst();
        if (segment.replica === 0 && e.kind.case === "partDelta" && !stopping) stopping = A.stop(20_000);
      },
    });
    await first;
    await B.grpc.promptAsync({ sessionId, parts: [text("stream a long answer")] });
    const segments = await watching;
    const exit = await stopping!;
    expect({ code: exit.code, forced: exit.forced }).toEqual({ code: 0, forced: false });
    expect(A.stderr()).toContain(
      "SIGTERM: draining: health answers NOT_SERVING, new requests get UNAVAILABLE, open streams end with UNAVAILABLE and their cursor (reconnect to another replica); finishing in-flight requests and agent loops for up to 10000 ms",
    );
    const drained = /SIGTERM: drained in (\d+) ms; database closed/.exec(A.stderr());
    expect(drained).not.toBeNull();
    expect(Number(drained![1])).toBeLessThan(5000);

    const { rows } = await pair.sql.query<{ seq: string }>("select seq from session_event where session_id = $1 order by seq", [sessionId]);
    const seqs = rows.map((r) => BigInt(r.seq));
    expect(seqs).toEqual(seqs.map((_, i) => BigInt(i + 1)));
    expect(segments.map((s) => s.replica)).toEqual([0, 1]);
    expect(segments[1]!.afterSeq).toBeLessThan(seqs.at(-1)!);
    expect(storedOf(segments).map((e) => e.seq)).toEqual(seqs);
  }, 90_000);
});
