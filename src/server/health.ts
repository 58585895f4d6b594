import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { relayCondition } from "../events/relay-stats.js";
import type { LedgerDeps } from "../ledger/deps.js";
import { logger } from "../observe/log.js";
import { ping } from "../storage/db.js";

/** Service names `Check`/`Watch` know: "" (the whole server) and the ledger's service. */
export const HEALTH_SERVICES: readonly string[] = ["", SessionService.typeName];

/** Options of {@link createHealthHandlers}. */
export interface HealthOptions {
  /** How long (ms) the database gets to answer `select 1` before the server counts as not serving. Default 1,000. */
  probeTimeoutMs?: number;
  /** How often (ms) an open `Watch` re-checks the database. Default 3,000. */
  watchPollMs?: number;
  /** True while the server drains (see `drain.ts`): every known service is then `NOT_SERVING`. */
  draining?: () => boolean;
}

/**
 * `grpc.health.v1.Health` (https://github.com/grpc/grpc/blob/master/doc/health-checking.md).
 * A known service is `SERVING` when the database answers `select 1` within `probeTimeoutMs`
 * and the relay to the other replicas (`deps.relay`, Postgres only) is connected or, while it
 * is not, its catch-up check still works (`relayCondition`: watchers then follow the table, at
 * most about one `events.catch_up_ms` late); `NOT_SERVING` when the database does not answer,
 * or when the relay is disconnected AND the catch-up check is failing, off or stuck (no success
 * within `CATCH_UP_GRACE_INTERVALS` intervals). A change of the relay's condition is logged
 * once (warn while degraded or failing, info when connected again). Concurrent probes share
 * one query, so a hung database holds at most one connection for health checks. `Check` of an unknown service is `NOT_FOUND`; `Watch` sends the
 * current status, then each change (polling every `watchPollMs` while watched), and for an
 * unknown service `SERVICE_UNKNOWN` once; it ends when the client cancels (or the server shuts
 * down). While the server drains (`options.draining`) every known service is `NOT_SERVING` at
 * once, without a probe; an open `Watch` (whose signal the drain aborts) sends `NOT_SERVING`
 * if it has not yet, then returns, and the drain's interceptor ends it with `UNAVAILABLE`.
 * Callable without the bearer token (see `auth.ts`).
 *
 * ```ts
 * router.service(Health, createHealthHandlers(deps));
 * ```
 */
export function createHealthHandlers(deps: Pick<LedgerDeps, "db" | "relay">, options: HealthOptions = {}): ServiceImpl<typeof Health> {
  const probe = createProbe(deps, options.probeTimeoutMs ?? PROBE_TIMEOUT_MS);
  const pollMs = options.watchPollMs ?? WATCH_POLL_MS;
  const relayServing = createRelayCheck(deps);
  const draining = options.draining ?? (() => false);
  const status = async () => {
    if (draining()) return ServingStatus.NOT_SERVING;
    return (await probe()) && relayServing() ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
  };
  return {
    async check(req) {
      if (!HEALTH_SERVICES.includes(req.service)) throw new ConnectError(`unknown service ${JSON.stringify(req.service)}`, Code.NotFound);
      return { status: await status() };
    },
    async *watch(req, ctx) {
      if (!HEALTH_SERVICES.includes(req.service)) {
        // The set of services never changes, so there is nothing more to send.
        yield { status: ServingStatus.SERVICE_UNKNOWN };
        await sleep(Infinity, ctx.signal);
        return;
      }
      let last: ServingStatus | undefined;
      while (!ctx.signal.aborted) {
        const current = await status();
        if (current !== last && !ctx.signal.aborted) {
          last = current;
          yield { status: current };
        }
        await sleep(pollMs, ctx.signal);
      }
      if (draining() && last !== ServingStatus.NOT_SERVING) yield { status: ServingStatus.NOT_SERVING };
    },
    async list() {
      const current = await status();
      return { statuses: Object.fromEntries(HEALTH_SERVICES.map((name) => [name, { status: current }])) };
    },
  };
}

/** Default time (ms) the database gets to answer a health probe. */
const PROBE_TIMEOUT_MS = 1000;
/** Default interval (ms) between probes of an open `Watch`. */
const WATCH_POLL_MS = 3000;

/**
 * `() => boolean`: false only when the relay is disconnected and its catch-up check is failing;
 * always true without a relay (PGlite). Logs each change of the relay's condition once.
 */
function createRelayCheck(deps: Pick<LedgerDeps, "relay">): () => boolean {
  let last: ReturnType<typeof relayCondition> = "connected";
  return () => {
    if (!deps.relay) return true;
    const stats = deps.relay.stats();
    const condition = relayCondition(stats);
    if (condition !== last) {
      const fields = { relay: stats.kind, catch_up_failures: stats.catchUp.failures };
      if (condition === "connected") logger.info("health: relay connected again", fields);
      else if (condition === "catching-up")
        logger.warn("health: relay disconnected; still SERVING, watchers follow the table through the catch-up check", fields);
      else logger.warn("health: NOT_SERVING, relay disconnected and its catch-up check is failing", fields);
      last = condition;
    }
    return condition !== "failing";
  };
}

/** `() => Promise<boolean>`: true when `select 1` succeeded within `timeoutMs`. */
function createProbe(deps: Pick<LedgerDeps, "db">, timeoutMs: number): () => Promise<boolean> {
  let pending: Promise<boolean> | undefined;
  return () => {
    if (!pending) {
      const query = ping(deps.db).then(
        () => true,
        () => false,
      );
      pending = query;
      void query.finally(() => {
        if (pending === query) pending = undefined;
      });
    }
    const answer = pending;
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      timer.unref();
      void answer.then((ok) => {
        clearTimeout(timer);
        resolve(ok);
      });
    });
  };
}

/** Resolves after `ms` (never for `Infinity`) or as soon as `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = Number.isFinite(ms) ? setTimeout(done, ms) : undefined;
    timer?.unref();
    signal.addEventListener("abort", done, { once: true });
  });
}
