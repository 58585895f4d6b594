import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { SUBJECT_PREFIX } from "../../src/events/nats-relay.js";
import { TEST_ENGINE } from "../support/db.js";
import { collectEvents, type EventCollector } from "../support/event-stream.js";
import { natsServerInstalled, startNatsCluster, type NatsCluster } from "../support/nats.js";
import type { ReplyChunk } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { startReplicas, writeLedgerConfig, type Replica, type ReplicaSet } from "../support/replica.js";
import { waitFor } from "../support/wait.js";

// Three `ledger serve` processes on one Postgres database, each connected to a different node
// of a 3-node NATS cluster started here (its own node only: the client learns the others from
// the node's INFO, which is how it reconnects elsewhere when its node dies). A, B and C run
// without the periodic catch-up check, so what a watcher sees comes through NATS (and the
// resync after a reconnect) alone; D checks the table every 250 ms, for the case where all of
// NATS goes away. The cases run in order on one cluster and build on its state: a node dies in
// the fourth, another in the fifth, the last in the sixth, the seventh restarts them, and in the
// eighth one hangs (SIGSTOP) until the end.
// Postgres only; needs the nats-server binary (with LEDGER_NATS_REQUIRED=1 a missing one fails).

const CLUSTER = TEST_ENGINE === "postgres" && natsServerInstalled();
const NAMES = ["A", "B", "C"] as const;
/** The NATS connection name of a replica (`bus.nats.name`, from LEDGER_TEST_NATS_NAME). */
const connectionName = (replica: Replica): string => `ledger-${replica.name}`;
/** `bus.nats` of every replica: LEDGER_NATS_URL (one node) wins over `servers`; the file is there for the connection name. */
const NATS_CONFIG = { nats: { servers: ["{env:LEDGER_NATS_URL}"], name: "{env:LEDGER_TEST_NATS_NAME}" } };

let cluster: NatsCluster | undefined;
let set: ReplicaSet | undefined;
let A: Replica;
let B: Replica;
let C: Replica;
let D: Replica;
let probe: NatsConnection | undefined;

beforeAll(async () => {
  if (!CLUSTER) return;
  cluster = await startNatsCluster();
  const nodes = cluster.urls;
  const nats = (name: string, url: string) => ({ LEDGER_NATS_URL: url, LEDGER_TEST_NATS_NAME: `ledger-${name}` });
  set = await startReplicas({
    prefix: "ledger-nats-cluster-",
    timeoutMs: 60_000,
    config: { events: { catch_up_ms: 0 }, bus: NATS_CONFIG },
    replicas: NAMES.map((name, i) => ({ name, env: nats(name, nodes[i]!) })),
  });
  [A, B, C] = set.replicas as [Replica, Replica, Replica];
  const catchUp = await writeLedgerConfig(
    set.dir,
    set.proxy.url,
    { events: { catch_up_ms: 250 }, bus: NATS_CONFIG },
    "ledger-catch-up.json",
  );
  D = await set.add({ name: "D", env: nats("D", nodes[2]!), serveArgs: ["--config", catchUp] });
  await set.freshModel();
}, 180_000);
afterAll(async () => {
  await probe?.close();
  await set?.close();
  await cluster?.close();
}, 60_000);

/** The session's stored events, in seq order, straight from the table. */
async function stored(sessionId: string): Promise<SessionEvent[]> {
  const { rows } = await set!.sql.query<{ data: JsonObject }>("select data from session_event where session_id = $1 order by seq", [
    sessionId,
  ]);
  return rows.map((r) => fromJson(SessionEventSchema, r.data, { ignoreUnknownFields: true }));
}

/** The subject a replica's relay subscribes to for a session. */
const sessionSubjects = (sessionId: string) => `${SUBJECT_PREFIX}.${sessionId}.*`;

/**
 * Waits until each replica's connection (wherever it is now) is subscribed to the session and
 * every other live node has that interest on its routes: from then on a message published on
 * any node reaches the replica.
 */
async function interest(sessionId: string, replicas: Replica[]): Promise<void> {
  const subject = sessionSubjects(sessionId);
  await waitFor(
    `interest in ${sessionId} from ${replicas.map((r) => r.name).join(", ")} on every node`,
    async () => {
      for (const replica of replicas) {
        const at = await cluster!.locate(connectionName(replica));
        if (!at?.connection.subscriptions_list?.includes(subject)) return false;
        for (const node of cluster!.nodes.filter((n) => n.alive() && n !== at.node)) {
          if (!(await node.routedSubjects()).includes(subject)) return false;
        }
      }
      return true;
    },
    20_000,
  );
}

/** Opens a WatchSession on each replica from seq 0 and waits until each has the session's first event. */
async function watch(sessionId: string, replicas: Replica[]): Promise<EventCollector[]> {
  const watchers = replicas.map((r) => collectEvents((signal) => r.grpc.watchSession({ sessionId, afterSeq: 0n }, { signal })));
  for (const watcher of watchers) await watcher.reach(1n);
  return watchers;
}

/** Prompts on `replica` through PromptStream and returns every event it yielded. */
async function promptStream(replica: Replica, sessionId: string, prompt: string): Promise<SessionEvent[]> {
  const events: SessionEvent[] = [];
  for await (const res of replica.grpc.promptStream({ sessionId, parts: [text(prompt)] })) events.push(res.event!);
  return events;
}

/** `n` text chunks `w0 `, `w1 `, ... of a scripted streaming reply. */
const words = (n: number, prefix = "w"): ReplyChunk[] => Array.from({ length: n }, (_, i) => ({ text: `${prefix}${i} ` }));
const deltas = (events: SessionEvent[]) => events.filter((e) => e.kind.case === "partDelta");
const storedOnly = (events: SessionEvent[]) => events.filter((e) => e.kind.case !== "partDelta");

/**
 * Every stored event exactly once, in seq order (equal to `table`); seqs never go back (a delta
 * comes after the stored event it follows); no delta twice (same part, field and offset).
 */
function expectOrderedWithoutDuplicates(events: SessionEvent[], table: SessionEvent[]): void {
  expect(storedOnly(events)).toEqual(table);
  const seqs = events.map((e) => e.seq);
  expect(seqs).toEqual([...seqs].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
  const keys = deltas(events).map((e) =>
    e.kind.case === "partDelta" ? `${e.kind.value.partId}/${e.kind.value.field}/${e.kind.value.offset}` : "",
  );
  expect(new Set(keys).size).toBe(keys.length);
}

describe.skipIf(!CLUSTER)("three `ledger serve` processes, each on its own node of a 3-node NATS cluster", () => {
  it("a reply streamed on A is watched from B and C gap-free: the exact stored events, deltas included", async () => {
    for (const [i, replica] of [A, B, C].entries()) {
      expect((await cluster!.locate(connectionName(replica)))?.node).toBe(cluster!.nodes[i]);
    }
    const sessionId = (await A.grpc.createSession({ directory: set!.dir })).session!.id;
    const watchers = await watch(sessionId, [B, C]);
    await interest(sessionId, [B, C]);

    set!.model().push({ kind: "stream", chunks: words(20), delayMs: 10 });
    const streamed = await promptStream(A, sessionId, "stream me twenty words");
    expect(streamed.at(-1)?.kind).toMatchObject({ case: "sessionStatus", value: { status: { case: "idle" } } });
    expect(deltas(streamed)).toHaveLength(20);

    const table = await stored(sessionId);
    expect(table.at(-1)).toEqual(streamed.at(-1));
    for (const watcher of watchers) {
      await waitFor("every event on the watcher", () => watcher.events.length >= streamed.length + 1, 20_000);
      await watcher.stop();
      // The session's creation (replayed), then exactly what A's PromptStream yielded.
      expect(watcher.events).toEqual([table[0], ...streamed]);
      expect(storedOnly(watcher.events)).toEqual(table);
    }
  }, 60_000);

  it("Abort on C stops the loop running on A; DeleteSession on B ends A's and C's WatchSession with session_deleted", async () => {
    const sessionId = (await A.grpc.createSession({ directory: set!.dir })).session!.id;
    set!.model().push({ kind: "stream", chunks: [{ text: "hanging " }, { hang: true }] });
    const run = collectEvents((signal) => A.grpc.promptStream({ sessionId, parts: [text("hang")] }, { signal }));
    await waitFor("A's delta", () => run.events.some((e) => e.kind.case === "partDelta"));
    // The loop's session is watched on A, so A's interest reaches C's node before C sends the abort.
    await interest(sessionId, [A]);
    expect((await C.grpc.abort({ sessionId })).aborted).toBe(true);
    // (aborted only says the log shows a loop: the hung reply ending is what proves the abort arrived.)
    await waitFor("A's loop to stop", () => run.ended(), 10_000);
    expect(run.failure()).toBeUndefined();
    expect(run.events.at(-1)?.kind).toMatchObject({ case: "sessionStatus", value: { status: { case: "idle" } } });

    const watchers = await watch(sessionId, [A, C]);
    for (const watcher of watchers) await watcher.reach(run.events.at(-1)!.seq);
    await interest(sessionId, [A, C]);
    const table = await stored(sessionId);
    await B.grpc.deleteSession({ sessionId });
    for (const watcher of watchers) {
      expect(await watcher.settle(10_000)).toBe(true);
      expect(watcher.failure()).toBeUndefined();
      expect(watcher.events.slice(0, -1)).toEqual(table);
      expect(watcher.events.at(-1)?.kind.case).toBe("sessionDeleted");
      expect(watcher.events.at(-1)?.seq).toBe(table.at(-1)!.seq + 1n);
    }
    expect(await stored(sessionId)).toEqual([]);
  }, 60_000);

  it("B, watching 1 of 100 sessions written on A, receives only that session's messages (counted on the NATS nodes)", async () => {
    const sessions: string[] = [];
    for (let i = 0; i < 100; i += 10) {
      const batch = await Promise.all(Array.from({ length: 10 }, () => A.grpc.createSession({ directory: set!.dir })));
      sessions.push(...batch.map((res) => res.session!.id));
    }
    const watched = sessions[37]!;
    const [watcher] = await watch(watched, [B]);
    await interest(watched, [B]);

    // A probe on A's node counts every session message A publishes there, per session.
    probe = await connect({ servers: cluster!.nodes[0]!.url, name: "probe" });
    const counts = new Map<string, number>();
    const lastHint = new Map<string, bigint>();
    probe.subscribe(`${SUBJECT_PREFIX}.>`, {
      callback: (_error, msg) => {
        const [, , , sessionId, kind] = msg.subject.split(".");
        counts.set(sessionId!, (counts.get(sessionId!) ?? 0) + 1);
        if (kind === "events") lastHint.set(sessionId!, BigInt(msg.string().split("|")[1]!));
      },
    });
    await probe.flush();
    const before = await cluster!.locate(connectionName(B));
    expect(before?.node).toBe(cluster!.nodes[1]);
    expect(before?.connection.subscriptions_list).toEqual([sessionSubjects(watched)]);

    // Two rounds of a prompt (no reply) on every session, ten at a time.
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < sessions.length; i += 10) {
        await Promise.all(
          sessions.slice(i, i + 10).map((sessionId) => A.grpc.prompt({ sessionId, noReply: true, parts: [text(`round ${round}`)] })),
        );
      }
    }
    const { rows } = await set!.sql.query<{ id: string; last_seq: string }>("select id, last_seq::text from session where id = any($1)", [
      sessions,
    ]);
    expect(rows).toHaveLength(100);
    // Every commit hint of every session went through A's node.
    await waitFor("A's last hint of every session on the probe", () => rows.every((r) => lastHint.get(r.id) === BigInt(r.last_seq)));
    const watchedLast = BigInt(rows.find((r) => r.id === watched)!.last_seq);
    await watcher!.reach(watchedLast);
    const expected = counts.get(watched)!;
    expect(expected).toBe(2); // one commit hint per prompt
    // (Another session may count its creation's hint too if it reached A's node after the probe's subscription.)
    for (const sessionId of sessions) expect(counts.get(sessionId)).toBeGreaterThanOrEqual(2);

    // What B's node delivered to B since: exactly the watched session's messages, none of the 198 others.
    await waitFor("B's node to count the watched session's messages", async () => {
      const now = await cluster!.locate(connectionName(B));
      return now!.connection.out_msgs - before!.connection.out_msgs >= expected;
    });
    const after = await cluster!.locate(connectionName(B));
    expect(after!.connection.out_msgs - before!.connection.out_msgs).toBe(expected);
    expect(after!.connection.subscriptions_list).toEqual([sessionSubjects(watched)]);
    await watcher!.stop();
    expect(watcher!.events).toEqual(await stored(watched));
    await probe.close();
    probe = undefined;
  }, 60_000);

  it("B's NATS node dies mid-stream: B reconnects to another node, resyncs, and its watcher gets every stored event once, in order", async () => {
    const sessionId = (await A.grpc.createSession({ directory: set!.dir })).session!.id;
    const [onB, onC] = await watch(sessionId, [B, C]);
    await interest(sessionId, [B, C]);
    const killed = cluster!.nodes[1]!;
    expect((await cluster!.locate(connectionName(B)))?.node).toBe(killed);

    set!.model().push({ kind: "stream", chunks: words(30), delayMs: 20 });
    const first = collectEvents((signal) => A.grpc.promptStream({ sessionId, parts: [text("thirty words")] }, { signal }));
    await waitFor("B's third delta", () => deltas(onB!.events).length >= 3);
    await killed.kill();
    await first.done;
    expect(first.failure()).toBeUndefined();
    // B's client found another node through the cluster's INFO and resubscribed there.
    const moved = await waitFor("B on another node", async () => {
      const at = await cluster!.locate(connectionName(B));
      return at && at.node !== killed ? at : undefined;
    });
    expect(cluster!.nodes).toContain(moved.node);
    await interest(sessionId, [B, C]);
    // No periodic check on B: the rest of the first reply comes from the resync after the reconnect.
    await onB!.reach(first.events.at(-1)!.seq);

    // After the reconnect, deltas flow to B live again.
    set!.model().push({ kind: "stream", chunks: words(5, "v"), delayMs: 10 });
    const second = await promptStream(A, sessionId, "five more");
    const table = await stored(sessionId);
    expect(table.at(-1)).toEqual(second.at(-1));
    for (const watcher of [onB!, onC!]) {
      await waitFor(
        "the second reply on the watcher",
        () => watcher.events.at(-1)?.seq === table.at(-1)!.seq && watcher.events.length > table.length,
      );
      await watcher.stop();
      expectOrderedWithoutDuplicates(watcher.events, table);
      expect(watcher.events.slice(-second.length)).toEqual(second);
    }
    // C's node and A's stayed up: C saw the first reply's deltas too.
    expect(onC!.events).toEqual([table[0], ...first.events, ...second]);
  }, 60_000);

  it("A's NATS node dies mid-stream: the writer reconnects to the last node; B and C get every stored event once, in order", async () => {
    const sessionId = (await A.grpc.createSession({ directory: set!.dir })).session!.id;
    const watchers = await watch(sessionId, [B, C]);
    await interest(sessionId, [B, C]);
    const killed = cluster!.nodes[0]!;
    expect((await cluster!.locate(connectionName(A)))?.node).toBe(killed);

    set!.model().push({ kind: "stream", chunks: words(30), delayMs: 20 });
    const run = collectEvents((signal) => A.grpc.promptStream({ sessionId, parts: [text("thirty words")] }, { signal }));
    await waitFor("B's and C's third delta", () => watchers.every((w) => deltas(w.events).length >= 3));
    await killed.kill();
    await run.done;
    expect(run.failure()).toBeUndefined();
    expect(run.events.at(-1)?.kind).toMatchObject({ case: "sessionStatus", value: { status: { case: "idle" } } });
    // The last node left (B's died in the previous test) serves everyone now.
    const last = cluster!.nodes[2]!;
    for (const replica of [A, B, C]) {
      await waitFor(`${replica.name} on the last node`, async () => (await cluster!.locate(connectionName(replica)))?.node === last);
    }

    const table = await stored(sessionId);
    expect(table.at(-1)).toEqual(run.events.at(-1));
    for (const watcher of watchers) {
      await watcher.reach(table.at(-1)!.seq);
      await watcher.stop();
      expectOrderedWithoutDuplicates(watcher.events, table);
    }
  }, 60_000);

  it("the whole NATS cluster stops mid-stream: D's watcher falls back to the table and gets every stored event once, in order", async () => {
    const sessionId = (await A.grpc.createSession({ directory: set!.dir })).session!.id;
    const [onD] = await watch(sessionId, [D]);
    await interest(sessionId, [D]);
    set!.model().push({ kind: "stream", chunks: words(30), delayMs: 20 });
    const run = collectEvents((signal) => A.grpc.promptStream({ sessionId, parts: [text("thirty words")] }, { signal }));
    await waitFor("D's third delta", () => deltas(onD!.events).length >= 3);
    await cluster!.close();
    await run.done;
    expect(run.failure()).toBeUndefined();
    expect(run.events.at(-1)?.kind).toMatchObject({ case: "sessionStatus", value: { status: { case: "idle" } } });

    await onD!.reach(run.events.at(-1)!.seq);
    await onD!.stop();
    const table = await stored(sessionId);
    expect(table.at(-1)).toEqual(run.events.at(-1));
    expectOrderedWithoutDuplicates(onD!.events, table);
    expect(D.stderr()).toContain("relay: NATS disconnected; reconnecting");
  }, 60_000);

  it("a session B starts watching while NATS is down is relayed live once the cluster is back: the exact events, deltas included", async () => {
    expect(cluster!.nodes.some((node) => node.alive())).toBe(false);
    const sessionId = (await A.grpc.createSession({ directory: set!.dir })).session!.id;
    const [onB] = await watch(sessionId, [B]);
    await cluster!.restart();
    for (const replica of [A, B]) {
      await waitFor(`${replica.name} reconnected`, async () => (await cluster!.locate(connectionName(replica))) !== undefined);
    }
    // B subscribed while disconnected: its client sends the subscription on reconnecting.
    await interest(sessionId, [B]);

    set!.model().push({ kind: "stream", chunks: words(10), delayMs: 10 });
    const streamed = await promptStream(A, sessionId, "ten words after the outage");
    expect(deltas(streamed)).toHaveLength(10);
    const table = await stored(sessionId);
    expect(table.at(-1)).toEqual(streamed.at(-1));
    await waitFor("every event on B", () => onB!.events.length >= streamed.length + 1);
    await onB!.stop();
    expect(onB!.events).toEqual([table[0], ...streamed]);
  }, 60_000);

  it("B's NATS node hangs mid-stream (SIGSTOP, no reset): B gives it up after unanswered pings, reconnects elsewhere and its watcher gets every stored event once", async () => {
    const sessionId = (await A.grpc.createSession({ directory: set!.dir })).session!.id;
    const [onB] = await watch(sessionId, [B]);
    await interest(sessionId, [B]);
    const hung = (await cluster!.locate(connectionName(B)))!.node;

    set!.model().push({ kind: "stream", chunks: words(20), delayMs: 20 });
    const run = collectEvents((signal) => A.grpc.promptStream({ sessionId, parts: [text("twenty words")] }, { signal }));
    await waitFor("B's third delta", () => deltas(onB!.events).length >= 3);
    hung.pause();
    try {
      await run.done;
      expect(run.failure()).toBeUndefined();
      // Nothing tells B its node is gone but the pings it no longer answers.
      await waitFor(
        "B on another node",
        async () => {
          const at = await cluster!.locate(connectionName(B));
          return at !== undefined && at.node !== hung;
        },
        40_000,
        250,
      );
      const table = await stored(sessionId);
      expect(table.at(-1)).toEqual(run.events.at(-1));
      // No periodic check on B: the events it missed come from its resync after the reconnect.
      await onB!.reach(table.at(-1)!.seq);
      await onB!.stop();
      expectOrderedWithoutDuplicates(onB!.events, table);
    } finally {
      hung.resume();
    }
  }, 60_000);
});
