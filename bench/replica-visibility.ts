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
 */
import pg from "pg";
import { startReplica, type Replica } from "../test/support/replica.js";
import {
  atMost,
  connectClient,
  createBenchDatabase,
  elapsedMs,
  log,
  now,
  percentile,
  percentileRows,
  prose,
  scaled,
  sleep,
  tempDir,
  type Row,
} from "./common.js";

/** Resolves when `map` has `key` (checked on every `poke`). */
class Arrivals {
  readonly times = new Map<string, bigint>();
  #waiters = new Map<string, () => void>();
  mark(key: string): void {
    if (this.times.has(key)) return;
    this.times.set(key, now());
    this.#waiters.get(key)?.();
    this.#waiters.delete(key);
  }
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

export async function replicaVisibility(): Promise<Row[]> {
  const database = await createBenchDatabase("replica");
  const work = await tempDir("replica");
  const replicas: Replica[] = [];
  const listener = new pg.Client({ connectionString: database.url, application_name: "bench-listener" });
  const sender = new pg.Client({ connectionString: database.url, application_name: "bench-sender" });
  const watchController = new AbortController();
  try {
    replicas.push(await startReplica({ name: "A", cwd: work.dir, databaseUrl: database.url }));
    replicas.push(await startReplica({ name: "B", cwd: work.dir, databaseUrl: database.url }));
    const [a, b] = replicas.map((r) => connectClient(r.url));
    const sessionId = (await a!.createSession({ directory: work.dir })).session!.id;
    const first = await a!.prompt({ sessionId, noReply: true, parts: [{ kind: { case: "text", value: { text: "first" } } }] });
    void first;

    // Hints of A's commits, and the bare round trip's messages, as this process sees them.
    const hints = new Arrivals();
    const echoes = new Arrivals();
    let lastHint = 0n;
    await listener.connect();
    await sender.connect();
    listener.on("notification", (message) => {
      const payload = message.payload ?? "";
      if (message.channel === "bench_rtt") return echoes.mark(payload);
      const [, session, seq] = payload.split("|");
      if (session === sessionId && seq) {
        lastHint = BigInt(seq);
        hints.mark(seq);
      }
    });
    await listener.query("listen ledger_events");
    await listener.query("listen bench_rtt");

    // B's stream: arrival time of every seq.
    const visible = new Arrivals();
    const { rows: current } = await sender.query<{ last_seq: string }>("select last_seq from session where id = $1", [sessionId]);
    let watched = BigInt(current[0]!.last_seq);
    const watching = (async () => {
      try {
        for await (const res of b!.watchSession({ sessionId, afterSeq: watched }, { signal: watchController.signal })) {
          if (res.event && res.event.kind.case !== "partDelta") visible.mark(String(res.event.seq));
        }
      } catch (error) {
        if (!watchController.signal.aborted) throw error;
      }
    })();
    await sleep(200);

    const iterations = scaled(300, 20);
    const warmup = scaled(30, 5);
    log(`replica visibility: ${iterations} prompts on A watched on B, and ${iterations} bare round trips`);
    const samples = { after: [] as number[], rtt: [] as number[], ours: [] as number[], ack: [] as number[], send: [] as number[] };
    const payload = `${"x".repeat(8)}|${sessionId}|`;
    for (let i = 0; i < warmup + iterations; i++) {
      // The bare round trip: pg_notify (autocommit) on one connection → LISTEN on another.
      const key = `${payload}${i}`;
      const sent = now();
      await sender.query("select pg_notify('bench_rtt', $1)", [key]);
      const rtt = elapsedMs(sent, await echoes.wait(key));

      // The ledger: a noReply prompt on A, visible on B's WatchSession.
      const firstSeq = String(watched + 1n);
      const send = now();
      await a!.prompt({ sessionId, noReply: true, parts: [{ kind: { case: "text", value: { text: prose(200, i) } } }] });
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
      await sleep(2);
    }
    watchController.abort();
    await watching;
    const p = (xs: number[], q: number) => percentile(xs, q).toFixed(2);
    const note =
      `two \`ledger serve\` children on one database; prompt (noReply, 1 part) on A, WatchSession on B; ours = (event on B's stream − A's commit hint seen by a LISTEN connection of the bench) + the bare round trip of the same round; ` +
      `after the commit hint alone: p50 ${p(samples.after, 50)} ms, p99 ${p(samples.after, 99)} ms; from A's Prompt response: p50 ${p(samples.ack, 50)} ms; from sending the Prompt: p50 ${p(samples.send, 50)} ms; ` +
      `baseline: select pg_notify() (autocommit) on one connection → LISTEN on another, same server`;
    return percentileRows(
      "commit → visible on another replica's WatchSession",
      samples.ours,
      samples.rtt,
      { 50: atMost(5), 99: undefined },
      note,
    );
  } finally {
    watchController.abort();
    await listener.end().catch(() => {});
    await sender.end().catch(() => {});
    for (const replica of replicas) await replica.stop();
    await database.drop();
    await work.remove();
  }
}

async function waitUntil(check: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error("timed out");
    await new Promise((resolve) => setImmediate(resolve));
  }
}
