/**
 * What a relay reports about itself (`Relay.stats()`), read by `/metrics` (src/observe/metrics.ts)
 * and by health (src/server/health.ts); docs/operations.md "Running a fleet" says what to watch.
 */

/** Which relay a replica uses: Postgres LISTEN/NOTIFY (the default) or NATS (`bus.nats`). */
export type RelayKind = "postgres" | "nats";

/** The periodic catch-up check's counters (`startCatchUp`); times are `Date.now()` values (ms). */
export interface CatchUpStats {
  /** The check interval in ms (`events.catch_up_ms`); 0: the periodic check is off. */
  intervalMs: number;
  /** When the check started (ms since the epoch). */
  startedAt: number;
  /**
   * Checks that read the watched sessions' `last_seq` (one query each): the periodic ones and
   * the resyncs after a reconnect. A tick with nothing watched runs no query and is not counted.
   */
  checks: number;
  /** Checks whose query failed. */
  failures: number;
  /** Hints the checks published: one per watched session per check (feeds read past them from the table). */
  hints: number;
  /** When a check last succeeded (a tick with nothing watched counts); undefined before the first. */
  lastSuccessAt?: number;
  /** When a check last failed; undefined when none has. */
  lastFailureAt?: number;
}

/** A relay's state and counters since it started; see `Relay.stats()`. */
export interface RelayStats {
  /** Which relay this is. */
  kind: RelayKind;
  /**
   * Connected now: the relay's LISTEN connection to Postgres, or a connection to a NATS server
   * (false before the first connection and while reconnecting).
   */
  connected: boolean;
  /**
   * Messages delivered to the relay since it started (hints, deltas and control messages; the
   * Postgres relay also gets its own notifications back, which it skips).
   */
  messages: number;
  /** Commit hints received from other replicas. */
  hints: number;
  /** When the last commit hint from another replica arrived (ms since the epoch); undefined before the first. */
  lastHintAt?: number;
  /** The catch-up check. */
  catchUp: CatchUpStats;
}

/** How many check intervals may pass without a successful catch-up check before it counts as failing. */
export const CATCH_UP_GRACE_INTERVALS = 3;

/**
 * Whether the catch-up check covers for a relay that is disconnected: it runs (`intervalMs` > 0),
 * its last check did not fail, and one succeeded (or it started) at most
 * `CATCH_UP_GRACE_INTERVALS` intervals before `now` (ms since the epoch), so a hung query counts
 * as failing too.
 */
export function catchUpWorking(stats: CatchUpStats, now: number = Date.now()): boolean {
  if (stats.intervalMs <= 0) return false;
  const lastSuccess = stats.lastSuccessAt ?? stats.startedAt;
  if (stats.lastFailureAt !== undefined && stats.lastFailureAt >= lastSuccess) return false;
  return now - lastSuccess <= CATCH_UP_GRACE_INTERVALS * stats.intervalMs;
}

/**
 * What the relay means for health: `"connected"`; `"catching-up"` when it is disconnected but
 * the catch-up check covers (watchers follow the table, at most about one interval late: still
 * serving); `"failing"` when it is disconnected and the catch-up check is failing, off or stuck
 * (events of other replicas do not reach this one's watchers: not serving).
 */
export function relayCondition(stats: RelayStats, now: number = Date.now()): "connected" | "catching-up" | "failing" {
  if (stats.connected) return "connected";
  return catchUpWorking(stats.catchUp, now) ? "catching-up" : "failing";
}
