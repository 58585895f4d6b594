/**
 * Part (c) of the `relay` benchmark (bench/relay.ts): how many of the relay's messages each
 * replica receives when every replica serves only a third of the sessions.
 *
 * Three `ledger serve` children (A, B, C) on one database; `sessions` sessions, session i watched
 * (`WatchSession`, from its first event) on replica i mod 3 and prompted (an agent loop answering
 * with a scripted model: a local OpenAI-compatible server streaming text chunks) on replica
 * i+1 mod 3, so every answer crosses replicas. Every watcher is open for the whole run; at most
 * `concurrency` answers stream at once (each running loop holds a Postgres connection of its own
 * for its session lock, `src/agent/session-lock.ts`, and the shared server allows 100). A session
 * is done when its watcher sees the session go idle again.
 *
 * Counting, over the prompts only (counters read before and after):
 * - NATS: the bench's own `nats-server` with monitoring; `/connz` gives per connection
 *   (`bus.nats.name` = `ledger-<replica>`) `in_msgs` (published by the replica) and `out_msgs`
 *   (delivered to it). Produced = Σ in_msgs; received by a replica = its out_msgs.
 * - Postgres: every replica's relay LISTENs on the ledger's three channels and Postgres delivers
 *   every NOTIFY to every listener, so what a replica receives is every notification; a LISTEN
 *   connection of the bench on the same channels counts them. Produced = received = that count.
 */
import { setMaxListeners } from "node:events";
import type { Client } from "@connectrpc/connect";
import pg from "pg";
import type { SessionService } from "../gen/ledger/v1/service_pb.js";
import { CONTROL_CHANNEL, DELTAS_CHANNEL, EVENTS_CHANNEL } from "../src/events/pg-relay.js";
import { connectClient, elapsedMs, log, now, percentile, sleep } from "./common.js";

/** How a fan-out run counts the relay's messages. */
export type FanoutCounter =
  /** Postgres relay: a LISTEN connection on the ledger's channels at this URL. */
  | { kind: "pg"; url: string }
  /** NATS relay: the server's monitoring endpoint (`http://host:port`) and each replica's connection name, in replica order. */
  | { kind: "nats"; monitorUrl: string; names: string[] };

/** What a fan-out run measured. */
export interface FanoutResult {
  /** Relay messages published by all replicas during the prompts. */
  produced: number;
  /** Relay messages delivered to each replica (in replica order). */
  received: number[];
  /** Sessions answered (each watched on one replica, prompted on the next). */
  sessions: number;
  /** `part_delta` events the watchers received, all sessions together (live text crossing replicas). */
  deltas: number;
  /** Wall time of the prompts (ms), first prompt sent to last session idle. */
  ms: number;
  /** Median time (ms) from sending a session's Prompt to its watcher seeing it idle. */
  answerP50: number;
}

/**
 * Runs the fan-out described in the file's docstring on `urls` (the replicas, at least 2; the
 * bench uses 3), whose configured model must stream an answer to any prompt. `directory` is the
 * sessions' directory. Rejects when a session does not go idle within 60 s or a count cannot be
 * read.
 */
export async function measureFanout(options: {
  urls: string[];
  directory: string;
  sessions: number;
  concurrency: number;
  counter: FanoutCounter;
}): Promise<FanoutResult> {
  const clients = options.urls.map((url) => connectClient(url));
  const n = clients.length;
  const ids = await Promise.all(
    Array.from(
      { length: options.sessions },
      async (_, i) => (await clients[i % n]!.createSession({ directory: options.directory })).session!.id,
    ),
  );
  const controller = new AbortController();
  // One signal for every watcher: each stream adds a listener.
  setMaxListeners(0, controller.signal);
  let deltas = 0;
  const done = ids.map(() => deferred());
  const watching = ids.map((sessionId, i) =>
    watchUntilIdle(clients[i % n]!, sessionId, controller.signal, done[i]!.resolve, () => void deltas++),
  );
  const counter = await startCounter(options.counter, n);
  try {
    // Every watcher subscribed (on NATS: the server has the subscriptions) before the first prompt.
    await sleep(500);
    const before = await counter.read();
    log(`relay fan-out (${options.counter.kind}): ${ids.length} sessions, ${options.concurrency} answering at once`);
    const start = Date.now();
    let next = 0;
    const answers: number[] = [];
    const workers = Array.from({ length: Math.min(options.concurrency, ids.length) }, async () => {
      while (next < ids.length) {
        const i = next++;
        const sent = now();
        await clients[(i + 1) % n]!.prompt({ sessionId: ids[i]!, parts: [{ kind: { case: "text", value: { text: `answer ${i}` } } }] });
        await withTimeout(done[i]!.promise, 60_000, `session ${ids[i]} did not go idle`);
        answers.push(elapsedMs(sent));
      }
    });
    await Promise.all(workers);
    const ms = Date.now() - start;
    // Let the last messages land before reading the counters.
    await sleep(300);
    const after = await counter.read();
    return {
      produced: after.produced - before.produced,
      received: after.received.map((r, i) => r - before.received[i]!),
      sessions: ids.length,
      deltas,
      ms,
      answerP50: percentile(answers, 50),
    };
  } finally {
    controller.abort();
    await Promise.allSettled(watching);
    await counter.close();
  }
}

/** Follows `sessionId` on `client`; calls `idle` when the session goes idle after being busy. */
async function watchUntilIdle(
  client: Client<typeof SessionService>,
  sessionId: string,
  signal: AbortSignal,
  idle: () => void,
  delta: () => void,
): Promise<void> {
  let busy = false;
  try {
    for await (const res of client.watchSession({ sessionId, afterSeq: 0n }, { signal })) {
      const kind = res.event?.kind;
      if (kind?.case === "partDelta") delta();
      if (kind?.case !== "sessionStatus") continue;
      if (kind.value.status.case === "idle" && busy) idle();
      else if (kind.value.status.case !== "idle") busy = true;
    }
  } catch (error) {
    if (!signal.aborted) throw error;
  }
}

interface Counter {
  read(): Promise<{ produced: number; received: number[] }>;
  close(): Promise<void>;
}

async function startCounter(counter: FanoutCounter, replicas: number): Promise<Counter> {
  if (counter.kind === "nats") {
    return {
      async read() {
        const res = await fetch(`${counter.monitorUrl}/connz?limit=4096`);
        if (!res.ok) throw new Error(`nats-server /connz answered ${res.status}`);
        const { connections } = (await res.json()) as { connections: Array<{ name?: string; in_msgs: number; out_msgs: number }> };
        const of = (name: string) => connections.filter((c) => c.name === name);
        const missing = counter.names.filter((name) => of(name).length === 0);
        if (missing.length > 0) throw new Error(`no NATS connection named ${missing.join(", ")} in /connz`);
        const sum = (name: string, key: "in_msgs" | "out_msgs") => of(name).reduce((total, c) => total + c[key], 0);
        return {
          produced: counter.names.reduce((total, name) => total + sum(name, "in_msgs"), 0),
          received: counter.names.map((name) => sum(name, "out_msgs")),
        };
      },
      async close() {},
    };
  }
  const listener = new pg.Client({ connectionString: counter.url, application_name: "bench-fanout-count" });
  await listener.connect();
  let notifications = 0;
  listener.on("notification", () => void notifications++);
  for (const channel of [EVENTS_CHANNEL, DELTAS_CHANNEL, CONTROL_CHANNEL]) await listener.query(`listen ${channel}`);
  return {
    // Every replica's relay gets what this connection gets.
    read: async () => ({ produced: notifications, received: Array<number>(replicas).fill(notifications) }),
    close: () => listener.end(),
  };
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(message)), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
