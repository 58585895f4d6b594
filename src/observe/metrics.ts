import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { RelayStats } from "../events/relay-stats.js";
import type { PoolStats } from "../storage/db.js";
import { registerRelayMetrics } from "./relay-metrics.js";

/** Token counts of one model step (the shape of the loop's `StepUsage`). */
export interface TokenCounts {
  input: number;
  output: number;
  reasoning: number;
  cacheRead: number;
  cacheWrite: number;
}

/** What the loop knows when a model step ends (a subset of its `StepResult`). */
export interface StepOutcome {
  finishReason?: string;
  usage?: TokenCounts;
  error?: unknown;
  aborted: boolean;
}

/**
 * The ledger's Prometheus metrics, in a registry of their own (not prom-client's global one), so
 * several ledgers in one process (tests) do not share or clash.
 */
export interface LedgerMetrics {
  readonly registry: Registry;
  /** Counts one finished RPC (`code`: "ok" or a Connect code name) and records its duration. */
  observeRpc(procedure: string, code: string, seconds: number): void;
  /** Counts one finished model step and its tokens. */
  observeStep(model: { providerId: string; modelId: string }, step: StepOutcome): void;
  /**
   * Counts one refusal of quota `quota` (`prompts_per_minute`, `concurrent_loops`, `stored_bytes`) for a caller of
   * `tenant`, a label the caller has already bounded (a configured tenant's name, `other` or `none`).
   */
  observeQuotaExceeded(tenant: string, quota: string): void;
  /** The exposition text of every metric (collects the pool gauge and process metrics). */
  scrape(): Promise<string>;
  /** `Content-Type` of `scrape()`'s text. */
  readonly contentType: string;
}

/** `ledger_rpc_duration_seconds` buckets: 5 ms … 5 min (streams and replies that wait for the agent loop run long). */
const RPC_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

const TOKEN_KINDS: ReadonlyArray<[keyof TokenCounts, string]> = [
  ["input", "input"],
  ["output", "output"],
  ["reasoning", "reasoning"],
  ["cacheRead", "cache_read"],
  ["cacheWrite", "cache_write"],
];

/**
 * Creates the metrics:
 * - `ledger_rpc_requests_total{procedure,code}` and `ledger_rpc_duration_seconds{procedure}`;
 * - `ledger_loop_steps_total{provider,model,finish}` (`finish`: the model's finish reason, or
 *   `error` / `aborted`) and `ledger_tokens_total{provider,model,kind}`
 *   (kind: input, output, reasoning, cache_read, cache_write);
 * - `ledger_quota_exceeded_total{tenant,quota}`: calls refused by a quota (docs/security.md, "Quotas");
 * - `ledger_db_pool_connections{state}` (total, idle, waiting), read from `pool` on each scrape
 *   (only when `pool` is given);
 * - the `ledger_relay_*` metrics of `registerRelayMetrics`, read from `relay` on each scrape (only
 *   when `relay` is given: a ledger on Postgres);
 * - prom-client's default process metrics (`process_*`, `nodejs_*`) unless `processMetrics` is false.
 */
export function createMetrics(options: { pool?: () => PoolStats; relay?: () => RelayStats; processMetrics?: boolean } = {}): LedgerMetrics {
  const registry = new Registry();
  const registers = [registry];
  const rpcRequests = new Counter({
    name: "ledger_rpc_requests_total",
    help: "RPCs served, by procedure and result code (ok or the Connect code name).",
    labelNames: ["procedure", "code"] as const,
    registers,
  });
  const rpcDuration = new Histogram({
    name: "ledger_rpc_duration_seconds",
    help: "Time from the start of an RPC to its end (for server streams: until the stream ends).",
    labelNames: ["procedure"] as const,
    buckets: RPC_BUCKETS,
    registers,
  });
  const loopSteps = new Counter({
    name: "ledger_loop_steps_total",
    help: "Model steps run by the agent loop, by provider, model and finish reason.",
    labelNames: ["provider", "model", "finish"] as const,
    registers,
  });
  const tokens = new Counter({
    name: "ledger_tokens_total",
    help: "Tokens used by model steps, by provider, model and kind (input, output, reasoning, cache_read, cache_write).",
    labelNames: ["provider", "model", "kind"] as const,
    registers,
  });
  const quotaExceeded = new Counter({
    name: "ledger_quota_exceeded_total",
    help: "Calls refused by a quota, by tenant (a configured tenant, other or none) and quota (prompts_per_minute, concurrent_loops, stored_bytes).",
    labelNames: ["tenant", "quota"] as const,
    registers,
  });
  const pool = options.pool;
  if (pool) {
    new Gauge({
      name: "ledger_db_pool_connections",
      help: "Database connections: total open, idle, and requests waiting for one (PGlite: 1/0/0).",
      labelNames: ["state"] as const,
      registers,
      collect() {
        const stats = pool();
        this.set({ state: "total" }, stats.total);
        this.set({ state: "idle" }, stats.idle);
        this.set({ state: "waiting" }, stats.waiting);
      },
    });
  }
  if (options.relay) registerRelayMetrics(registry, options.relay);
  if (options.processMetrics !== false) collectDefaultMetrics({ register: registry });

  return {
    registry,
    contentType: registry.contentType,
    observeRpc(procedure, code, seconds) {
      rpcRequests.inc({ procedure, code });
      rpcDuration.observe({ procedure }, seconds);
    },
    observeStep(model, step) {
      const labels = { provider: model.providerId, model: model.modelId };
      const finish = step.aborted ? "aborted" : step.error !== undefined ? "error" : (step.finishReason ?? "unknown");
      loopSteps.inc({ ...labels, finish });
      const usage = step.usage;
      if (!usage) return;
      for (const [field, kind] of TOKEN_KINDS) {
        const n = usage[field];
        if (Number.isFinite(n) && n > 0) tokens.inc({ ...labels, kind }, n);
      }
    },
    observeQuotaExceeded(tenant, quota) {
      quotaExceeded.inc({ tenant, quota });
    },
    scrape: () => registry.metrics(),
  };
}
