import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsRelay } from "../../src/events/nats-relay.js";
import { EVENTS_CHANNEL } from "../../src/events/pg-relay.js";
import { notify } from "../../src/storage/notify.js";
import { TEST_ENGINE } from "../support/db.js";
import { parseExposition, sample, type Sample } from "../support/exposition.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { closedNatsUrl, NATS_URL, natsReachable } from "../support/nats.js";
import { waitFor } from "../support/wait.js";

// The relay's metrics (src/observe/relay-metrics.ts) as a real ledger on Postgres serves them on
// GET /metrics: with the Postgres relay, with the NATS relay on the machine's NATS server, and
// with NATS unreachable. PGlite has no relay and no ledger_relay_* metrics (tested last).

const POSTGRES = TEST_ENGINE === "postgres";
const NATS = POSTGRES && (await natsReachable());

async function scrape(t: TestLedger): Promise<{ body: string; samples: Sample[] }> {
  const res = await fetch(`${t.ledger.url}/metrics`);
  expect(res.status).toBe(200);
  const body = await res.text();
  return { body, samples: parseExposition(body) };
}

/** Makes `sessionId` watched on the ledger's bus, as a WatchSession does; returns the unsubscribe. */
function watch(t: TestLedger, sessionId: string): () => void {
  return t.ledger.deps.bus.subscribe(sessionId, () => {});
}

describe.skipIf(!POSTGRES)("relay metrics: the Postgres relay", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger({ events: { catch_up_ms: 50 } });
  });
  afterAll(async () => {
    await t?.close();
  });

  it("names the relay, reports it connected, counts catch-up checks and hints from other replicas", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const stop = watch(t, sessionId);
    const relay = t.ledger.deps.relay!;
    await waitFor("a catch-up check", () => relay.stats().catchUp.checks >= 2, 5_000);
    // A commit hint from another replica (its origin is not ours), sent as one would.
    await notify(t.ledger.database.db, EVENTS_CHANNEL, `other|${sessionId}|1`);
    await waitFor("the hint", () => relay.stats().hints >= 1, 5_000);
    stop();

    const { body, samples } = await scrape(t);
    expect(sample(samples, "ledger_relay_info", { relay: "postgres" })).toBe(1);
    expect(samples.filter((s) => s.name === "ledger_relay_info")).toHaveLength(1);
    expect(sample(samples, "ledger_relay_connected")).toBe(1);
    expect(sample(samples, "ledger_relay_hints_received_total")).toBe(1);
    expect(sample(samples, "ledger_relay_messages_received_total")).toBeGreaterThanOrEqual(1);
    expect(sample(samples, "ledger_relay_last_hint_age_seconds")).toBeGreaterThanOrEqual(0);
    expect(sample(samples, "ledger_relay_last_hint_age_seconds")).toBeLessThan(5);
    expect(sample(samples, "ledger_relay_catch_up_checks_total")).toBeGreaterThanOrEqual(2);
    expect(sample(samples, "ledger_relay_catch_up_hints_total")).toBeGreaterThanOrEqual(2);
    expect(sample(samples, "ledger_relay_catch_up_failures_total")).toBe(0);
    expect(sample(samples, "ledger_relay_catch_up_last_success_age_seconds")).toBeLessThan(5);
    expect(sample(samples, "ledger_relay_subscribed_sessions")).toBeUndefined();
    expect(body).toContain("# TYPE ledger_relay_catch_up_checks_total counter");
    expect(body).toContain("# TYPE ledger_relay_connected gauge");
    expect(body).toMatch(/# HELP ledger_relay_last_hint_age_seconds \S/);
  });
});

describe.skipIf(!NATS)("relay metrics: the NATS relay, NATS up", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger({ events: { catch_up_ms: 50 }, bus: { nats: { servers: [NATS_URL], name: "test-metrics" } } });
  });
  afterAll(async () => {
    await t?.close();
  });

  it("names the NATS relay, reports it connected and the sessions it is subscribed to", async () => {
    const before = await scrape(t);
    expect(sample(before.samples, "ledger_relay_info", { relay: "nats" })).toBe(1);
    expect(sample(before.samples, "ledger_relay_connected")).toBe(1);
    expect(sample(before.samples, "ledger_relay_subscribed_sessions")).toBe(0);
    expect(sample(before.samples, "ledger_relay_hints_received_total")).toBe(0);

    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const stop = watch(t, sessionId);
    const relay = t.ledger.deps.relay as NatsRelay;
    await waitFor("a catch-up check", () => relay.stats().catchUp.checks >= 1, 5_000);
    const { samples } = await scrape(t);
    expect(sample(samples, "ledger_relay_subscribed_sessions")).toBe(1);
    expect(sample(samples, "ledger_relay_catch_up_checks_total")).toBeGreaterThanOrEqual(1);
    expect(sample(samples, "ledger_relay_catch_up_failures_total")).toBe(0);
    stop();
    expect(sample((await scrape(t)).samples, "ledger_relay_subscribed_sessions")).toBe(0);
  });
});

describe.skipIf(!POSTGRES)("relay metrics: the NATS relay, NATS unreachable", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger({ events: { catch_up_ms: 50 }, bus: { nats: { servers: [await closedNatsUrl()] } } });
  });
  afterAll(async () => {
    await t?.close();
  });

  it("reports it disconnected while the catch-up check still runs", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const stop = watch(t, sessionId);
    await waitFor("a catch-up check", () => t.ledger.deps.relay!.stats().catchUp.checks >= 1, 5_000);
    stop();
    const { samples } = await scrape(t);
    expect(sample(samples, "ledger_relay_info", { relay: "nats" })).toBe(1);
    expect(sample(samples, "ledger_relay_connected")).toBe(0);
    expect(sample(samples, "ledger_relay_catch_up_checks_total")).toBeGreaterThanOrEqual(1);
    expect(sample(samples, "ledger_relay_catch_up_failures_total")).toBe(0);
    expect(sample(samples, "ledger_relay_subscribed_sessions")).toBe(0);
  });
});

describe.skipIf(POSTGRES)("relay metrics: PGlite", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger();
  });
  afterAll(async () => {
    await t?.close();
  });

  it("has no relay, so no ledger_relay_* metrics", async () => {
    const { samples } = await scrape(t);
    expect(samples.filter((s) => s.name.startsWith("ledger_relay_"))).toEqual([]);
    expect(sample(samples, "ledger_db_pool_connections", { state: "total" })).toBe(1);
  });
});
