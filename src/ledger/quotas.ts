import type { QuotaLimits } from "../config/quotas.js";
import { QuotaExceededError } from "../errors.js";
import type { Kysely } from "kysely";
import { countOpenAnswerSessions, sumStoredBytes } from "../storage/message-store.js";
import type { DB } from "../storage/schema.js";
import { countInWindow, type WindowCounter } from "../storage/quota-store.js";
import type { LedgerDeps } from "./deps.js";
import type { Principal } from "./principal.js";

/** The window of `prompts_per_minute`, in seconds. */
const MINUTE_S = 60;

/** A call that stores a user prompt, as the quotas see it. */
export interface PromptCall {
  /** The session the prompt goes to (its own running answer is not counted against `concurrent_loops`). */
  sessionId: string;
  /** True when the call starts (or joins) an agent loop: Prompt, PromptStream, PromptAsync and Command without `no_reply`. */
  startsLoop: boolean;
  /** The request's size in bytes (asked only when a `stored_bytes` quota applies). */
  bytes?: () => number;
}

/** How long (ms) a subject's stored bytes, as summed from the database, are reused on this replica. */
export const STORED_BYTES_TTL_MS = 10_000;
const storedBytes = new WeakMap<Kysely<DB>, Map<string, { bytes: number; at: number }>>();

/**
 * Checks and counts the quotas of `principal` (docs/security.md, "Quotas") for one call that
 * stores a user prompt, before anything is written. Only JWT principals are limited; the static
 * token and a server without authentication pass. In this order:
 * 1. `concurrent_loops` (when `call.startsLoop`): the principal's sessions, then its tenant's,
 *    other than `call.sessionId`, with a running answer in the database (every replica's), must
 *    be fewer than the limit;
 * 2. `stored_bytes`: the bytes stored in the principal's (then its tenant's) sessions
 *    (`sumStoredBytes`, summed at most every {@link STORED_BYTES_TTL_MS} ms per replica, plus
 *    the requests this replica let through since) must be below the limit;
 * 3. `prompts_per_minute`: the call is counted against the principal and its tenant in the
 *    current minute of the database clock (`countInWindow`, shared by every replica), unless one
 *    of them is full, in which case neither is counted.
 *
 * A refusal is counted in `ledger_quota_exceeded_total{tenant,quota}` ({@link tenantLabel}) and
 * throws `QuotaExceededError` (RESOURCE_EXHAUSTED, `QuotaFailure`; `RetryInfo` with the time
 * until the minute ends for `prompts_per_minute`).
 */
export async function checkPromptQuotas(
  deps: Pick<LedgerDeps, "db" | "config" | "metrics">,
  principal: Principal,
  call: PromptCall,
): Promise<void> {
  if (principal.via !== "jwt") return;
  const tenant = principal.tenant ?? null;
  const scopes: Array<{ scope: "principal" | "tenant"; subject: string; key: string; limits: QuotaLimits; owner?: string }> = [
    {
      scope: "principal",
      subject: `principal:${principal.subject}`,
      key: `p:${encodeURIComponent(tenant ?? "")}/${encodeURIComponent(principal.subject)}`,
      limits: deps.config.quotas.principal,
      owner: principal.subject,
    },
    ...(tenant !== null
      ? [
          {
            scope: "tenant" as const,
            subject: `tenant:${tenant}`,
            key: `t:${encodeURIComponent(tenant)}`,
            limits: deps.config.quotas.tenant,
          },
        ]
      : []),
  ];
  const refuse = (error: QuotaExceededError): never => {
    deps.metrics?.observeQuotaExceeded(tenantLabel(deps.config, tenant), error.quota);
    throw error;
  };

  if (call.startsLoop) {
    for (const s of scopes) {
      const limit = s.limits.concurrentLoops;
      if (limit === undefined) continue;
      const running = await countOpenAnswerSessions(deps.db, { tenant, owner: s.owner }, call.sessionId);
      if (running >= limit) refuse(new QuotaExceededError("concurrent_loops", s.scope, s.subject, limit));
    }
  }

  const byteScopes = scopes.filter((s) => s.limits.storedBytes !== undefined);
  let cache = storedBytes.get(deps.db);
  if (!cache) storedBytes.set(deps.db, (cache = new Map()));
  const entries: Array<{ bytes: number; at: number }> = [];
  for (const s of byteScopes) {
    let entry = cache.get(s.key);
    if (!entry || Date.now() - entry.at > STORED_BYTES_TTL_MS) {
      entry = { bytes: await sumStoredBytes(deps.db, { tenant, owner: s.owner }), at: Date.now() };
      cache.set(s.key, entry);
    }
    if (entry.bytes >= s.limits.storedBytes!) refuse(new QuotaExceededError("stored_bytes", s.scope, s.subject, s.limits.storedBytes!));
    entries.push(entry);
  }

  const limited = scopes.filter((s) => s.limits.promptsPerMinute !== undefined);
  if (limited.length > 0) {
    const counters: WindowCounter[] = limited.map((s) => ({ key: s.key, limit: s.limits.promptsPerMinute! }));
    const { refused, retryAfterMs } = await countInWindow(deps.db, counters, MINUTE_S);
    if (refused !== undefined) {
      const s = limited[refused]!;
      refuse(new QuotaExceededError("prompts_per_minute", s.scope, s.subject, counters[refused]!.limit, retryAfterMs));
    }
  }
  // Let through: until the next sum, count what this request will store (at least its own size).
  if (entries.length > 0) {
    const bytes = call.bytes?.() ?? 0;
    for (const entry of entries) entry.bytes += bytes;
  }
}

/**
 * The `tenant` label of a quota metric, of bounded cardinality: a tenant listed in `tenants`
 * keeps its name, any other tenant is `other`, a caller without a tenant is `none`. The
 * principal is never a label.
 */
export function tenantLabel(config: Pick<LedgerDeps["config"], "tenants">, tenant: string | null): string {
  if (tenant === null) return "none";
  return config.tenants && Object.hasOwn(config.tenants, tenant) ? tenant : "other";
}
