import { Counter, Gauge, type Registry } from "prom-client";
import type { RelayStats } from "../events/relay-stats.js";

/**
 * Registers the relay's metrics on `registry`, each read from `stats()` at scrape time
 * (docs/operations.md "Metrics" and "Running a fleet"):
 * - `ledger_relay_info{relay}` 1, `relay` = `postgres` or `nats`;
 * - `ledger_relay_connected` 1 when the relay is connected (LISTEN connection or NATS server), else 0;
 * - `ledger_relay_messages_received_total`, `ledger_relay_hints_received_total` (commit hints from
 *   other replicas) and `ledger_relay_last_hint_age_seconds` (since the last one, or since the
 *   catch-up check started when none arrived yet);
 * - `ledger_relay_catch_up_checks_total`, `ledger_relay_catch_up_failures_total`,
 *   `ledger_relay_catch_up_hints_total` and `ledger_relay_catch_up_last_success_age_seconds`
 *   (since the last successful check, or since it started);
 * - `ledger_relay_subscribed_sessions` (registered only for the NATS relay: sessions whose
 *   subjects it is subscribed to).
 */
export function registerRelayMetrics(registry: Registry, stats: () => RelayStats): void {
  const registers = [registry];
  // Each metric reads `stats()` when it is collected: a few counters and a copy, cheap per scrape.
  new Gauge({
    name: "ledger_relay_info",
    help: "The relay to the other replicas in use (label relay: postgres or nats); always 1.",
    labelNames: ["relay"] as const,
    registers,
    collect() {
      this.reset();
      this.set({ relay: stats().kind }, 1);
    },
  });
  gauge(registers, "ledger_relay_connected", "1 when the relay is connected (Postgres LISTEN connection, or a NATS server), else 0.", () =>
    stats().connected ? 1 : 0,
  );
  counter(
    registers,
    "ledger_relay_messages_received_total",
    "Messages delivered to the relay (hints, deltas, control; the Postgres relay counts its own notifications too).",
    () => stats().messages,
  );
  counter(registers, "ledger_relay_hints_received_total", "Commit hints received from other replicas.", () => stats().hints);
  gauge(
    registers,
    "ledger_relay_last_hint_age_seconds",
    "Seconds since the last commit hint from another replica (since the relay started when none arrived yet).",
    () => ageSeconds(stats().lastHintAt ?? stats().catchUp.startedAt),
  );
  counter(
    registers,
    "ledger_relay_catch_up_checks_total",
    "Catch-up checks that read the watched sessions' last seq from the table (periodic, and after a reconnect).",
    () => stats().catchUp.checks,
  );
  counter(registers, "ledger_relay_catch_up_failures_total", "Catch-up checks whose query failed.", () => stats().catchUp.failures);
  counter(
    registers,
    "ledger_relay_catch_up_hints_total",
    "Hints published by catch-up checks (one per watched session per check): watchers read past them from the table.",
    () => stats().catchUp.hints,
  );
  gauge(
    registers,
    "ledger_relay_catch_up_last_success_age_seconds",
    "Seconds since the last successful catch-up check (since it started when none succeeded yet).",
    () => ageSeconds(stats().catchUp.lastSuccessAt ?? stats().catchUp.startedAt),
  );
  if (stats().kind !== "nats") return;
  gauge(registers, "ledger_relay_subscribed_sessions", "Sessions whose NATS subjects the relay is subscribed to now.", () => {
    const subscribed = (stats() as RelayStats & { subscribed?: string[] }).subscribed;
    return subscribed?.length ?? 0;
  });
}

function gauge(registers: Registry[], name: string, help: string, value: () => number): void {
  new Gauge({
    name,
    help,
    registers,
    collect() {
      this.set(value());
    },
  });
}

function counter(registers: Registry[], name: string, help: string, value: () => number): void {
  new Counter({
    name,
    help,
    registers,
    collect() {
      this.reset();
      this.inc(value());
    },
  });
}

function ageSeconds(at: number): number {
  return Math.max(0, (Date.now() - at) / 1000);
}
