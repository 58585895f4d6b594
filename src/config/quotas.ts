import { z } from "zod";

/** The limits of one quota subject (a principal, or a tenant) in ledger.json; every key optional. */
const limitsSchema = z
  .object({
    prompts_per_minute: z.number().int().positive().optional(),
    concurrent_loops: z.number().int().positive().optional(),
    stored_bytes: z.number().int().positive().optional(),
  })
  .strict()
  .default({});

/** `quotas` in ledger.json (docs/configuration.md#quotas): per principal and per tenant; absent: unlimited. */
export const quotasSchema = z.object({ principal: limitsSchema, tenant: limitsSchema }).strict().default({ principal: {}, tenant: {} });

/** `quotas` as parsed from ledger.json. */
export type QuotasFile = z.infer<typeof quotasSchema>;

/** The quota names, as they appear in config, errors (`QuotaFailure`, `ErrorInfo.metadata.quota`) and metrics. */
export type QuotaName = "prompts_per_minute" | "concurrent_loops" | "stored_bytes";

/** Limits of one subject; undefined: unlimited. */
export interface QuotaLimits {
  /** Prompts stored per minute (a fixed window of 60 s on the database clock). */
  promptsPerMinute?: number;
  /** Sessions with a running answer (an agent loop) at once. */
  concurrentLoops?: number;
  /** Bytes stored in the subject's sessions (messages and parts, as Postgres stores them). */
  storedBytes?: number;
}

/**
 * Quotas of callers authenticated by a JWT (docs/security.md, "Quotas"): `principal` applies to
 * each (tenant, subject) on its own, `tenant` to all principals of a tenant together. The static
 * token and a server without authentication are never limited.
 */
export interface QuotasConfig {
  principal: QuotaLimits;
  tenant: QuotaLimits;
}

/** The resolved {@link QuotasConfig} of a parsed `quotas` entry. */
export function quotasConfig(file: QuotasFile): QuotasConfig {
  const limits = (l: QuotasFile["principal"]): QuotaLimits => ({
    promptsPerMinute: l.prompts_per_minute,
    concurrentLoops: l.concurrent_loops,
    storedBytes: l.stored_bytes,
  });
  return { principal: limits(file.principal), tenant: limits(file.tenant) };
}
