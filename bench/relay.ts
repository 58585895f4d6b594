/**
 * The relays between replicas (issue 14 item 3): the Postgres relay (LISTEN/NOTIFY) and the NATS
 * relay against no relay and against their bare transports, on `ledger serve` children sharing
 * one Postgres database and a `nats-server` child of the bench (with monitoring, `-m`).
 *
 * "No relay": a ledger on Postgres always starts a relay (`startRelay` in src/app.ts; only the
 * embedded PGlite database has none), and the config has no switch to turn it off. The
 * no-relay replicas therefore run the NATS relay pointed at a loopback port where nothing listens
 * (`bus.nats.servers`): it never connects, so `hint()` returns after building its payload and
 * sends nothing (no pg_notify, no NATS publish, no LISTEN connection); its catch-up check only
 * reads sessions that are watched, and none is during the load. It retries the connection in
 * the background at most every 5 s.
 *
 * (a) Write throughput: 32 concurrent noReply writers (Connect clients in the bench, each on
 *     its own session, 16 per replica) on 2 replicas, per relay. The three pairs run side by
 *     side and are loaded one at a time: 1 s of unmeasured load on each, then 3 rounds in which
 *     every relay comes once at every position of the order (0.5 s warm-up, then a measured
 *     period); a relay's rate is its prompts over its measured seconds. Goal: each relay ≥ 0.85×
 *     the pair without one.
 * (b) Commit → visible on another replica's `WatchSession` (bench/replica-visibility.ts's
 *     `measureVisibility`): prompt on A, watch on B. The commit instant inside A is not visible
 *     from outside, so the bench taps the relay's own transport: a LISTEN on the hint channel for
 *     Postgres, a subscription to the session's `ledger.v1.session.<id>.events` subject for NATS
 *     (a hint reaches B's relay and the bench alike). Per prompt:
 *       ours = (event on B's stream − hint seen by the tap) + the bare round trip of the round,
 *     where the bare round trip is `select pg_notify()` (autocommit) on one connection → LISTEN on
 *     another, or a NATS publish on one connection → a subscription on another
 *     (@nats-io/transport-node, the relay's client), measured just before the prompt. Goals:
 *     p50 ≤ 3× the bare round trip; p99 ≤ 5 ms. To split "after", the same round-trip message
 *     also reaches a bare hop (bench/bare-hop-child.ts: a plain connect-node child that LISTENs
 *     or subscribes and streams each message as a WatchSession event to the bench): its event −
 *     the message at the tap is the transport → stream → bench path with nothing of the ledger
 *     in it; the rest of "after" is B's own work (relay, bus, feed, interceptors).
 * (c) Fan-out with 3 replicas, each watching a third of the sessions (bench/relay-fanout.ts):
 *     messages delivered to the busiest replica ÷ messages all replicas published. Goal with
 *     NATS ≤ 0.4; the Postgres relay (1.0 by construction: every listener gets every NOTIFY) is
 *     the comparison row.
 */
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { connect } from "@nats-io/transport-node";
import { sessionSubject } from "../src/events/nats-relay.js";
import { closedNatsUrl, hasNatsServer, startNatsServer, type NatsServer } from "../test/support/nats.js";
import { startFakeOpenAI, type FakeOpenAI } from "../test/support/openai-server.js";
import { startReplica, writeLedgerConfig, type Replica } from "../test/support/replica.js";
import {
  SCALE,
  atLeast,
  atMost,
  connectClient,
  createBenchDatabase,
  elapsedMs,
  log,
  noReplyPrompt,
  now,
  percentile,
  row,
  scaled,
  startBenchChild,
  sustain,
  tempDir,
  type Row,
} from "./common.js";
import { measureFanout, type FanoutResult } from "./relay-fanout.js";
import { cpuMs, writeSyscalls } from "./serve-child.js";
import {
  Arrivals,
  measureVisibility,
  pgTap,
  readLastSeq,
  visibilityDetail,
  type VisibilitySamples,
  type VisibilityTap,
} from "./replica-visibility.js";

type Kind = "none" | "pg" | "nats";
const KINDS: Kind[] = ["none", "pg", "nats"];
const LABEL: Record<Kind, string> = { none: "no relay", pg: "Postgres relay", nats: "NATS relay" };
/** Concurrent writers of (a), spread evenly over the two replicas. */
const WRITERS = 32;
/** Answers streaming at once in (c): each holds a Postgres connection for its session lock. */
const FANOUT_CONCURRENCY = 24;
/** Text chunks of every scripted answer in (c), 20 ms apart. */
const CHUNKS = 10;

/**
 * The `relay` module (`BENCH_ONLY=relay`): rows (a), (b), (c) of the file's docstring, in that
 * order. Needs Postgres (`ADMIN_URL`) and the `nats-server` binary on PATH (Debian's
 * `/usr/sbin/nats-server`); rejects when either is missing or a step times out.
 */
export async function relay(): Promise<Row[]> {
  if (!hasNatsServer()) throw new Error("relay: nats-server is not on PATH (Debian package nats-server)");
  const database = await createBenchDatabase("relay");
  const work = await tempDir("relay");
  const nats = await startNatsServer(undefined, { monitor: true });
  const model = await startFakeOpenAI();
  // Every answer: 10 text chunks 20 ms apart (~200 ms of streaming). Each answer costs the
  // ledgers ~130 ms of CPU on this machine (busy; a quarter of it in socket writes), so more
  // chunks would make part (c) the bulk of the module's time without changing what it counts.
  model.setFallback({ kind: "stream", chunks: Array.from({ length: CHUNKS }, (_, i) => ({ text: `word${i} ` })), delayMs: 20 });
  const replicas: Replica[] = [];
  try {
    const closed = await closedNatsUrl();
    const start = async (kind: Kind, name: string) => {
      const cwd = path.join(work.dir, `${kind}-${name}`);
      await mkdir(cwd, { recursive: true });
      const bus =
        kind === "none" ? { nats: { servers: [closed] } } : kind === "nats" ? { nats: { servers: [nats.url], name: natsName(name) } } : {};
      await writeLedgerConfig(cwd, model.url, { bus });
      const replica = await startReplica({ name: `${kind}-${name}`, cwd, databaseUrl: database.url });
      replicas.push(replica);
      return replica;
    };
    const pairs = {} as Record<Kind, Replica[]>;
    for (const kind of KINDS) pairs[kind] = [await start(kind, "A"), await start(kind, "B")];

    const rates = await writeThroughput(pairs, work.dir, nats.pid);
    const rows: Row[] = [];
    for (const kind of ["pg", "nats"] as const) {
      rows.push(
        row(
          `noReply prompts/s, ${WRITERS} writers over 2 replicas, ${LABEL[kind]} vs no relay`,
          rates[kind].rate,
          rates.none.rate,
          "prompts/s",
          atLeast(0.85),
          `two \`ledger serve\` children on one database per relay, ${WRITERS / 2} Connect clients on each, each client prompting (noReply, 1 text part of 200 B) its own session; ` +
            `1 s of unmeasured load on every pair, then ${rates.none.rounds} rounds (every relay once at every position of the order) of ${rates.none.warmSeconds} s warm-up + ${rates.none.measureSeconds} s measured per pair; ` +
            `baseline: the same with no relay (the NATS relay pointed at a closed port: it sends nothing); ` +
            `CPU of the two \`ledger serve\` processes per prompt: ${LABEL[kind]} ${rates[kind].cpuPerPrompt.toFixed(2)} ms, no relay ${rates.none.cpuPerPrompt.toFixed(2)} ms` +
            (kind === "nats" ? ` (and the nats-server's ${rates.nats.serverCpuPerPrompt!.toFixed(3)} ms)` : "") +
            `; their write system calls per prompt: ${LABEL[kind]} ${rates[kind].writesPerPrompt.toFixed(2)}, no relay ${rates.none.writesPerPrompt.toFixed(2)}`,
        ),
      );
    }

    const tap = { pg: await pgTap(database.url), nats: await natsTap([nats.url]) };
    try {
      for (const kind of ["pg", "nats"] as const)
        rows.push(...(await visibility(kind, pairs[kind], tap[kind], { database: database.url, nats: nats.url }, work.dir)));
    } finally {
      await tap.pg.close();
      await tap.nats.close();
    }
    for (const replica of pairs.none) await replica.stop();

    const fanouts = {} as Record<"pg" | "nats", FanoutResult & { cpu: string }>;
    for (const kind of ["pg", "nats"] as const) {
      const third = await start(kind, "C");
      const urls = [...pairs[kind], third].map((r) => r.url);
      const pids = [...pairs[kind], third].map((r) => r.pid);
      const cpu = async () => ({ replicas: await Promise.all(pids.map(cpuMs)), bench: process.cpuUsage(), nats: await cpuMs(nats.pid) });
      const before = await cpu();
      const result = await measureFanout({
        urls,
        directory: work.dir,
        sessions: scaled(300, 30),
        concurrency: FANOUT_CONCURRENCY,
        counter:
          kind === "nats" ? { kind, monitorUrl: nats.monitorUrl!, names: ["A", "B", "C"].map(natsName) } : { kind, url: database.url },
      });
      const after = await cpu();
      const replicaCpu = after.replicas.reduce((sum, ms, i) => sum + ms - before.replicas[i]!, 0);
      const benchCpu = (after.bench.user + after.bench.system - before.bench.user - before.bench.system) / 1000;
      const perAnswer = (ms: number) => `${(ms / result.sessions).toFixed(1)} ms`;
      fanouts[kind] = {
        ...result,
        cpu:
          `CPU per answer (prompts, watchers and counting included): the 3 ledgers ${perAnswer(replicaCpu)}, the bench process (clients, scripted model) ${perAnswer(benchCpu)}` +
          (kind === "nats" ? `, the nats-server ${perAnswer(after.nats - before.nats)}` : ""),
      };
      for (const replica of [...pairs[kind], third]) await replica.stop();
    }
    for (const kind of ["nats", "pg"] as const) rows.push(fanoutRow(kind, fanouts[kind]));
    return rows;
  } finally {
    for (const replica of replicas) await replica.stop();
    await model.close();
    await nats.kill();
    await database.drop();
    await work.remove();
  }
}

/** The NATS connection name of replica `name` (`bus.nats.name`), as `/connz` shows it. */
function natsName(name: string): string {
  return `ledger-${name}`;
}

/** What (a) measured for one relay. */
interface Throughput {
  /** Prompts/s over the measured periods. */
  rate: number;
  /** CPU time (ms) of the pair's two processes per prompt (`/proc/<pid>/stat`, 10 ms ticks). */
  cpuPerPrompt: number;
  /** Write system calls (socket writes: HTTP responses, statements, notifications, publishes) of the pair's two processes per prompt. */
  writesPerPrompt: number;
  /** NATS relay only: CPU time (ms) of the nats-server per prompt. */
  serverCpuPerPrompt?: number;
  rounds: number;
  warmSeconds: number;
  measureSeconds: number;
}

/** (a): the rate of each pair (prompts/s), over all its measured periods (alternating rounds, after a warm-up of every pair). */
async function writeThroughput(pairs: Record<Kind, Replica[]>, directory: string, natsPid: number): Promise<Record<Kind, Throughput>> {
  // Every relay at every position of the order once.
  const rounds = KINDS.length;
  const warmSeconds = 0.5;
  const measureSeconds = Math.max(1, SCALE);
  const writers = {} as Record<Kind, Array<() => Promise<unknown>>>;
  for (const kind of KINDS) {
    const clients = pairs[kind].map((r) => connectClient(r.url));
    writers[kind] = await Promise.all(
      Array.from({ length: WRITERS }, async (_, i) => {
        const client = clients[i % clients.length]!;
        const sessionId = (await client.createSession({ directory })).session!.id;
        return () => client.prompt(noReplyPrompt(sessionId));
      }),
    );
  }
  // Unmeasured: the bench's clients and each pair warm up before the first measured period
  // (without it, whichever relay came first measured 20-30 % lower on the busy machine).
  log(`relay: ${WRITERS} writers over 2 replicas, warming up every pair`);
  for (const kind of KINDS) await sustain(writers[kind], 0, 1);
  const totals = {
    none: { calls: 0, seconds: 0, cpu: 0, writes: 0 },
    pg: { calls: 0, seconds: 0, cpu: 0, writes: 0 },
    nats: { calls: 0, seconds: 0, cpu: 0, writes: 0 },
  };
  const sum = async (kind: Kind, read: (pid: number) => Promise<number>) =>
    (await Promise.all(pairs[kind].map((r) => read(r.pid)))).reduce((a, b) => a + b, 0);
  const pairCpu = (kind: Kind) => sum(kind, cpuMs);
  const natsCpu = { calls: 0, cpu: 0 };
  for (let round = 0; round < rounds; round++) {
    // Rotate the order so that drift on the machine hits every relay alike.
    for (let k = 0; k < KINDS.length; k++) {
      const kind = KINDS[(k + round) % KINDS.length]!;
      log(`relay: ${WRITERS} writers over 2 replicas, ${LABEL[kind]}, round ${round + 1}/${rounds}`);
      const cpuBefore = await pairCpu(kind);
      const writesBefore = await sum(kind, writeSyscalls);
      const natsBefore = await cpuMs(natsPid);
      const { measured, warmed, seconds } = await sustain(writers[kind], warmSeconds, measureSeconds);
      // CPU over the whole segment (warm-up included), per prompt of the segment.
      const share = measured / (measured + warmed);
      totals[kind].cpu += ((await pairCpu(kind)) - cpuBefore) * share;
      totals[kind].writes += ((await sum(kind, writeSyscalls)) - writesBefore) * share;
      if (kind === "nats") {
        natsCpu.cpu += ((await cpuMs(natsPid)) - natsBefore) * share;
        natsCpu.calls += measured;
      }
      totals[kind].calls += measured;
      totals[kind].seconds += seconds;
    }
  }
  const result = {} as Record<Kind, Throughput>;
  for (const kind of KINDS) {
    const { calls, seconds, cpu, writes } = totals[kind];
    result[kind] = {
      rate: calls / seconds,
      cpuPerPrompt: cpu / calls,
      writesPerPrompt: writes / calls,
      rounds,
      warmSeconds,
      measureSeconds,
    };
  }
  result.nats.serverCpuPerPrompt = natsCpu.cpu / natsCpu.calls;
  return result;
}

/** (b): commit → visible on B for one relay, as two rows (p50 vs 3× the round trip, p99 vs 5 ms). */
async function visibility(
  kind: "pg" | "nats",
  pair: Replica[],
  tap: VisibilityTap,
  urls: { database: string; nats: string },
  directory: string,
): Promise<Row[]> {
  const [a, b] = pair.map((r) => connectClient(r.url));
  const url = urls.database;
  const sessionId = (await a!.createSession({ directory })).session!.id;
  await a!.prompt(noReplyPrompt(sessionId, 10));
  const iterations = scaled(200, 20);
  log(`relay: commit → visible, ${LABEL[kind]}, ${iterations} prompts and bare round trips`);
  // The bare hop: a plain connect-node child streaming every round-trip message it receives.
  const hop = await startBenchChild("bare-hop-child.ts", { BARE_HOP_URL: kind === "pg" ? urls.database : urls.nats });
  let samples: VisibilitySamples;
  try {
    samples = await measureVisibility({
      a: a!,
      b: b!,
      sessionId,
      afterSeq: await readLastSeq(url, sessionId),
      tap,
      iterations,
      warmup: scaled(20, 5),
      hop: connectClient(hop.url),
    });
  } finally {
    await hop.stop();
  }
  const bare =
    kind === "pg"
      ? "select pg_notify() (autocommit) on one connection → LISTEN on another"
      : "NATS publish on one connection → subscription on another";
  const note =
    `two \`ledger serve\` children on one database with the ${LABEL[kind]}; prompt (noReply, 1 part) on A, WatchSession on B; ours = (event on B's stream − A's commit hint seen by the bench's ${kind === "pg" ? "LISTEN connection" : "subscription to the session's events subject"}) + the bare round trip of the same round; ` +
    `${visibilityDetail(samples)}; baseline: ${bare} (p99 row: the goal is ≤ 5 ms; baseline is the bare round trip's p99)`;
  const name = `commit → visible on another replica's WatchSession, ${LABEL[kind]}`;
  const p99 = percentile(samples.ours, 99);
  return [
    row(`${name}, p50`, percentile(samples.ours, 50), percentile(samples.rtt, 50), "ms", atMost(3), note),
    { ...row(`${name}, p99`, p99, percentile(samples.rtt, 99), "ms", undefined, note), goal: "≤ 5 ms", pass: p99 <= 5 },
  ];
}

/** (c): the busiest replica's share of the relay messages. */
function fanoutRow(kind: "pg" | "nats", result: FanoutResult & { cpu: string }): Row {
  const most = Math.max(...result.received);
  const note =
    `3 \`ledger serve\` children on one database; ${result.sessions} sessions, each watched on one replica and answered (agent loop, scripted model: ${CHUNKS} text chunks 20 ms apart) on the next, ${FANOUT_CONCURRENCY} answering at once, all watchers open throughout (${(result.ms / 1000).toFixed(1)} s, prompt → idle on the watcher p50 ${result.answerP50.toFixed(0)} ms); ` +
    (kind === "nats"
      ? `messages per nats-server /connz: ours = out_msgs of the busiest replica's connection (all: ${result.received.join(", ")}), baseline = Σ in_msgs of the replicas' connections`
      : `every replica's LISTEN connection gets every NOTIFY: ours = baseline = the notifications a LISTEN connection of the bench counted on the ledger's three channels`) +
    `; live deltas seen by the watchers: ${result.deltas}; ${result.cpu}`;
  const name = `relay messages received per replica ÷ produced, 3 replicas each watching a third of ${result.sessions} sessions, ${LABEL[kind]}`;
  return row(name, most, result.produced, "messages", kind === "nats" ? atMost(0.4) : undefined, note);
}

/**
 * The NATS relay's tap for `measureVisibility`: one connection subscribed to `bench.rtt` and to
 * the followed sessions' `events` subjects (payload `origin|seq[|events]`), another publishing
 * the round trip's keys. Rejects when no server answers.
 */
async function natsTap(servers: string[]): Promise<VisibilityTap> {
  const listener = await connect({ servers, name: "bench-listener" });
  const sender = await connect({ servers, name: "bench-sender" });
  const echoes = new Arrivals();
  listener.subscribe("bench.rtt", { callback: (error, msg) => void (error ? undefined : echoes.mark(msg.string())) });
  await listener.flush();
  return {
    async follow(sessionId, seen) {
      listener.subscribe(sessionSubject(sessionId, "events"), {
        callback: (error, msg) => {
          const seq = error ? undefined : msg.string().split("|")[1];
          if (seq) seen(BigInt(seq));
        },
      });
      await listener.flush();
    },
    async roundTrip(key) {
      const sent = now();
      sender.publish("bench.rtt", key);
      const arrived = await echoes.wait(key);
      return { ms: elapsedMs(sent, arrived), arrived };
    },
    async close() {
      await listener.close();
      await sender.close();
    },
  };
}
