import { z } from "zod";
import { authSchema, tenantsSchema } from "./auth.js";
import { mcpSchema } from "./mcp.js";
import { permissionSchema, toolsSchema } from "./permission-config.js";
import { quotasSchema } from "./quotas.js";
import { telemetrySchema } from "./telemetry.js";

// The file's schema (every key ledger.json and opencode.json may hold here) and its defaults;
// config.ts loads, checks and builds it into a LedgerConfig.

/** A session directory with more bytes than this (in files git would track) gets no snapshot. */
export const DEFAULT_SNAPSHOT_MAX_BYTES = 100 * 1024 * 1024;
/** A session directory with more files than this gets no snapshot. */
export const DEFAULT_SNAPSHOT_MAX_FILES = 20_000;
/** Where snapshot git directories go by default, relative to the config file's directory. */
export const DEFAULT_SNAPSHOT_DIR = ".ledger/snapshot";
/** Estimated tokens of the newest tool outputs that pruning never clears (OpenCode `PRUNE_PROTECT`). */
export const DEFAULT_PRUNE_PROTECT_TOKENS = 40_000;
/** Pruning clears nothing unless at least this many estimated tokens would go (OpenCode `PRUNE_MINIMUM`). */
export const DEFAULT_PRUNE_MINIMUM_TOKENS = 20_000;

const modelRef = z.string().regex(/^[^/\s]+\/\S+$/, 'expected "provider/model"');

const modelSchema = z.object({
  name: z.string().optional(),
  variants: z.record(z.string(), z.record(z.string(), z.unknown())).default({}),
  modalities: z.object({ input: z.array(z.string()).default(["text"]), output: z.array(z.string()).default(["text"]) }).optional(),
  cost: z
    .object({ input: z.number(), output: z.number(), cache_read: z.number().optional(), cache_write: z.number().optional() })
    .optional(),
  limit: z.object({ context: z.number().optional(), output: z.number().optional() }).optional(),
  options: z.record(z.string(), z.unknown()).default({}),
  /** HTTP headers sent on every call of this model, over the provider's `options.headers` (OpenCode `Model.headers`). */
  headers: z.record(z.string(), z.string()).optional(),
});

const providerSchema = z.object({
  npm: z.enum(["@ai-sdk/openai-compatible", "@ai-sdk/openai", "@ai-sdk/anthropic"]).optional(),
  name: z.string().optional(),
  options: z.record(z.string(), z.unknown()).default({}),
  models: z.record(z.string(), modelSchema).default({}),
});

const agentSchema = z.object({
  description: z.string().optional(),
  mode: z.enum(["primary", "subagent", "all"]).optional(),
  hidden: z.boolean().optional(),
  model: modelRef.optional(),
  variant: z.string().optional(),
  prompt: z.string().optional(),
  permission: permissionSchema.optional(),
  /** OpenCode's deprecated form of `permission`: tool → enabled (`false` = deny). */
  tools: toolsSchema.optional(),
  temperature: z.number().optional(),
  top_p: z.number().optional(),
  /** Provider options of this agent's model calls (OpenCode `agent.options`). */
  options: z.record(z.string(), z.unknown()).optional(),
  steps: z.number().int().positive().optional(),
  /** OpenCode's older name of `steps` (`steps` wins when both are given). */
  maxSteps: z.number().int().positive().optional(),
  disable: z.boolean().optional(),
});

const limitsSchema = z
  .object({
    request_bytes: z.number().int().positive(),
    text_part_bytes: z.number().int().positive(),
    metadata_bytes: z.number().int().positive(),
    data_url_bytes: z.number().int().positive(),
    attachment_bytes: z.number().int().positive(),
    parts_per_prompt: z.number().int().positive(),
    image_pixels: z.number().int().positive(),
    symbol_source_bytes: z.number().int().positive(),
    symbol_lookups: z.number().int().nonnegative(),
    watch_buffer_events: z.number().int().positive(),
    watch_buffer_bytes: z.number().int().positive(),
    lock_connections: z.number().int().positive(),
    mcp_item_bytes: z.number().int().positive(),
    mcp_prompt_bytes: z.number().int().positive(),
    page_bytes: z.number().int().positive(),
  })
  .partial();

const commandSchema = z.object({
  template: z.string().min(1),
  description: z.string().optional(),
  agent: z.string().optional(),
  model: modelRef.optional(),
  subtask: z.boolean().optional(),
});

/**
 * How often (ms), by default, a replica on Postgres checks its watched sessions' `last_seq` for
 * events whose commit hint never came (`events.catch_up_ms`).
 */
export const DEFAULT_CATCH_UP_MS = 1000;

/** The shape of `ledger.json` (JSONC allowed), in the opencode.json style (docs/configuration.md). */
export const configFileSchema = z.object({
  $schema: z.string().optional(),
  model: modelRef.optional(),
  default_agent: z.string().optional(),
  /** Permission of every agent, laid over the built-in ones and under each agent's own (as in opencode.json). */
  permission: permissionSchema.optional(),
  /** OpenCode's deprecated form of the top-level `permission`: tool → enabled (`false` = deny). */
  tools: toolsSchema.optional(),
  /** Instruction files and globs for the system prompt (paths relative to the config file). */
  instructions: z.array(z.string()).default([]),
  agent: z.record(z.string(), agentSchema).default({}),
  provider: z.record(z.string(), providerSchema).default({}),
  roots: z.array(z.string()).default([]),
  /** Directories sessions may be created in (CreateSession's `directory` must be inside one); absent: any. */
  session_directories: z.array(z.string().min(1)).optional(),
  limits: limitsSchema.default({}),
  plugin: z.array(z.string()).default([]),
  plugins: z.array(z.string()).default([]),
  cors: z.object({ origins: z.array(z.string()).default([]) }).default({ origins: [] }),
  auth: authSchema,
  tenants: tenantsSchema,
  quotas: quotasSchema,
  events: z
    .object({
      retention_hours: z.number().positive().default(168),
      catch_up_ms: z.number().int().min(0).default(DEFAULT_CATCH_UP_MS),
    })
    .default({ retention_hours: 168, catch_up_ms: DEFAULT_CATCH_UP_MS }),
  retry: z
    .object({
      attempts: z.number().int().min(0).max(20).default(4),
      initial_ms: z.number().int().min(0).default(2000),
      max_ms: z.number().int().min(0).default(30_000),
      max_total_ms: z.number().int().min(0).default(15_000),
    })
    .default({ attempts: 4, initial_ms: 2000, max_ms: 30_000, max_total_ms: 15_000 }),
  mcp: mcpSchema,
  command: z.record(z.string(), commandSchema).default({}),
  reference: z.record(z.string().regex(/^[^/\\\s]+$/, "expected an alias without slashes or spaces"), z.string().min(1)).default({}),
  bus: z
    .object({
      nats: z
        .object({
          servers: z.array(z.string().min(1)).min(1),
          name: z.string().min(1).optional(),
        })
        .optional(),
    })
    .default({}),
  snapshot: z
    .object({
      dir: z.string().optional(),
      max_bytes: z.number().int().positive().default(DEFAULT_SNAPSHOT_MAX_BYTES),
      max_files: z.number().int().positive().default(DEFAULT_SNAPSHOT_MAX_FILES),
    })
    .default({ max_bytes: DEFAULT_SNAPSHOT_MAX_BYTES, max_files: DEFAULT_SNAPSHOT_MAX_FILES }),
  compaction: z
    .object({
      auto: z.boolean().default(true),
      prune: z.boolean().default(true),
      prune_protect_tokens: z.number().int().min(0).default(DEFAULT_PRUNE_PROTECT_TOKENS),
      prune_minimum_tokens: z.number().int().min(0).default(DEFAULT_PRUNE_MINIMUM_TOKENS),
    })
    .default({
      auto: true,
      prune: true,
      prune_protect_tokens: DEFAULT_PRUNE_PROTECT_TOKENS,
      prune_minimum_tokens: DEFAULT_PRUNE_MINIMUM_TOKENS,
    }),
  telemetry: telemetrySchema,
});

/** A parsed `ledger.json` before defaults are merged. */
export type ConfigFile = z.infer<typeof configFileSchema>;
/** A configured provider entry. */
export type ProviderConfig = z.infer<typeof providerSchema>;
/** A configured model entry. */
export type ModelConfig = z.infer<typeof modelSchema>;
