import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { parse as parseJsonc, printParseErrorCode, type ParseError } from "jsonc-parser";
import { z } from "zod";
import { InvalidArgumentError } from "../errors.js";
import { BUILT_IN_AGENTS, type AgentInfo } from "./agents.js";
import { DEFAULT_LIMITS, type Limits } from "./limits.js";
import { quotasConfig, quotasSchema, type QuotasConfig } from "./quotas.js";
import { buildMcp, mcpSchema, type McpServerConfig } from "./mcp.js";
import { telemetryConfig, telemetrySchema, type TelemetryConfig } from "./telemetry.js";
import {
  authSchema,
  buildJwtConfig,
  buildTenants,
  checkJwtKey,
  tenantsSchema,
  withEnvSecret,
  type JwtConfig,
  type TenantConfig,
} from "./auth.js";
import { ConfigError } from "./config-error.js";
import { ignoredKeysWarning, stripIgnoredKeys, type IgnoredKey } from "./opencode-keys.js";
import { configPermission, configRules, permissionSchema, toolsSchema, wildcardLastWarnings } from "./permission-config.js";
import { unknownKeys, withoutKeys } from "./unknown-keys.js";
import { substituteVariables } from "./variables.js";

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
  })
  .partial();

const commandSchema = z.object({
  template: z.string().min(1),
  description: z.string().optional(),
  agent: z.string().optional(),
  model: modelRef.optional(),
  subtask: z.boolean().optional(),
});

/** The shape of `ledger.json` (JSONC allowed), in the opencode.json style. */
/**
 * How often (ms), by default, a replica on Postgres checks its watched sessions' `last_seq` for
 * events whose commit hint never came (`events.catch_up_ms`).
 */
export const DEFAULT_CATCH_UP_MS = 1000;

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

export type { McpServerConfig } from "./mcp.js";

/** Everything the ledger reads from configuration, with defaults applied. */
export interface LedgerConfig {
  /** The file it came from, when there was one. */
  source?: string;
  /** Default model, as provider/model ids. */
  model?: { providerId: string; modelId: string };
  defaultAgent: string;
  /** Every agent (built-in merged with config), by name. Disabled agents are removed. */
  agents: Map<string, AgentInfo>;
  providers: Record<string, ProviderConfig>;
  /** Absolute directories where `file:` reads are allowed besides the session directory. */
  roots: string[];
  limits: Limits;
  /** Absolute paths (or package names) of plugin modules. */
  plugins: string[];
  /** Allowed browser origins beyond loopback ones (`*` allows any). */
  corsOrigins: string[];
  /**
   * Bearer token every RPC must carry (`authorization: Bearer <token>`), from `LEDGER_TOKEN` or
   * `auth.token`. Required when the server binds a non-loopback address.
   */
  token?: string;
  /**
   * JSON Web Tokens accepted as bearer tokens (`auth.jwt`, `LEDGER_JWT_SECRET`): the principal is
   * the token's `sub` (docs/security.md). Either this or `token` is required off loopback.
   */
  jwt?: JwtConfig;
  /**
   * `auth.share_within_tenant`: callers of one tenant see each other's sessions (default: each
   * caller sees its own; docs/security.md, "Who may see which session").
   */
  shareWithinTenant?: boolean;
  /**
   * `tenants`: per tenant, the roots its sessions may use (docs/security.md, "Per-tenant file
   * roots"); undefined: every session uses `roots`.
   */
  tenants?: Record<string, TenantConfig>;
  /**
   * `quotas`: prompts per minute and concurrent loops per JWT principal and per tenant
   * (docs/security.md, "Quotas"); every limit undefined (unlimited) by default.
   */
  quotas: QuotasConfig;
  /** Events older than this (ms) are pruned; WatchSession cursors behind them get OUT_OF_RANGE. Default 7 days. */
  eventRetentionMs: number;
  /**
   * How often (ms) a replica on Postgres checks its watched sessions' `last_seq` for events whose
   * commit hint never came (its writer died between commit and hint); 0: never.
   */
  eventCatchUpMs: number;
  /**
   * Retries of retryable provider errors (429, 5xx, connection failures): at most `attempts`
   * retries, waiting `initialMs` doubled each time up to `maxMs` (or the provider's
   * `retry-after`), no retry starting later than `maxTotalMs` after the step's first call (ms).
   */
  retry: RetryConfig;
  /**
   * MCP servers (`mcp` in ledger.json, docs/configuration.md#mcp), by name: file parts may name
   * their resources (`source.resource.client_name`) and the model gets their tools.
   */
  mcp: Record<string, McpServerConfig>;
  /** Prompt templates the `Command` RPC runs, by name (`command` in ledger.json). */
  commands: Record<string, CommandConfig>;
  /** Configured references (`reference: {alias: path}`): absolute directories by alias; `file:` reads and tools may use them. */
  references: Record<string, string>;
  /**
   * Snapshots of session directories before and after each step that may change files
   * (`snapshot` in ledger.json): where their git directories go (absolute; default
   * `.ledger/snapshot` beside the config file) and the largest tree snapshotted.
   */
  snapshot: { dir: string; maxBytes: number; maxFiles: number };
  /**
   * Fan-out between replicas on NATS instead of Postgres LISTEN/NOTIFY (`bus.nats` in
   * ledger.json, or `LEDGER_NATS_URL`, comma-separated servers, which wins): the server URLs and
   * the connection name. Undefined: the Postgres relay. Needs a Postgres database.
   */
  nats?: NatsConfig;
  /** How long sessions are kept within the model's context (`compaction` in ledger.json; docs/compaction.md). */
  compaction: CompactionConfig;
  /** OpenTelemetry traces (`telemetry` in ledger.json, `OTEL_*` variables; docs/operations.md#tracing). */
  telemetry: TelemetryConfig;
  /**
   * `instructions` in ledger.json (as in opencode.json): files and globs whose contents join the
   * system prompt, kept as written (`entries`; `~/` and `http(s)://` URLs included) with the
   * directory relative entries resolve against (`baseDir`: the config file's directory, else the
   * working directory). Resolved and read by `src/agent/instructions.ts` (docs/configuration.md#instructions).
   */
  instructions: { baseDir: string; entries: string[] };
  /**
   * What the start should warn about, one message each (`ledger serve` prints them on stderr and
   * logs them): the OpenCode keys the file has that are ignored here, and with
   * `--lenient-config` the unknown keys that were dropped. Empty when there is nothing to say.
   */
  warnings: string[];
}

/**
 * Compaction and pruning (`compaction` in ledger.json, as in opencode.json). Token counts are
 * estimates (characters / 4, OpenCode `Token.estimate`).
 */
export interface CompactionConfig {
  /** Summarize the session on its own when a step's input plus the output reserve pass the model's context limit. */
  auto: boolean;
  /** Stop sending old tool outputs to the model (they stay stored, with `time_compacted`). */
  prune: boolean;
  /** The newest tool outputs, up to this many tokens, are never pruned. */
  protectTokens: number;
  /** Pruning happens only when more than this many tokens of output would be cleared. */
  minimumTokens: number;
}

/** Where the NATS relay connects; see `LedgerConfig.nats`. */
export interface NatsConfig {
  /** Server URLs, e.g. `nats://127.0.0.1:4222`; at least one. */
  servers: string[];
  /** Connection name shown by the NATS server's monitoring; default "session-ledger". */
  name?: string;
}

/** How a model step is retried; see `LedgerConfig.retry`. Times in ms. */
export interface RetryConfig {
  /** Retries after the first call, at most (0 = none). */
  attempts: number;
  /** Wait before the first retry; doubled for each next one. */
  initialMs: number;
  /** Longest wait between two calls (a provider's `retry-after` may ask for more). */
  maxMs: number;
  /** No retry starts later than this after the step's first call (the last wait is cut to fit); 0 = no retries. */
  maxTotalMs: number;
}

/** A configured command: a prompt template with `$ARGUMENTS`/`$1`... and `@path` references. */
export interface CommandConfig {
  template: string;
  description?: string;
  agent?: string;
  model?: { providerId: string; modelId: string };
  /** Run the template as a subtask of `agent` instead of as the prompt text. */
  subtask?: boolean;
}

/**
 * Config file names looked up in the working directory, in order; the first one found is read
 * (an opencode.json is read as it is: docs/opencode-migration.md).
 */
export const CONFIG_FILE_NAMES = ["ledger.json", "ledger.jsonc", "opencode.json", "opencode.jsonc"];

/**
 * Loads configuration: `explicitPath` (from `--config`), else `LEDGER_CONFIG`, else the first of
 * `CONFIG_FILE_NAMES` (ledger.json, ledger.jsonc, opencode.json, opencode.jsonc) in `cwd`, else
 * built-in defaults; `LEDGER_TOKEN` and `LEDGER_NATS_URL` override the file's `auth.token` and
 * `bus.nats.servers` (`LEDGER_JWT_SECRET` sets `auth.jwt.secret`). `{env:NAME}` and `{file:PATH}`
 * in any string are replaced (`substituteVariables`). The OpenCode keys this service ignores
 * become one entry of `warnings`; an unknown key is an error, or with `lenient` (`--lenient-config`,
 * or `LEDGER_LENIENT_CONFIG=1`) a warning. Throws `ConfigError` naming the file and the offending
 * key when the file is missing (explicit path), not JSONC (naming the line and column), names an
 * unreadable `{file:}`, has an unknown key, or fails the schema.
 */
export function loadConfig(
  options: { explicitPath?: string; cwd?: string; env?: NodeJS.ProcessEnv; lenient?: boolean } = {},
): LedgerConfig {
  const env = options.env ?? process.env;
  const cwd = options.cwd ?? process.cwd();
  const lenient = options.lenient ?? isTrue(env.LEDGER_LENIENT_CONFIG);
  const wanted = options.explicitPath ?? env.LEDGER_CONFIG;
  const file = wanted ? path.resolve(cwd, wanted) : CONFIG_FILE_NAMES.map((n) => path.join(cwd, n)).find((p) => existsSync(p));
  let config: LedgerConfig | undefined;
  if (!file) config = buildConfig(configFileSchema.parse({}), undefined, cwd, env);
  else if (existsSync(file)) {
    const read = readConfigText(readFileSync(file, "utf8"), file, { env, lenient });
    config = buildConfig(read.config, file, path.dirname(file), env);
    config.warnings = read.warnings;
  }
  if (!config) throw new ConfigError(`config file ${file} does not exist`);
  if (env.LEDGER_TOKEN) {
    if (env.LEDGER_TOKEN.length < 16) throw new ConfigError("LEDGER_TOKEN: must be at least 16 characters");
    config.token = env.LEDGER_TOKEN;
  }
  if (env.LEDGER_JWT_SECRET) config.jwt = withEnvSecret(config.jwt, env.LEDGER_JWT_SECRET);
  checkJwtKey(config.jwt);
  if (env.LEDGER_NATS_URL) {
    const servers = env.LEDGER_NATS_URL.split(",")
      .map((s) => s.trim())
      .filter((s) => s.length > 0);
    if (servers.length === 0) throw new ConfigError("LEDGER_NATS_URL: expected one or more NATS server URLs, comma-separated");
    config.nats = { servers, name: config.nats?.name };
  }
  return config;
}

/**
 * Parses JSONC text into a validated `ConfigFile` (see {@link readConfigText}; warnings dropped,
 * unknown keys are errors). Throws `ConfigError` as `readConfigText` does.
 */
export function parseConfigText(text: string, file: string, env: NodeJS.ProcessEnv = process.env): ConfigFile {
  return readConfigText(text, file, { env }).config;
}

/**
 * Reads a config file's JSONC text (`file` names it in messages; `{file:}` paths are relative to
 * its directory): the OpenCode keys this service ignores are set aside (`stripIgnoredKeys`),
 * `{env:}`/`{file:}` replaced, unknown keys looked for, then the schema applied. Returns the
 * parsed file and the warnings: `ignoredKeysWarning`'s, and with `lenient` one
 * `<file>: unknown keys ignored (--lenient-config): a.b, c` (those keys dropped). Throws
 * `ConfigError`: `<file>: invalid JSONC at line L, column C: value expected` (1-based) for a
 * syntax error; `<file>: unknown key agent.review.colour (not a ledger.json or opencode.json key;
 * --lenient-config ignores unknown keys)` (every unknown key named, comma-separated);
 * `<file>: <key path>: <why>` for a `{file:}` that cannot be read or a schema failure.
 */
export function readConfigText(
  text: string,
  file: string,
  options: { env?: NodeJS.ProcessEnv; lenient?: boolean } = {},
): { config: ConfigFile; warnings: string[]; ignored: IgnoredKey[] } {
  const env = options.env ?? process.env;
  const errors: ParseError[] = [];
  const raw: unknown = parseJsonc(text, errors, { allowTrailingComma: true });
  if (errors.length > 0) {
    const first = errors[0]!;
    const { line, column } = lineAndColumn(text, first.offset);
    const what = printParseErrorCode(first.error)
      .replace(/(?<=[a-z])([A-Z])/g, " $1")
      .toLowerCase();
    throw new ConfigError(`${file}: invalid JSONC at line ${line}, column ${column}: ${what}`);
  }
  const { value, ignored } = stripIgnoredKeys(raw);
  const warnings: string[] = [];
  const ignoredWarning = ignoredKeysWarning(file, ignored);
  if (ignoredWarning) warnings.push(ignoredWarning);
  let substituted = substituteVariables(value, { env, baseDir: path.dirname(path.resolve(file)), source: file });
  const unknown = unknownKeys(configFileSchema, substituted);
  if (unknown.length > 0) {
    const names = unknown.map((k) => k.join(".")).join(", ");
    if (!options.lenient)
      throw new ConfigError(
        `${file}: unknown key${unknown.length > 1 ? "s" : ""} ${names} (not a ledger.json or opencode.json key; --lenient-config ignores unknown keys)`,
      );
    warnings.push(`${file}: unknown keys ignored (--lenient-config): ${names}`);
    substituted = withoutKeys(substituted, unknown);
  }
  const parsed = configFileSchema.safeParse(substituted);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new ConfigError(`${file}: ${issue.path.join(".") || "(root)"}: ${issue.message}`);
  }
  const permissions = [
    ["permission", parsed.data.permission] as const,
    ...Object.entries(parsed.data.agent).map(([name, a]) => [`agent.${name}.permission`, a.permission] as const),
  ];
  warnings.push(...wildcardLastWarnings(permissions).map((w) => `${file}: ${w}`));
  return { config: parsed.data, warnings, ignored };
}

/** Whether an environment switch is on (`1`, `true`, `yes`, case-insensitive). */
function isTrue(value: string | undefined): boolean {
  return value !== undefined && ["1", "true", "yes"].includes(value.trim().toLowerCase());
}

/** The 1-based line and column (in UTF-16 code units, as editors count) of `offset` in `text`. */
export function lineAndColumn(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, offset);
  const lineStart = before.lastIndexOf("\n") + 1;
  return { line: before.split("\n").length, column: offset - lineStart + 1 };
}

/** Configuration is unusable; the message names the file and key. */
export { ConfigError };

/**
 * What is wrong with a model reference `{providerId, modelId}`, or undefined when it is well
 * formed: the provider id must be non-blank and contain no `/` (a reference is written
 * `provider/model` and split at the first slash), the model id non-blank (it may contain `/`,
 * e.g. `openrouter/anthropic/claude-sonnet-4`). Says nothing about whether the model is configured.
 * Returns the offending proto field (`provider_id` or `model_id`) and why.
 */
export function modelRefProblem(ref: {
  providerId: string;
  modelId: string;
}): { part: "provider_id" | "model_id"; description: string } | undefined {
  if (!ref.providerId.trim()) return { part: "provider_id", description: "must not be empty" };
  if (ref.providerId.includes("/")) return { part: "provider_id", description: `"${ref.providerId}" must not contain "/"` };
  if (!ref.modelId.trim()) return { part: "model_id", description: "must not be empty" };
  return undefined;
}

/**
 * Parses a model reference written `"provider/model"` (config values, the CLI's `--model`) into
 * `{providerId, modelId}`, splitting at the first slash (the model id may contain more).
 * Throws `InvalidArgumentError` (INVALID_ARGUMENT) on `field` when there is no slash or either
 * side is blank, e.g. `model: "garbage" is not a model reference: no "/"; expected "provider/model" (e.g. "local/qwen")`.
 */
export function parseModelRef(value: string, field = "model"): { providerId: string; modelId: string } {
  const slash = value.indexOf("/");
  const ref = { providerId: value.slice(0, Math.max(slash, 0)), modelId: value.slice(slash + 1) };
  const why =
    slash < 0 ? 'no "/"' : !ref.providerId.trim() ? "the provider is empty" : !ref.modelId.trim() ? "the model is empty" : undefined;
  if (why)
    throw new InvalidArgumentError(
      field,
      `${JSON.stringify(value)} is not a model reference: ${why}; expected "provider/model" (e.g. "local/qwen")`,
    );
  return ref;
}

/**
 * Merges a parsed config file with the built-in defaults: built-in agents overridden or
 * extended by `agent`, default model (`model`, else the first configured model), limits,
 * roots and plugin paths resolved against `baseDir`, telemetry with the `OTEL_*` variables of
 * `env` (none by default). Throws `ConfigError` when `default_agent` names no agent.
 */
export function buildConfig(file: ConfigFile, source: string | undefined, baseDir: string, env: NodeJS.ProcessEnv = {}): LedgerConfig {
  const jwt = buildJwtConfig(file.auth.jwt, baseDir);
  return {
    ...buildAgents(file, source),
    source,
    model: file.model ? parseModelRef(file.model) : firstModel(file.provider),
    providers: file.provider,
    roots: file.roots.map((r) => path.resolve(baseDir, r)),
    limits: { ...DEFAULT_LIMITS, ...file.limits },
    plugins: [...file.plugin, ...file.plugins].map((p) => (p.startsWith(".") || path.isAbsolute(p) ? path.resolve(baseDir, p) : p)),
    corsOrigins: file.cors.origins,
    retry: {
      attempts: file.retry.attempts,
      initialMs: file.retry.initial_ms,
      maxMs: file.retry.max_ms,
      maxTotalMs: file.retry.max_total_ms,
    },
    eventRetentionMs: file.events.retention_hours * 3600 * 1000,
    eventCatchUpMs: file.events.catch_up_ms,
    token: file.auth.token,
    jwt,
    shareWithinTenant: file.auth.share_within_tenant,
    tenants: buildTenants(file.tenants, jwt, baseDir),
    quotas: quotasConfig(file.quotas),
    mcp: buildMcp(file.mcp, baseDir),
    commands: Object.fromEntries(
      Object.entries(file.command).map(([name, c]) => [
        name,
        {
          template: c.template,
          description: c.description,
          agent: c.agent,
          model: c.model ? parseModelRef(c.model) : undefined,
          subtask: c.subtask,
        },
      ]),
    ),
    references: Object.fromEntries(Object.entries(file.reference).map(([alias, dir]) => [alias, path.resolve(baseDir, dir)])),
    nats: file.bus.nats ? { servers: file.bus.nats.servers, name: file.bus.nats.name } : undefined,
    snapshot: {
      dir: path.resolve(baseDir, file.snapshot.dir ?? DEFAULT_SNAPSHOT_DIR),
      maxBytes: file.snapshot.max_bytes,
      maxFiles: file.snapshot.max_files,
    },
    compaction: {
      auto: file.compaction.auto,
      prune: file.compaction.prune,
      protectTokens: file.compaction.prune_protect_tokens,
      minimumTokens: file.compaction.prune_minimum_tokens,
    },
    telemetry: telemetryConfig(file.telemetry, env),
    instructions: { baseDir, entries: file.instructions },
    warnings: [],
  };
}

/**
 * The agents of a config file: the built-in ones, each `agent.<name>` overriding fields of one or
 * adding one (`disable: true` removes it), and their permission rules laid out as OpenCode's
 * `Agent` state merges them, the last match winning: the built-in agent's own rules (a new agent:
 * `"*": "allow"`), then the top-level `tools` and `permission`, then the agent's `tools` and
 * `permission` (session rules come after all of these when a call is weighed). Throws
 * `ConfigError` when `default_agent` names no agent.
 */
function buildAgents(file: ConfigFile, source: string | undefined): { agents: Map<string, AgentInfo>; defaultAgent: string } {
  const global = configPermission(file.tools, file.permission);
  const agents = new Map<string, AgentInfo>(
    BUILT_IN_AGENTS.map((a) => [
      a.name,
      { ...a, permission: { ...a.permission, ...global }, rules: [...configRules(a.permission), ...configRules(global)] },
    ]),
  );
  for (const [name, override] of Object.entries(file.agent)) {
    if (override.disable) {
      agents.delete(name);
      continue;
    }
    const base: AgentInfo = agents.get(name) ?? {
      name,
      description: "",
      mode: "all" as const,
      hidden: false,
      permission: { "*": "allow" as const, ...global },
      rules: [...configRules({ "*": "allow" }), ...configRules(global)],
      builtIn: false,
    };
    const own = configPermission(override.tools, override.permission);
    agents.set(name, {
      ...base,
      description: override.description ?? base.description,
      mode: override.mode ?? base.mode,
      hidden: override.hidden ?? base.hidden,
      model: override.model ? parseModelRef(override.model) : base.model,
      variant: override.variant ?? base.variant,
      prompt: override.prompt ?? base.prompt,
      permission: { ...base.permission, ...own },
      rules: [...(base.rules ?? configRules(base.permission)), ...configRules(own)],
      steps: override.steps ?? override.maxSteps ?? base.steps,
      temperature: override.temperature ?? base.temperature,
      topP: override.top_p ?? base.topP,
      options: override.options ? { ...base.options, ...override.options } : base.options,
    });
  }
  const defaultAgent = file.default_agent ?? "build";
  if (!agents.has(defaultAgent)) throw new ConfigError(`${source ?? "config"}: default_agent: agent "${defaultAgent}" is not defined`);
  return { agents, defaultAgent };
}

/**
 * Every directory besides the session directory that `file:` reads and the model's tools may use:
 * `roots` and the references; for a session of `tenant` when `tenants` is configured, that
 * tenant's roots only (none for a tenant without an entry).
 */
export function allowedRoots(config: Pick<LedgerConfig, "roots" | "references" | "tenants">, tenant?: string | null): string[] {
  // A tenant's session reads inside its directory and its tenant's roots only (not the global ones).
  if (config.tenants && tenant) return config.tenants[tenant]?.roots ?? [];
  return [...config.roots, ...Object.values(config.references)];
}

function firstModel(providers: Record<string, ProviderConfig>): LedgerConfig["model"] {
  for (const [providerId, provider] of Object.entries(providers)) {
    const modelId = Object.keys(provider.models)[0];
    if (modelId) return { providerId, modelId };
  }
  return undefined;
}
