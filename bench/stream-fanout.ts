/**
 * Streamed part updates per second delivered to 1 and to 16 `WatchSession` subscribers, vs a
 * bare Connect server streaming the very same `WatchSessionResponse` messages (the ones a
 * subscriber received in a capture run) to the same number of subscribers over the same
 * transport. Rate = part events (part_delta + part_updated) received by all subscribers /
 * (last one received − first message of the run received), so a stalled stream that catches up
 * in a burst is not mistaken for a fast one.
 *
 * Two producers of the updates:
 * - "agent loop": the loop answers a prompt; a scripted model streams text deltas as fast as the
 *   AI SDK and the loop's processor take them (snapshots stored every 100 ms, as in production);
 * - "ledger stream path": the bench plays the processor's part with the ledger's own
 *   `sessionLedger` (the part stored, deltas published on the session's bus and relay, a snapshot
 *   every 100 ms, the final part, idle), without the AI SDK: what the streaming path itself
 *   (bus → followSession → WatchSession → Connect) sustains.
 */
import type { LanguageModelV3StreamPart } from "@ai-sdk/provider";
import type { Client } from "@connectrpc/connect";
import { MockLanguageModelV3 } from "ai/test";
import type { SessionEvent } from "../gen/ledger/v1/event_pb.js";
import { SessionService } from "../gen/ledger/v1/service_pb.js";
import { create } from "@bufbuild/protobuf";
import { PartSchema } from "../gen/ledger/v1/part_pb.js";
import { newId } from "../src/ids.js";
import { sessionLedger } from "../src/ledger/session-ledger.js";
import { mockResolver, usage } from "../test/support/mock-models.js";
import {
  atLeast,
  connectClient,
  createBenchDatabase,
  log,
  median,
  now,
  row,
  scaled,
  sleep,
  startBareConnect,
  tempDir,
  type Row,
} from "./common.js";
import { lastSeq, startBenchLedger } from "./ledger.js";

const SUBSCRIBERS = [1, 16];
const SETTLE_MS = 150;

/** Producers and the paced baseline go back to the event loop after this many messages. */
const BATCH = 16;

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * A model whose every call streams `deltas` text deltas, then finishes with `stop`. Like a
 * provider read from a socket, it hands over BATCH chunks per event-loop turn (a stream whose
 * chunks are all ready at once would let the whole answer run in one turn, in microtasks,
 * which no live model does).
 */
function streamingModel(deltas: () => number): MockLanguageModelV3 {
  return new MockLanguageModelV3({
    provider: "mock",
    modelId: "model",
    doStream: async () => {
      const count = deltas();
      let next = 0;
      return {
        stream: new ReadableStream<LanguageModelV3StreamPart>({
          start(controller) {
            controller.enqueue({ type: "stream-start", warnings: [] });
            controller.enqueue({ type: "text-start", id: "t" });
          },
          async pull(controller) {
            await yieldToEventLoop();
            // Same delta texts as the ledger-stream-path producer.
            for (let k = 0; k < BATCH && next < count; k++, next++)
              controller.enqueue({ type: "text-delta", id: "t", delta: deltaText(next) });
            if (next < count) return;
            controller.enqueue({ type: "text-end", id: "t" });
            controller.enqueue({ type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: usage(10, count) });
            controller.close();
          },
        }),
      };
    },
  });
}

const deltaText = (i: number) => `tok${i % 97} `;

const isPartUpdate = (event: SessionEvent) => event.kind.case === "partDelta" || event.kind.case === "partUpdated";
const isIdle = (event: SessionEvent) => event.kind.case === "sessionStatus" && event.kind.value.status.case === "idle";

interface Watcher {
  /** Resolves when the first (replayed or hello) message arrived: the stream is live. */
  attached: Promise<void>;
  /** Resolves after the idle status that ends the run. */
  done: Promise<void>;
  /** `start`: when the first message after attaching arrived (the run began); `last`: the last part update. */
  tally: { parts: number; start?: bigint; last?: bigint; events: SessionEvent[] };
  stop(): void;
}

/** A subscriber: skips the first message (attachment proof), counts part updates until idle. */
function watch(client: Client<typeof SessionService>, sessionId: string, afterSeq: bigint, capture: boolean): Watcher {
  const controller = new AbortController();
  const tally: Watcher["tally"] = { parts: 0, events: [] };
  let attach!: () => void;
  const attached = new Promise<void>((resolve) => (attach = resolve));
  const done = (async () => {
    let first = true;
    try {
      for await (const res of client.watchSession({ sessionId, afterSeq }, { signal: controller.signal })) {
        if (first) {
          first = false;
          attach();
          continue;
        }
        const event = res.event!;
        const t = now();
        tally.start ??= t;
        if (capture) tally.events.push(event);
        if (isPartUpdate(event)) {
          tally.last = t;
          tally.parts++;
        }
        if (isIdle(event)) return;
      }
      throw new Error("the stream ended before the run's idle status");
    } catch (error) {
      if (!controller.signal.aborted) throw error;
    }
  })();
  done.catch(() => attach());
  return { attached, done, tally, stop: () => controller.abort() };
}

/**
 * Part updates per second over all watchers, from the first message of the run any watcher got
 * (for the loop: its `busy` status) to the last part update any watcher got.
 */
function rate(watchers: Watcher[]): number {
  const parts = watchers.reduce((sum, w) => sum + w.tally.parts, 0);
  const first = watchers.map((w) => w.tally.start!).reduce((a, b) => (b < a ? b : a));
  const last = watchers.map((w) => w.tally.last!).reduce((a, b) => (b > a ? b : a));
  return parts / (Number(last - first) / 1e9);
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export async function streamFanout(): Promise<Row[]> {
  const deltas = scaled(2000, 200);
  const runs = scaled(5, 1);
  const database = await createBenchDatabase("fanout");
  const work = await tempDir("fanout");
  const ledger = await startBenchLedger({ kind: "postgres", url: database.url }, work.dir, {
    config: { model: "mock/model" },
    models: mockResolver({ "mock/model": streamingModel(() => deltas) }),
  });
  const client = connectClient(ledger.url);

  // The baseline server: one hello message, then (once released) the captured messages.
  let captured: SessionEvent[] = [];
  let release: () => void = () => {};
  let go = Promise.resolve();
  let paced = false;
  const hello = { sessionId: "ses_bench", seq: 1n };
  const bare = await startBareConnect((router) =>
    router.service(SessionService, {
      async *watchSession() {
        yield { event: hello };
        await go;
        let sent = 0;
        for (const event of captured) {
          yield { event };
          // Paced like the live producers: back to the event loop every BATCH messages.
          if (paced && ++sent % BATCH === 0) await yieldToEventLoop();
        }
      },
    }),
  );
  const bareClient = connectClient(bare.url);

  type Producer = "loop" | "path";
  /**
   * The ledger's part of the stream path, as the loop's processor drives it: the text part
   * stored, one live delta per token, a snapshot at most every 100 ms, the final part, idle.
   * Yields to the event loop every BATCH deltas, like the scripted model.
   */
  const produce = async (sessionId: string, messageId: string) => {
    const ledgerWrites = sessionLedger(ledger.deps, sessionId);
    const part = create(PartSchema, { id: newId("prt"), sessionId, messageId, kind: { case: "text", value: { text: "" } } });
    const text = () => (part.kind.case === "text" ? part.kind.value : undefined)!;
    let seq = (await ledgerWrites.savePart(part)).seq;
    let storedAt = Date.now();
    let offset = 0n;
    for (let i = 0; i < deltas; i++) {
      const delta = deltaText(i);
      text().text += delta;
      ledgerWrites.publishDelta({ messageId, partId: part.id, field: "text", delta, seq, offset });
      offset += BigInt(delta.length);
      if (Date.now() - storedAt >= 100) {
        seq = (await ledgerWrites.savePart(part)).seq;
        storedAt = Date.now();
      }
      if (i % BATCH === BATCH - 1) await yieldToEventLoop();
    }
    await ledgerWrites.savePart(part);
    await ledgerWrites.setStatus({ case: "idle", value: {} });
  };

  /** One ledger run: `count` watchers on a fresh session, then the producer. */
  const oursRun = async (producer: Producer, count: number, capture = false): Promise<Watcher[]> => {
    const sessionId = (await client.createSession({ directory: work.dir })).session!.id;
    const warm = await client.prompt({ sessionId, noReply: true, parts: [{ kind: { case: "text", value: { text: "warm" } } }] });
    const after = BigInt((await lastSeq(ledger.deps.db, sessionId)) - 1);
    const watchers = Array.from({ length: count }, () => watch(client, sessionId, after, capture));
    try {
      await withTimeout(Promise.all(watchers.map((w) => w.attached)), 30_000, "watchers attaching");
      if (producer === "loop")
        await client.promptAsync({ sessionId, parts: [{ kind: { case: "text", value: { text: "stream please" } } }] });
      else await produce(sessionId, warm.message!.message!.kind.value!.id);
      await withTimeout(Promise.all(watchers.map((w) => w.done)), 120_000, "the streamed answer");
    } finally {
      for (const w of watchers) w.stop();
    }
    return watchers;
  };
  const bareRun = async (count: number, pacing = false): Promise<Watcher[]> => {
    paced = pacing;
    go = new Promise<void>((resolve) => (release = resolve));
    const watchers = Array.from({ length: count }, () => watch(bareClient, "ses_bench", 0n, false));
    try {
      await withTimeout(Promise.all(watchers.map((w) => w.attached)), 30_000, "bare watchers attaching");
      release();
      await withTimeout(Promise.all(watchers.map((w) => w.done)), 120_000, "the bare stream");
    } finally {
      for (const w of watchers) w.stop();
    }
    return watchers;
  };

  const rows: Row[] = [];
  try {
    for (const producer of ["loop", "path"] as const) {
      log(`stream fan-out (${producer === "loop" ? "agent loop" : "ledger stream path"}): capture run (${deltas} deltas)`);
      const [first] = await oursRun(producer, 1, true);
      captured = first!.tally.events;
      await bareRun(1);
      const parts = captured.filter(isPartUpdate).length;
      for (const count of SUBSCRIBERS) {
        log(`stream fan-out: ${count} subscriber(s), ${runs} run(s) each`);
        const ours: number[] = [];
        const base: number[] = [];
        const unpaced: number[] = [];
        for (let i = 0; i < runs; i++) {
          // A pause before each run lets the previous one's background work (the loop's last
          // writes, relay flushes) finish, so it does not slow the next run of the other kind.
          await sleep(SETTLE_MS);
          ours.push(rate(await oursRun(producer, count)));
          await sleep(SETTLE_MS);
          base.push(rate(await bareRun(count, true)));
          await sleep(SETTLE_MS);
          unpaced.push(rate(await bareRun(count)));
        }
        const what =
          producer === "loop"
            ? `agent loop: a scripted model streams ${deltas} text deltas, ${BATCH} per event-loop turn, through the AI SDK and the loop's processor`
            : `ledger stream path: the bench drives sessionLedger like the loop's processor (${deltas} deltas on the bus and relay, ${BATCH} per event-loop turn, a snapshot every 100 ms), no AI SDK`;
        rows.push(
          row(
            `streamed part updates/s to ${count} subscriber${count === 1 ? "" : "s"}, ${producer === "loop" ? "agent loop" : "ledger stream path"}`,
            median(ours),
            median(base),
            "updates/s",
            atLeast(0.65),
            `ours: in-process ledger on Postgres, subscribers on WatchSession; ${what}; ~${parts} part updates per subscriber per run (part_delta + part_updated); ` +
              `baseline: a bare Connect server streams the same WatchSessionResponse messages to the same number of subscribers, paced like the producers (${BATCH} per event-loop turn); ` +
              `median of ${runs} run(s), rates summed over subscribers, from the run's first message to its last part update; ` +
              `the bare stream with every message ready at once (batched socket writes) reaches ${median(unpaced).toFixed(0)} updates/s (ours ÷ that = ${(median(ours) / median(unpaced)).toFixed(2)}×)`,
          ),
        );
      }
    }
  } finally {
    await bare.close();
    await ledger.close(1000);
    await database.drop();
    await work.remove();
  }
  return rows;
}
