import { setTimeout as sleep } from "node:timers/promises";
import { createModelResolver, type ModelResolver } from "./agent/providers.js";
import { recoverInterrupted } from "./agent/recovery.js";
import { createRunner } from "./agent/runner.js";
import { postgresLocks, processLocks, type SessionLocks } from "./agent/session-lock.js";
import { startPgRelay } from "./events/pg-relay.js";
import type { Relay } from "./events/relay.js";
import { pruneEvents } from "./storage/event-store.js";
import { ConfigError, type LedgerConfig } from "./config/config.js";
import { EventBus } from "./events/bus.js";
import type { LedgerDeps } from "./ledger/deps.js";
import { logger } from "./observe/log.js";
import { createMetrics } from "./observe/metrics.js";
import type { Tracing, TracingOptions } from "./observe/tracing.js";
import { startMcp } from "./mcp/client.js";
import { loadPlugins } from "./plugins/plugins.js";
import { isLoopback } from "./server/auth.js";
import { createServer } from "./server/server.js";
import type { WebPage } from "./server/web-page.js";
import { openDatabase, type Database, type DatabaseTarget } from "./storage/db.js";
import { fillDataBytes } from "./storage/backfill.js";
import { Snapshots } from "./snapshot/snapshot.js";

/** How to start a ledger. */
export interface StartOptions {
  config: LedgerConfig;
  database: DatabaseTarget;
  /** Default "127.0.0.1". */
  host?: string;
  /** Default 0 (a free port). */
  port?: number;
  /** Where models come from; default: the providers in `config` (tests may pass scripted models). */
  models?: ModelResolver;
  /** The browser page to serve at `/` (see `loadWebPage`); absent: none. */
  web?: WebPage;
  /** Options of the tracing started when `config.telemetry.enabled` (tests: in-memory span processors). */
  tracing?: TracingOptions;
}

/** A running ledger: its URL, its database, and a graceful `close`. */
export interface RunningLedger {
  url: string;
  port: number;
  host: string;
  database: Database;
  deps: LedgerDeps;
  /**
   * Starts draining without closing (`LedgerServer.drain`): health answers `NOT_SERVING`, new
   * RPCs `UNAVAILABLE` (`DRAINING`), open streams end with `UNAVAILABLE` and their cursor.
   */
  drain(): void;
  /**
   * Drains (see `drain`), stops accepting, waits for in-flight unary requests and running agent
   * loops (up to `graceMs`, default 10,000 ms), hands over the loops still running (their
   * answers end `interrupted`, their locks are released: `ResumeSession` on another replica
   * continues them), closes the database, then flushes and stops tracing (when it runs). See
   * docs/operations.md, "Running behind a load balancer". `options.quietMs`: how long it waits
   * for requests still on their way (`CloseHooks.quietMs`: default 200 ms, 0 for a server only
   * its own process calls). A second call returns the first call's promise.
   */
  close(graceMs?: number, options?: { quietMs?: number }): Promise<void>;
}

/** How long (ms) the last hand-over of agent loops may take before the database closes anyway. */
const HAND_OVER_MAX_MS = 5000;

/**
 * Throws `ConfigError` when `host` (the address to bind: a name or an IP) is not a loopback
 * address and `config` has neither a static token nor JSON Web Tokens: such a server would
 * answer anyone who can reach it. {@link startLedger} checks it first; `ledger serve` calls it
 * before it makes or locks an embedded database, so a refusal leaves nothing behind.
 */
export function checkHostAuth(host: string, config: LedgerConfig): void {
  if (!isLoopback(host) && !config.token && !config.jwt) {
    throw new ConfigError(
      `--host ${host}: binding a non-loopback address requires authentication; set LEDGER_TOKEN (16+ characters) or auth.token, or JSON Web Tokens (LEDGER_JWT_SECRET or auth.jwt) in ledger.json`,
    );
  }
}

/**
 * Opens the database (running migrations), loads plugins, recovers interrupted answers, and
 * starts the server on one plaintext port. Throws `ConfigError` when a non-loopback `host` has
 * no token, when NATS is configured with the embedded PGlite database, and when the database cannot be opened or a plugin cannot be loaded (closing what
 * was opened). With `config.telemetry.enabled`, first starts OpenTelemetry tracing
 * (./observe/tracing.ts, imported only then; docs/operations.md#tracing).
 */
export async function startLedger(options: StartOptions): Promise<RunningLedger> {
  const host = options.host ?? "127.0.0.1";
  checkHostAuth(host, options.config);
  // Tenants limit their own sessions only: the static token's (and a server without tenants')
  // are limited by session_directories alone.
  const { sessionDirectories, tenants, token } = options.config;
  if (!isLoopback(host) && !sessionDirectories && (!tenants || token)) {
    logger.warn(
      `--host ${host}: any caller allowed to write may create a session in any directory this server can read, and so read its files: set session_directories in ledger.json. ` +
        `Shell commands (Shell, the bash tool) are confined by no directory: deny bash to the agents, or serve tenants without "commands" (docs/security.md, "Which directories sessions may use")`,
    );
  }
  const target = options.database;
  if (options.config.nats && target.kind !== "postgres") {
    throw new ConfigError(
      "bus.nats (or LEDGER_NATS_URL) needs a Postgres database (DATABASE_URL): the embedded PGlite database serves one process only, so there is no other replica to fan out to",
    );
  }
  const tracing = options.config.telemetry.enabled ? await startTracing(options) : undefined;
  const database = await openDatabase(options.database).catch(async (error: unknown) => {
    await tracing?.shutdown();
    throw error;
  });
  const bus = new EventBus();
  let relay: Relay | undefined;
  let locks: SessionLocks | undefined;
  try {
    const plugins = await loadPlugins(options.config.plugins);
    relay = await startRelay(options.config, target, database, bus);
    const relayStats = relay ? relay.stats.bind(relay) : undefined;
    const metrics = createMetrics({ pool: () => database.poolStats(), relay: relayStats });
    const snapshots = new Snapshots(options.config.snapshot);
    const deps: LedgerDeps = { db: database.db, bus, relay, config: options.config, plugins, metrics, snapshots };
    deps.mcp = await startMcp(options.config);
    // Session locks on connections of their own, at most limits.lock_connections of them.
    locks = target.kind === "postgres" ? postgresLocks(target.url, { max: options.config.limits.lock_connections }) : processLocks();
    deps.replier = createRunner(deps, options.models ?? createModelResolver(options.config), locks);
    const recovered = await recoverInterrupted(deps, locks);
    if (recovered.messages > 0 || recovered.sessions > 0) {
      process.stderr.write(
        `recovered ${recovered.messages} interrupted answer(s) in ${recovered.sessions} session(s); ResumeSession reruns them\n`,
      );
    }
    const retention = startRetention(database.db, options.config.eventRetentionMs);
    const backfill = startBackfill(database.db);
    const server = createServer(deps, { web: options.web });
    const address = await server.listen(options.port ?? 0, host);
    const openRelay = relay;
    const openLocks = locks;
    let closing: Promise<void> | undefined;
    const closeAll = async (graceMs: number | undefined, quietMs: number | undefined) => {
      const handOver = async () => {
        const runs = deps.replier?.activeRuns() ?? 0;
        if (runs > 0)
          process.stderr.write(
            `grace period over: handing over ${runs} agent loop(s) still running (answers end interrupted, session locks released; ResumeSession on another replica continues them)\n`,
          );
        // Also ends runs still waiting for a lock another replica holds.
        await deps.replier?.handOver();
      };
      await server.close(graceMs, { busy: () => (deps.replier?.activeRuns() ?? 0) > 0, beforeForce: handOver, quietMs });
      // Loops that started after the grace period (a prompt in the last moment) go the same way,
      // for at most HAND_OVER_MAX_MS (a tool that ignores its abort signal must not hold the exit).
      await Promise.race([handOver(), sleep(HAND_OVER_MAX_MS, undefined, { ref: false })]);
      await openLocks.close();
      await deps.mcp?.close();
      clearInterval(retention);
      await backfill.stop();
      await openRelay?.close();
      await database.close();
      await tracing?.shutdown();
    };
    return {
      ...address,
      database,
      deps,
      drain: () => server.drain(),
      close(graceMs, options) {
        // Idempotent: a second call (SIGINT after SIGTERM, a test's cleanup) waits for the first.
        closing ??= closeAll(graceMs, options?.quietMs);
        return closing;
      },
    };
  } catch (error) {
    await relay?.close();
    await locks?.close();
    await database.close();
    await tracing?.shutdown();
    throw error;
  }
}

/** Loads the OpenTelemetry SDK (only now: a ledger without telemetry never loads it) and starts tracing. */
async function startTracing(options: StartOptions): Promise<Tracing> {
  const tracing = await import("./observe/tracing.js");
  return tracing.startTracing(options.config.telemetry, options.tracing);
}

/**
 * The relay to the other replicas: none on PGlite (one process), the NATS relay when
 * `config.nats` is set, else the Postgres relay (LISTEN/NOTIFY).
 */
async function startRelay(config: LedgerConfig, target: DatabaseTarget, database: Database, bus: EventBus): Promise<Relay | undefined> {
  if (target.kind !== "postgres") return undefined;
  const catchUpMs = config.eventCatchUpMs;
  if (config.nats) {
    // Loaded on use: a ledger without NATS never loads the NATS client.
    const { startNatsRelay } = await import("./events/nats-relay.js");
    return startNatsRelay({ ...config.nats, db: database.db, bus, catchUpMs });
  }
  return startPgRelay({ url: target.url, db: database.db, bus, catchUpMs });
}

/** Rows `startBackfill` fills per statement, and the pause between statements (ms). */
const BACKFILL = { rows: 200, pauseMs: 20 };

/**
 * Fills `data_bytes` on message and part rows stored before it existed (`fillDataBytes`), in the
 * background, `BACKFILL.rows` per statement with a pause between, until none is left; logs how
 * many it filled, and a failure (the next start tries again). Without it ListMessages measures
 * those rows' JSON text on every call. `stop()` ends it (at close, before the database closes).
 */
function startBackfill(db: Database["db"]): { stop(): Promise<void> } {
  let stopped = false;
  const run = (async () => {
    let filled = 0;
    for (const table of ["message", "part"] as const) {
      for (let n = BACKFILL.rows; n > 0 && !stopped;) {
        n = await fillDataBytes(db, table, BACKFILL.rows);
        filled += n;
        if (n > 0) await sleep(BACKFILL.pauseMs, undefined, { ref: false });
      }
    }
    if (filled > 0) logger.info("filled data_bytes of rows stored before it existed", { rows: filled });
  })().catch((error: unknown) => logger.warn("filling data_bytes failed; the next start tries again", { error }));
  return {
    async stop() {
      stopped = true;
      await run;
    },
  };
}

/** How often (ms) old events are pruned. */
const RETENTION_INTERVAL_MS = 10 * 60 * 1000;

/** Prunes events older than `retentionMs` now and every 10 minutes; failures are logged. */
function startRetention(db: Database["db"], retentionMs: number): NodeJS.Timeout {
  const prune = () =>
    void pruneEvents(db, new Date(Date.now() - retentionMs)).catch((error: unknown) =>
      process.stderr.write(`event retention failed: ${String(error)}\n`),
    );
  prune();
  return setInterval(prune, RETENTION_INTERVAL_MS).unref();
}
