/**
 * Commit → visible on a `WatchSession` stream of another replica: two real `ledger serve`
 * children (A and B) on one Postgres database; a client prompts (noReply) on A while another
 * watches the session on B. Vs a bare `pg_notify` → `LISTEN` round trip on the same server.
 *
 * The commit instant inside A is not observable from outside, so the bench LISTENs on the
 * ledger's own hint channel: Postgres signals every listener when A's transaction commits, B's
 * relay and this connection alike. Per prompt:
 *   after = event on B's stream − hint seen here          (what the ledger adds after the commit)
 *   ours  = after + the bare pg_notify → LISTEN round trip measured in the same round
 * (the round trip stands in for "A sends COMMIT … the notification is delivered", which the
 * ledger pays like any other Postgres client).
 *
 * The measuring loop (`measureVisibility`) takes the hints and the bare round trip from a
 * `VisibilityTap`: `pgTap` here; bench/relay.ts adds one for the NATS relay.
 */
import type { Client } from "@connectrpc/connect";
import pg from "pg";
import type { SessionService } from "../gen/ledger/v1/service_pb.js";
import { startReplica, type Replica } from "../test/support/replica.js";
import {
  atMost,
  connectClient,
  createBenchDatabase,
  elapsedMs,
  log,
  noReplyPrompt,
  now,
  percentile,
  percentileRows,
  scaled,
  sleep,
  tempDir,
  type Row,
} from "./common.js";

/** Arrival times (monotonic ns) by key; `wait` resolves once a key has arrived. */
export class Arrivals {
  readonly times = new Map<string, bigint>();
  #waiters = new Map<string, () => void>();
  /** Records the first arrival of `key` (now) and wakes its waiter. */
  mark(key: string): void {
    if (this.times.has(key)) return;
    this.times.set(key, now());
    this.#waiters.get(key)?.();
    this.#waiters.delete(key);
  }
  /** The arrival time of `key` (ns), waiting up to `ms`; rejects on timeout. */
  wait(key: string, ms = 10_000): Promise<bigint> {
    const seen = this.times.get(key);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`timed out waiting for ${key}`)), ms);
      this.#waiters.set(key, () => {
        clearTimeout(timer);
        resolve(this.times.get(key)!);
      });
    });
  }
}

/**
 * What the bench sees of a relay's transport: the commit hints the writing replica sends, as
 * this process receives them, and the bare round trip of the transport itself.
 */
export interface VisibilityTap {
  /** Calls `seen(seq)` on every commit hint of `sessionId` from now on (once the subscription is in place). */
  follow(sessionId: string, seen: (seq: bigint) => void): Promise<void>;
  /**
   * One bare round trip: `key` sent on one connection until it arrives on another; its
   * duration (ms) and the arrival (monotonic ns). Rejects after 10 s.
   */
  roundTrip(key: string): Promise<{ ms: number; arrived: bigint }>;
  /** Closes the tap's connections. */
  close(): Promise<void>;
}

/**
 * The Postgres relay's tap: a LISTEN connection on the ledger's hint channel (payloads
 * `origin|session|seq[|events]`) and on `bench_rtt`, and a second connection sending
 * `select pg_notify('bench_rtt', key)` (autocommit) for the round trip. Rejects if `url` cannot
 * be reached.
 */
export async function pgTap(url: string): Promise<VisibilityTap> {
  const listener = new pg.Client({ connectionString: url, application_name: "bench-listener" });
  const sender = new pg.Client({ connectionString: url, application_name: "bench-sender" });
  const echoes = new Arrivals();
  const followers = new Map<string, (seq: bigint) => void>();
  await listener.connect();
  await sender.connect();
  listener.on("notification", (message) => {
    const payload = message.payload ?? "";
    if (message.channel === "bench_rtt") return echoes.mark(payload);
    const [, session, seq] = payload.split("|");
    if (session && seq) followers.get(session)?.(BigInt(seq));
  });
  await listener.query("listen ledger_events");
  await listener.query("listen bench_rtt");
  return {
    async follow(sessionId, seen) {
      followers.set(sessionId, seen);
    },
    async roundTrip(key) {
      const sent = now();
      await sender.query("select pg_notify('bench_rtt', $1)", [key]);
      const arrived = await echoes.wait(key);
      return { ms: elapsedMs(sent, arrived), arrived };
    },
    async close() {
      await listener.end().catch(() => {});
      await sender.end().catch(() => {});
    },
  };
}

/** Latency samples (ms) of `measureVisibility`, one per measured prompt. */
export interface VisibilitySamples {
  /** Event on B's stream − the commit hint seen by the tap. */
  after: number[];
  /** The tap's bare round trip, measured in the same round. */
  rtt: number[];
  /** `after + rtt`: commit → visible on B. */
  ours: number[];
  /** Event on B's stream − A's Prompt response received. */
  ack: number[];
  /** Event on B's stream − the Prompt sent. */
  send: number[];
  /** With a `hop` server: its stream's event for the round-trip message − that message at the tap. */
  hop: number[];
}

/**
 * Prompts (noReply, 1 text part of 200 B) `sessionId` on replica `a` while replica `b` watches it
 * (`WatchSession` from `afterSeq`, the session's current `last_seq`), `warmup` unmeasured rounds
 * then `iterations` measured ones; each round first measures the tap's bare round trip, then
 * one prompt until its first event on B's stream and its commit hint at the tap. Rejects when
 * an event or hint does not arrive within 10 s.
 */
export async function measureVisibility(options: {
  a: Client<typeof SessionService>;
  b: Client<typeof SessionService>;
  sessionId: string;
  afterSeq: bigint;
  tap: VisibilityTap;
  iterations: number;
  warmup: number;
  /**
   * A bare hop server (bench/bare-hop-child.ts) that streams every round-trip message as an
   * event with the round as `seq`: measures the bare relay → stream path alongside.
   */
  hop?: Client<typeof SessionService>;
}): Promise<VisibilitySamples> {
  const { a, b, sessionId, tap, iterations, warmup, hop } = options;
  const hints = new Arrivals();
  let lastHint = 0n;
  await tap.follow(sessionId, (seq) => {
    if (seq > lastHint) lastHint = seq;
    hints.mark(String(seq));
  });
  // B's stream: arrival time of every seq.
  const visible = new Arrivals();
  let watched = options.afterSeq;
  const watchController = new AbortController();
  const watching = (async () => {
    try {
      for await (const res of b.watchSession({ sessionId, afterSeq: watched }, { signal: watchController.signal })) {
        if (res.event && res.event.kind.case !== "partDelta") visible.mark(String(res.event.seq));
      }
    } catch (error) {
      if (!watchController.signal.aborted) throw error;
    }
  })();
  const hopped = new Arrivals();
  const hopping = hop
    ? (async () => {
        try {
          for await (const res of hop.watchSession({ sessionId }, { signal: watchController.signal })) {
            if (res.event) hopped.mark(String(res.event.seq));
          }
        } catch (error) {
          if (!watchController.signal.aborted) throw error;
        }
      })()
    : undefined;
  const samples: VisibilitySamples = { after: [], rtt: [], ours: [], ack: [], send: [], hop: [] };
  try {
    // B subscribes (and, on NATS, the server has the subscription) before the first prompt.
    await sleep(200);
    const payload = `${"x".repeat(8)}|${sessionId}|`;
    for (let i = 0; i < warmup + iterations; i++) {
      const { ms: rtt, arrived } = await tap.roundTrip(`${payload}${i}`);
      const hopMs = hop ? elapsedMs(arrived, await hopped.wait(String(i))) : undefined;
      const firstSeq = String(watched + 1n);
      const send = now();
      await a.prompt(noReplyPrompt(sessionId, 200, i));
      const ack = now();
      const seen = await visible.wait(firstSeq);
      await waitUntil(() => lastHint > watched);
      const hint = await hints.wait(String(lastHint));
      watched = lastHint;
      if (i < warmup) continue;
      const after = elapsedMs(hint, seen);
      samples.rtt.push(rtt);
      samples.after.push(after);
      samples.ours.push(after + rtt);
      samples.ack.push(elapsedMs(ack, seen));
      samples.send.push(elapsedMs(send, seen));
      if (hopMs !== undefined) samples.hop.push(hopMs);
      await sleep(2);
    }
  } finally {
    watchController.abort();
    await watching;
    await hopping;
  }
  return samples;
}

/** The note's middle part: the split of the samples (p50/p99 after the hint alone, of the bare hop if measured, from the response, from sending). */
export function visibilityDetail(samples: VisibilitySamples): string {
  const p = (xs: number[], q: number) => percentile(xs, q).toFixed(2);
  return (
    `after the commit hint alone: p50 ${p(samples.after, 50)} ms, p99 ${p(samples.after, 99)} ms; ` +
    (samples.hop.length > 0
      ? `the same for a bare hop (a plain connect-node child streaming each round-trip message it receives): p50 ${p(samples.hop, 50)} ms, p99 ${p(samples.hop, 99)} ms; `
      : "") +
    `from A's Prompt response: p50 ${p(samples.ack, 50)} ms; from sending the Prompt: p50 ${p(samples.send, 50)} ms`
  );
}

/**
 * The `replica-visibility` module: two rows (p50 with its goal, p99) of commit → visible on B
 * with the Postgres relay, vs the bare pg_notify → LISTEN round trip (see the file's docstring).
 */
export async function replicaVisibility(): Promise<Row[]> {
  const database = await createBenchDatabase("replica");
  const work = await tempDir("replica");
  const replicas: Replica[] = [];
  let tap: VisibilityTap | undefined;
  try {
    replicas.push(await startReplica({ name: "A", cwd: work.dir, databaseUrl: database.url }));
    replicas.push(await startReplica({ name: "B", cwd: work.dir, databaseUrl: database.url }));
    const [a, b] = replicas.map((r) => connectClient(r.url));
    const sessionId = (await a!.createSession({ directory: work.dir })).session!.id;
    await a!.prompt({ sessionId, noReply: true, parts: [{ kind: { case: "text", value: { text: "first" } } }] });
    tap = await pgTap(database.url);
    const iterations = scaled(300, 20);
    const warmup = scaled(30, 5);
    log(`replica visibility: ${iterations} prompts on A watched on B, and ${iterations} bare round trips`);
    const samples = await measureVisibility({
      a: a!,
      b: b!,
      sessionId,
      afterSeq: await readLastSeq(database.url, sessionId),
      tap,
      iterations,
      warmup,
    });
    const note =
      `two \`ledger serve\` children on one database; prompt (noReply, 1 part) on A, WatchSession on B; ours = (event on B's stream − A's commit hint seen by a LISTEN connection of the bench) + the bare round trip of the same round; ` +
      `${visibilityDetail(samples)}; ` +
      `baseline: select pg_notify() (autocommit) on one connection → LISTEN on another, same server`;
    return percentileRows(
      "commit → visible on another replica's WatchSession",
      samples.ours,
      samples.rtt,
      { 50: atMost(5), 99: undefined },
      note,
    );
  } finally {
    await tap?.close();
    for (const replica of replicas) await replica.stop();
    await database.drop();
    await work.remove();
  }
}

/** The session's `last_seq`, read from the table on a connection of its own. */
export async function readLastSeq(url: string, sessionId: string): Promise<bigint> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ last_seq: string }>("select last_seq from session where id = $1", [sessionId]);
    if (!rows[0]) throw new Error(`no session ${sessionId}`);
    return BigInt(rows[0].last_seq);
  } finally {
    await client.end();
  }
}

/** Resolves once `check()` is true (polled every event-loop turn); rejects after `ms`. */
export async function waitUntil(check: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error("timed out");
    await new Promise((resolve) => setImmediate(resolve));
  }
}
