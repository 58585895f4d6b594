import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { startLedger, type RunningLedger } from "../../src/app.js";
import { buildConfig, ConfigError, configFileSchema } from "../../src/config/config.js";
import type { NatsRelay } from "../../src/events/nats-relay.js";
import { readEventPage } from "../../src/storage/event-store.js";
import { collectEvents } from "../support/event-stream.js";
import { TEST_ENGINE, type TestDatabase } from "../support/db.js";
import { compatibleProvider } from "../support/mock-models.js";
import { closedNatsUrl, NATS_URL, natsReachable } from "../support/nats.js";
import type { FakeOpenAI } from "../support/openai-server.js";
import { replicaLifecycle } from "../support/replica-fixture.js";
import { startReplicaPair, type ReplicaPair } from "../support/replica.js";
import { text } from "../support/prompt.js";
import { sleep, waitFor } from "../support/wait.js";

// Two in-process ledgers on one Postgres database with `bus.nats` set: sessions followed across
// them through the machine's real NATS server, and (NATS unreachable) through the catch-up check
// alone. Postgres only: NATS with PGlite is refused at start.

const POSTGRES = TEST_ENGINE === "postgres";
const NATS = POSTGRES && (await natsReachable());

let dir: string;
let database: TestDatabase;
let fake: FakeOpenAI;
const running = replicaLifecycle("ledger-nats-", POSTGRES, (shared) => void ({ dir, database, fake } = shared));

/** Starts a ledger on the shared database with `bus.nats.servers = servers` and `events.catch_up_ms = catchUpMs`. */
async function ledger(servers: string[], catchUpMs: number): Promise<{ ledger: RunningLedger; client: Client<typeof SessionService> }> {
  const config = configFileSchema.parse({
    model: "fake/m",
    provider: { fake: compatibleProvider(fake.url, { m: {} }, "test") },
    retry: { attempts: 0 },
    events: { catch_up_ms: catchUpMs },
    bus: { nats: { servers, name: `test-${running.length}` } },
  });
  const started = await startLedger({ config: buildConfig(config, undefined, dir), database: database.target });
  running.push(started);
  return { ledger: started, client: createClient(SessionService, createGrpcTransport({ baseUrl: started.url })) };
}

/** The session's stored events, in seq order, from the table. */
async function stored(r: RunningLedger, sessionId: string): Promise<SessionEvent[]> {
  return (await readEventPage(r.database.db, sessionId, 0, { rows: 10_000, bytes: 1 << 30 })).events;
}

describe.skipIf(!NATS)("two ledgers relaying on NATS", () => {
  let A: Awaited<ReturnType<typeof ledger>>;
  let B: Awaited<ReturnType<typeof ledger>>;
  const relayOf = (r: RunningLedger) => r.deps.relay as NatsRelay;

  beforeAll(async () => {
    // catch_up_ms 0: what B sees comes through NATS only.
    A = await ledger([NATS_URL], 0);
    B = await ledger([NATS_URL], 0);
  });

  it("a reply streamed on A is seen on B's WatchSession gap-free: the exact events, deltas included", async () => {
    expect(relayOf(B.ledger).stats()).toMatchObject({ connected: true, subscribed: [] });
    const sessionId = (await A.client.createSession({ directory: dir })).session!.id;
    const watcher = collectEvents((signal) => B.client.watchSession({ sessionId, afterSeq: 0n }, { signal }));
    await watcher.reach(1n);
    await waitFor("B's subscription", () => relayOf(B.ledger).stats().subscribed.includes(sessionId));
    await relayOf(B.ledger).flush();

    fake.push({ kind: "stream", chunks: Array.from({ length: 10 }, (_, i) => ({ text: `w${i} ` })), delayMs: 10 });
    const streamed: SessionEvent[] = [];
    for await (const res of A.client.promptStream({ sessionId, parts: [text("stream me ten words")] })) streamed.push(res.event!);
    expect(streamed.at(-1)?.kind.case).toBe("sessionStatus");
    expect(streamed.filter((e) => e.kind.case === "partDelta")).toHaveLength(10);

    await watcher.reach(streamed.at(-1)!.seq);
    await sleep(100);
    await watcher.stop();
    const table = await stored(A.ledger, sessionId);
    // B: the session's creation (replayed), then exactly what A's PromptStream yielded.
    expect(watcher.events).toEqual([table[0], ...streamed]);
    expect(watcher.events.filter((e) => e.kind.case !== "partDelta")).toEqual(table);
    expect(relayOf(B.ledger).stats().messages).toBeGreaterThan(0);
    // Its last watcher gone, B no longer listens to the session.
    await waitFor("B's unsubscription", () => !relayOf(B.ledger).stats().subscribed.includes(sessionId));
  }, 60_000);

  it("Abort on B stops the loop running on A; DeleteSession on A ends B's WatchSession", async () => {
    const sessionId = (await A.client.createSession({ directory: dir })).session!.id;
    fake.push({ kind: "stream", chunks: [{ text: "hanging " }, { hang: true }] });
    const run = collectEvents((signal) => A.client.promptStream({ sessionId, parts: [text("hang")] }, { signal }));
    await waitFor("A's delta", () => run.events.some((e) => e.kind.case === "partDelta"));
    expect(relayOf(A.ledger).stats().subscribed).toContain(sessionId); // the loop's session is served on A
    expect(relayOf(B.ledger).stats().subscribed).not.toContain(sessionId);

    expect((await B.client.abort({ sessionId })).aborted).toBe(true);
    await run.done;
    expect(run.failure()).toBeUndefined();
    expect(run.events.at(-1)?.kind).toMatchObject({ case: "sessionStatus", value: { status: { case: "idle" } } });

    const watcher = collectEvents((signal) => B.client.watchSession({ sessionId, afterSeq: 0n }, { signal }));
    await watcher.reach(run.events.at(-1)!.seq);
    await waitFor("B's subscription", () => relayOf(B.ledger).stats().subscribed.includes(sessionId));
    await relayOf(B.ledger).flush();
    await A.client.deleteSession({ sessionId });
    expect(await watcher.settle(5_000)).toBe(true);
    expect(watcher.failure()).toBeUndefined();
    expect(watcher.events.at(-1)?.kind.case).toBe("sessionDeleted");
  }, 60_000);
});

describe.skipIf(!POSTGRES)("two ledgers configured for NATS while NATS is unreachable", () => {
  it("both start; a prompt on C reaches D's WatchSession through the catch-up check, every event", async () => {
    const down = await closedNatsUrl();
    const C = await ledger([down], 100);
    const D = await ledger([down], 100);
    expect((C.ledger.deps.relay as NatsRelay).stats().connected).toBe(false);
    const sessionId = (await C.client.createSession({ directory: dir })).session!.id;
    const watcher = collectEvents((signal) => D.client.watchSession({ sessionId, afterSeq: 0n }, { signal }));
    await watcher.reach(1n);

    const streamed: SessionEvent[] = [];
    for await (const res of C.client.promptStream({ sessionId, noReply: true, parts: [text("one")] })) streamed.push(res.event!);
    for await (const res of C.client.promptStream({ sessionId, noReply: true, parts: [text("two")] })) streamed.push(res.event!);
    await watcher.reach(streamed.at(-1)!.seq, 5_000);
    await watcher.stop();
    const table = await stored(C.ledger, sessionId);
    expect(table.at(-1)?.seq).toBe(streamed.at(-1)?.seq);
    expect(watcher.events).toEqual(table);
  }, 60_000);
});

describe.skipIf(!POSTGRES)("NATS with the embedded PGlite database", () => {
  it("is refused at start with a ConfigError naming both, before the database is opened", async () => {
    const config = buildConfig(configFileSchema.parse({ bus: { nats: { servers: [NATS_URL] } } }), undefined, dir);
    await expect(startLedger({ config, database: { kind: "pglite", dir: ":memory:" } })).rejects.toThrow(
      new ConfigError(
        "bus.nats (or LEDGER_NATS_URL) needs a Postgres database (DATABASE_URL): the embedded PGlite database serves one process only, so there is no other replica to fan out to",
      ),
    );
  });
});

describe.skipIf(!NATS)("two `ledger serve` processes with LEDGER_NATS_URL", () => {
  let pair: ReplicaPair | undefined;

  beforeAll(async () => {
    pair = await startReplicaPair({ prefix: "ledger-nats-serve-", timeoutMs: 60_000, env: { LEDGER_NATS_URL: NATS_URL } });
  }, 150_000);
  afterAll(async () => {
    await pair?.close();
  }, 60_000);

  it("relay on NATS (no LISTEN connection on Postgres); a prompt on A is seen on B's WatchSession with the exact stored events", async () => {
    const { A, B } = pair!;
    const { rows } = await pair!.sql.query<{ n: string }>(
      "select count(*)::text as n from pg_stat_activity where datname = current_database() and application_name = 'ledger-relay'",
    );
    expect(rows[0]!.n).toBe("0");
    // Each replica says on stderr which relay it uses (the line arrives on its own pipe: wait for it).
    for (const replica of [A, B]) await waitFor(`${replica.name}: the relay line`, () => /^relay: /m.test(replica.stderr()), 10_000);
    for (const replica of [A, B]) expect(replica.stderr()).toMatch(new RegExp(`^relay: nats ${NATS_URL} \\(connected\\)$`, "m"));
    const sessionId = (await A.connect.createSession({ directory: pair!.dir })).session!.id;
    const watcher = collectEvents((signal) => B.grpc.watchSession({ sessionId, afterSeq: 0n }, { signal }));
    await watcher.reach(1n);
    const streamed: SessionEvent[] = [];
    for await (const res of A.grpc.promptStream({ sessionId, noReply: true, parts: [text("over NATS")] })) streamed.push(res.event!);
    await watcher.reach(streamed.at(-1)!.seq);
    await watcher.stop();
    const { rows: table } = await pair!.sql.query<{ data: JsonObject }>(
      "select data from session_event where session_id = $1 order by seq",
      [sessionId],
    );
    expect(watcher.events).toEqual(table.map((r) => fromJson(SessionEventSchema, r.data, { ignoreUnknownFields: true })));
    expect(watcher.events.slice(1)).toEqual(streamed);
  }, 60_000);
});
