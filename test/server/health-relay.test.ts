import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { sql } from "kysely";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { TEST_ENGINE } from "../support/db.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { closedNatsUrl } from "../support/nats.js";
import { waitFor } from "../support/wait.js";

// Health with the relay in the picture (src/server/health.ts, relayCondition): a ledger on a real
// Postgres whose NATS is unreachable stays SERVING while its catch-up check works, and is
// NOT_SERVING only once that check fails too (a renamed session table: `select 1` still answers)
// or hangs (a lock held on the session table by another connection). Postgres only: PGlite has
// no relay and refuses NATS.

const CATCH_UP_MS = 100;

describe.skipIf(TEST_ENGINE !== "postgres")("health: NATS down, Postgres up", () => {
  let t: TestLedger;
  let health: Client<typeof Health>;
  let stopWatching: () => void;

  beforeAll(async () => {
    t = await startTestLedger({ events: { catch_up_ms: CATCH_UP_MS }, bus: { nats: { servers: [await closedNatsUrl()] } } });
    health = createClient(Health, createGrpcTransport({ baseUrl: t.ledger.url }));
    // A watched session (as a WatchSession makes it), so each catch-up check runs its query.
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    stopWatching = t.ledger.deps.bus.subscribe(sessionId, () => {});
  });
  afterAll(async () => {
    stopWatching?.();
    await t?.close();
  });

  const status = async () => (await health.check({ service: "" })).status;
  const checks = () => t.ledger.deps.relay!.stats().catchUp;

  it("is SERVING: the relay is disconnected but the catch-up check works", async () => {
    await waitFor("two catch-up checks", () => checks().checks >= 2, 5_000);
    expect(t.ledger.deps.relay!.stats()).toMatchObject({ kind: "nats", connected: false });
    expect(await status()).toBe(ServingStatus.SERVING);
    expect((await health.check({ service: "ledger.v1.SessionService" })).status).toBe(ServingStatus.SERVING);
  });

  it("is NOT_SERVING while the catch-up query fails, and SERVING again once it succeeds", async () => {
    await sql`alter table session rename to session_away`.execute(t.ledger.database.db);
    try {
      await waitFor("a failed check", () => checks().failures >= 1, 5_000);
      expect(await status()).toBe(ServingStatus.NOT_SERVING);
      expect((await health.list({})).statuses[""]?.status).toBe(ServingStatus.NOT_SERVING);
    } finally {
      await sql`alter table session_away rename to session`.execute(t.ledger.database.db);
    }
    await waitFor("a successful check", () => checks().lastSuccessAt! > checks().lastFailureAt!, 5_000);
    expect(await status()).toBe(ServingStatus.SERVING);
  });

  it("is NOT_SERVING when the catch-up query hangs for 3 intervals (a lock on the session table), SERVING once it returns", async () => {
    const locker = new pg.Client({ connectionString: t.database.url! });
    await locker.connect();
    try {
      await locker.query("begin");
      await locker.query("lock table session in access exclusive mode");
      // `select 1` still answers; the check's query waits for the lock.
      await waitFor(
        "3 intervals without a successful check",
        () => Date.now() - (checks().lastSuccessAt ?? 0) > 3 * CATCH_UP_MS + 50,
        5_000,
      );
      expect(await status()).toBe(ServingStatus.NOT_SERVING);
    } finally {
      await locker.query("rollback").catch(() => {});
      await locker.end();
    }
    await waitFor("health back to SERVING", async () => (await status()) === ServingStatus.SERVING, 5_000);
  });
});

describe.skipIf(TEST_ENGINE !== "postgres")("health: NATS down and the catch-up check off", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger({ events: { catch_up_ms: 0 }, bus: { nats: { servers: [await closedNatsUrl()] } } });
  });
  afterAll(async () => {
    await t?.close();
  });

  it("is NOT_SERVING: nothing covers for the unreachable bus", async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: t.ledger.url }));
    expect((await health.check({ service: "" })).status).toBe(ServingStatus.NOT_SERVING);
  });
});
