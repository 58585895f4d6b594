// Stream buffer caps (issue 17, item 4): a WatchSession or PromptStream whose client stops
// reading is held back by HTTP/2 flow control; the live events then wait in its subscription,
// and once they pass `limits.watch_buffer_events` or `limits.watch_buffer_bytes` the server drops
// them and ends the stream with RESOURCE_EXHAUSTED (WATCHER_TOO_SLOW) naming the last seq it
// delivered. The client gets every event up to that seq, then the error; WatchSession from
// `after_seq = last_seq` returns exactly the rest of the log, without a gap. A real server, a
// real gRPC client over HTTP/2 (connect-node), a scripted model for the PromptStream's run.
import { randomBytes } from "node:crypto";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { LanguageModelV3StreamPart } from "@ai-sdk/provider";
import { MockLanguageModelV3 } from "ai/test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { DEFAULT_LIMITS } from "../../src/config/limits.js";
import { SNAPSHOT_INTERVAL_MS } from "../../src/agent/processor.js";
import { mockResolver, usage } from "../support/mock-models.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { lastSeq, storedEvents } from "../support/stored.js";
import { waitFor } from "../support/wait.js";

let t: TestLedger;
/** A gRPC client over HTTP/2: flow control holds the server back when it stops reading. */
let grpc: Client<typeof SessionService>;
/** What the scripted model streams on its next call, after its first delta and the test's go. */
let script: { deltas: string[]; go: Promise<void>; pauseBeforeLastMs?: number } = { deltas: [], go: Promise.resolve() };

beforeAll(async () => {
  const model = new MockLanguageModelV3({
    provider: "mock",
    modelId: "model",
    doStream: async () => {
      const { deltas, go, pauseBeforeLastMs } = script;
      const stream = new ReadableStream<LanguageModelV3StreamPart>({
        async start(controller) {
          controller.enqueue({ type: "stream-start", warnings: [] });
          controller.enqueue({ type: "text-start", id: "t" });
          controller.enqueue({ type: "text-delta", id: "t", delta: "first " });
          await go;
          for (const [i, delta] of deltas.entries()) {
            if (i === deltas.length - 1 && pauseBeforeLastMs) await new Promise((resolve) => setTimeout(resolve, pauseBeforeLastMs));
            controller.enqueue({ type: "text-delta", id: "t", delta });
          }
          controller.enqueue({ type: "text-end", id: "t" });
          controller.enqueue({ type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: usage(1, 1) });
          controller.close();
        },
      });
      return { stream };
    },
  });
  t = await startTestLedger({ model: "mock/model" }, { models: mockResolver({ "mock/model": model }) });
  grpc = createClient(SessionService, createGrpcTransport({ baseUrl: t.ledger.url }));
});
afterAll(async () => t?.close());

/** Sets the caps the next streams get (the limits are read when a stream starts). */
function caps(events: number, bytes: number): void {
  t.ledger.deps.config.limits.watch_buffer_events = events;
  t.ledger.deps.config.limits.watch_buffer_bytes = bytes;
}

/** Random text (incompressible, should the transport compress) of `chars` characters. */
const noise = (chars: number) =>
  randomBytes(Math.ceil(chars / 2))
    .toString("hex")
    .slice(0, chars);

/** A server stream read on demand: `readUntil` reads some, then nothing is read until `readRest`. */
function onDemand(stream: AsyncIterable<{ event?: SessionEvent }>) {
  const iterator = stream[Symbol.asyncIterator]();
  const events: SessionEvent[] = [];
  return {
    events,
    async readUntil(done: (event: SessionEvent) => boolean): Promise<void> {
      for (;;) {
        const next = await iterator.next();
        if (next.done) throw new Error(`the stream ended after seq ${events.at(-1)?.seq}`);
        events.push(next.value.event!);
        if (done(next.value.event!)) return;
      }
    },
    /** Reads to the end; returns the error the stream ended with (undefined: it ended normally). */
    async readRest(): Promise<ConnectError | undefined> {
      try {
        for (let next = await iterator.next(); !next.done; next = await iterator.next()) events.push(next.value.event!);
        return undefined;
      } catch (error) {
        return ConnectError.from(error);
      }
    },
  };
}

/** Asserts `error` is the cap's RESOURCE_EXHAUSTED; returns its `last_seq`. */
function tooSlow(error: ConnectError | undefined, limit: string, max: number, extra: Record<string, string> = {}): bigint {
  expect(error?.code).toBe(Code.ResourceExhausted);
  const info = error!.findDetails(ErrorInfoSchema)[0];
  expect(info?.reason).toBe("WATCHER_TOO_SLOW");
  expect(info?.metadata).toMatchObject({ limit, max: String(max), ...extra });
  expect(error!.rawMessage).toContain(`after_seq=${info!.metadata.last_seq}`);
  return BigInt(info!.metadata.last_seq!);
}

/** The seqs of the stored (not delta) events among `events`. */
const storedSeqs = (events: SessionEvent[]) => events.filter((e) => e.kind.case !== "partDelta").map((e) => Number(e.seq));
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** WatchSession from `afterSeq` until the event with seq `until`: the seqs received. */
async function resume(sessionId: string, afterSeq: bigint, until: number): Promise<number[]> {
  const watch = onDemand(grpc.watchSession({ sessionId, afterSeq }, { signal: AbortSignal.timeout(30_000) }));
  if (afterSeq < BigInt(until)) await watch.readUntil((e) => e.seq >= BigInt(until) && e.kind.case !== "partDelta");
  return storedSeqs(watch.events);
}

describe.each([
  { limit: "watch_buffer_events", events: 40, bytes: DEFAULT_LIMITS.watch_buffer_bytes, prompts: 24, deltas: Array(4000).fill("") },
  { limit: "watch_buffer_bytes", events: DEFAULT_LIMITS.watch_buffer_events, bytes: 300_000, prompts: 16, deltas: Array(300).fill("") },
])("a stream whose client stops reading, past $limit", ({ limit, events, bytes, prompts, deltas }) => {
  const max = limit === "watch_buffer_events" ? events : bytes;
  // Small deltas for the event cap (many events, few bytes), large ones for the byte cap.
  const deltaChars = limit === "watch_buffer_events" ? 64 : 4096;

  it("WatchSession ends with RESOURCE_EXHAUSTED naming the last seq delivered; after_seq resumes without a gap", async () => {
    caps(events, bytes);
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    await t.client.prompt({ sessionId, noReply: true, parts: [text("before the watch")] });
    const start = await lastSeq(t.ledger.deps.db, sessionId);
    const watch = onDemand(grpc.watchSession({ sessionId, afterSeq: 0n }, { signal: AbortSignal.timeout(60_000) }));
    await watch.readUntil((e) => e.seq === BigInt(start));
    // The client reads nothing now: a few prompts fill the HTTP/2 window, the rest wait in the subscription.
    for (let i = 0; i < prompts; i++) await t.client.prompt({ sessionId, noReply: true, parts: [text(noise(50_000))] });
    const final = await lastSeq(t.ledger.deps.db, sessionId);

    const error = await watch.readRest();
    const last = tooSlow(error, limit, max, { session_id: sessionId });
    expect(Number(last)).toBeLessThan(final);
    expect(storedSeqs(watch.events)).toEqual(range(1, Number(last)));
    expect(await resume(sessionId, last, final)).toEqual(range(Number(last) + 1, final));
  });

  it("PromptStream ends the same way while the run goes on; after_seq resumes without a gap", async () => {
    caps(events, bytes);
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    let go!: () => void;
    // The pause before the last delta makes the loop store a snapshot holding the whole text
    // before the final one (as a slow loop does by itself).
    script = {
      deltas: deltas.map(() => noise(deltaChars)),
      go: new Promise<void>((resolve) => (go = resolve)),
      pauseBeforeLastMs: SNAPSHOT_INTERVAL_MS + 50,
    };
    const stream = onDemand(
      grpc.promptStream({ sessionId, parts: [text("stream a long answer")] }, { signal: AbortSignal.timeout(60_000) }),
    );
    // The answer's text part (stored at its start) comes from the feed, which is subscribed by then;
    // the model waits for the go. Then the client reads nothing.
    let prompted = false;
    await stream.readUntil((e) => {
      if (e.kind.case === "prompted") prompted = true;
      return prompted && e.kind.case === "partUpdated" && e.kind.value.part?.kind.case === "text";
    });
    go();
    const idle = async () => {
      const stored = await storedEvents(t.ledger.deps.db, sessionId, { kind: "session_status" });
      return stored.length > 1 && (stored.at(-1)?.data as { sessionStatus?: { idle?: unknown } }).sessionStatus?.idle !== undefined;
    };
    await waitFor("the run to end", idle, 60_000);
    const final = await lastSeq(t.ledger.deps.db, sessionId);
    const error = await stream.readRest();

    const user = stream.events.find((e) => e.kind.case === "messageUpdated")!;
    const messageId = user.kind.case === "messageUpdated" ? user.kind.value.message!.kind.value!.id : "";
    const last = tooSlow(error, limit, max, { session_id: sessionId, message_id: messageId });
    expect(Number(last)).toBeLessThan(final);
    const first = Number(stream.events[0]!.seq);
    expect(storedSeqs(stream.events)).toEqual(range(first, Number(last)));
    expect(stream.events.every((e) => e.seq <= last)).toBe(true);
    expect(await resume(sessionId, last, final)).toEqual(range(Number(last) + 1, final));
    // Nothing was lost: the answer is stored whole, once finished (a snapshot taken after the last
    // delta, when the loop is slow, also holds the whole text but has no end time).
    type Stored = { partUpdated?: { part?: { text?: { text?: string; time?: { end?: unknown } } } } };
    const texts = (await storedEvents(t.ledger.deps.db, sessionId, { kind: "part_updated" })).map(
      (e) => (e.data as Stored).partUpdated?.part?.text,
    );
    const whole = texts.filter((part) => part?.text === `first ${script.deltas.join("")}`);
    expect(whole.filter((part) => part?.time?.end !== undefined)).toHaveLength(1);
    expect(whole.at(-1)?.time?.end).toBeDefined();
  });
});
