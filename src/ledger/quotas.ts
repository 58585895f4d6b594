import type { QuotaLimits } from "../config/quotas.js";
import { QuotaExceededError } from "../errors.js";
import { countOpenAnswerSessions } from "../storage/message-store.js";
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
}

/**
 * Checks and counts the quotas of `principal` (docs/security.md, "Quotas") for one call that
 * stores a user prompt, before anything is written. Only JWT principals are limited; the static
 * token and a server without authentication pass. In this order:
 * 1. `concurrent_loops` (when `call.startsLoop`): the principal's sessions, then its tenant's,
 *    other than `call.sessionId`, with a running answer in the database (every replica's), must
 *    be fewer than the limit;
 * 2. `prompts_per_minute`: the call is counted against the principal and its tenant in the
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

  const limited = scopes.filter((s) => s.limits.promptsPerMinute !== undefined);
  if (limited.length === 0) return;
  const counters: WindowCounter[] = limited.map((s) => ({ key: s.key, limit: s.limits.promptsPerMinute! }));
  const { refused, retryAfterMs } = await countInWindow(deps.db, counters, MINUTE_S);
  if (refused === undefined) return;
  const s = limited[refused]!;
  refuse(new QuotaExceededError("prompts_per_minute", s.scope, s.subject, counters[refused]!.limit, retryAfterMs));
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
