import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { InvalidArgumentError } from "../errors.js";
import { BUILT_IN_AGENTS, type AgentInfo } from "./agents.js";
import { DEFAULT_LIMITS, type Limits } from "./limits.js";
import { quotasConfig, type QuotasConfig } from "./quotas.js";
import { buildMcp, type McpServerConfig } from "./mcp.js";
import { telemetryConfig, type TelemetryConfig } from "./telemetry.js";
import { buildJwtConfig, buildTenants, checkJwtKey, withEnvSecret, type JwtConfig, type TenantConfig } from "./auth.js";
import { ConfigError } from "./config-error.js";
import { instructionUrlWarning } from "./instruction-urls.js";
import { configPermission, configRules } from "./permission-config.js";
import { implicitProviderWarning } from "./provider-package.js";
import { readConfigText } from "./read-config.js";
import { configFileSchema, DEFAULT_SNAPSHOT_DIR, type ConfigFile, type ProviderConfig } from "./schema.js";

export {
  configFileSchema,
  DEFAULT_CATCH_UP_MS,
  DEFAULT_PRUNE_MINIMUM_TOKENS,
  DEFAULT_PRUNE_PROTECT_TOKENS,
  DEFAULT_SNAPSHOT_DIR,
  DEFAULT_SNAPSHOT_MAX_BYTES,
  DEFAULT_SNAPSHOT_MAX_FILES,
} from "./schema.js";
export type { ConfigFile, ModelConfig, ProviderConfig } from "./schema.js";
export { lineAndColumn, parseConfigText, readConfigText } from "./read-config.js";

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
  /**
   * `session_directories`: absolute directories a session may be created in (`CreateSession`'s
   * `directory`, canonical, must be one of them or inside one; docs/security.md, "Which
   * directories sessions may use"); undefined: any directory the server can read.
   */
  sessionDirectories?: string[];
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
   * logs them; so do client commands running the ledger in-process): the OpenCode keys the file
   * has that are ignored here, with `--lenient-config` the unknown keys that were dropped, a
   * `"*"` written after other entries, the URLs of `instructions` (not fetched). Empty when there
   * is nothing to say.
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

/** The text of config file `file`; `ConfigError` naming it for a directory (EISDIR) or one that cannot be read (EACCES, ...). */
function readConfigFile(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EISDIR") throw new ConfigError(`config file ${file} is a directory: give the path of a ledger.json file`);
    throw new ConfigError(`config file ${file} cannot be read (${code ?? String(error)})`);
  }
}

/**
 * Loads configuration: `explicitPath` (from `--config`), else `LEDGER_CONFIG`, else the first of
 * `CONFIG_FILE_NAMES` (ledger.json, ledger.jsonc, opencode.json, opencode.jsonc) in `cwd`, else
 * built-in defaults; `LEDGER_TOKEN` and `LEDGER_NATS_URL` override the file's `auth.token` and
 * `bus.nats.servers` (`LEDGER_JWT_SECRET` sets `auth.jwt.secret`). `{env:NAME}` and `{file:PATH}`
 * in any string are replaced (`substituteVariables`). The OpenCode keys this service ignores
 * become one entry of `warnings`; an unknown key is an error, or with `lenient` (`--lenient-config`,
 * or `LEDGER_LENIENT_CONFIG=1`) a warning. Throws `ConfigError` naming the file and the offending
 * key when the file is missing (explicit path), is a directory or unreadable, not JSONC (naming
 * the line and column), names an unreadable `{file:}`, has an unknown key, or fails the schema.
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
    const read = readConfigText(readConfigFile(file), file, { env, lenient });
    config = buildConfig(read.config, file, path.dirname(file), env);
    config.warnings = [...read.warnings, ...config.warnings];
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

/** Whether an environment switch is on (`1`, `true`, `yes`, case-insensitive). */
function isTrue(value: string | undefined): boolean {
  return value !== undefined && ["1", "true", "yes"].includes(value.trim().toLowerCase());
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
 * `env` (none by default). Throws `ConfigError` when `default_agent` names no agent, or a
 * command's `agent` names none (or a primary-only one for a `subtask` command).
 */
export function buildConfig(file: ConfigFile, source: string | undefined, baseDir: string, env: NodeJS.ProcessEnv = {}): LedgerConfig {
  const jwt = buildJwtConfig(file.auth.jwt, baseDir);
  const agents = buildAgents(file, source);
  checkCommandAgents(file.command, agents.agents, source);
  return {
    ...agents,
    source,
    model: file.model ? parseModelRef(file.model) : firstModel(file.provider),
    providers: file.provider,
    roots: file.roots.map((r) => path.resolve(baseDir, r)),
    sessionDirectories: file.session_directories?.map((d) => path.resolve(baseDir, d)),
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
    warnings: [instructionUrlWarning(file.instructions), implicitProviderWarning(file.provider), ...unconfiguredModelWarnings(file)]
      .filter((w) => w !== undefined)
      .map((w) => (source ? `${source}: ${w}` : w)),
  };
}

/**
 * The agents of a config file: the built-in ones, each `agent.<name>` overriding fields of one or
 * adding one (`disable: true` removes it), and their permission rules laid out as OpenCode's
 * `Agent` state merges them, the last match winning: the built-in agent's own rules (a new agent:
 * `"*": "allow"`), then the top-level `tools` and `permission`, then the agent's `tools` and
 * `permission` (session rules come after all of these when a call is weighed). Throws
 * `ConfigError` when `default_agent` names no agent, a subagent or a hidden one (OpenCode
 * `Agent.defaultAgent` refuses both).
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
  // As OpenCode's Agent.defaultAgent: the agent a prompt runs when it names none is a visible
  // primary one: `default_agent` must name one; without it, build, else the first such agent.
  const visiblePrimary = (a: AgentInfo | undefined) => a !== undefined && a.mode !== "subagent" && !a.hidden;
  const primaries = [...agents.values()].filter(visiblePrimary).map((a) => a.name);
  const key = `${source ?? "config"}: default_agent`;
  if (file.default_agent === undefined) {
    const defaultAgent = visiblePrimary(agents.get("build")) ? "build" : primaries[0];
    if (!defaultAgent)
      throw new ConfigError(`${source ?? "config"}: agent: no visible primary agent is left to run prompts that name none`);
    return { agents, defaultAgent };
  }
  const defaultAgent = file.default_agent;
  const chosen = agents.get(defaultAgent);
  if (!chosen) throw new ConfigError(`${key}: agent "${defaultAgent}" is not defined`);
  if (!visiblePrimary(chosen)) {
    throw new ConfigError(
      `${key}: agent "${defaultAgent}" is ${chosen.hidden ? "hidden" : "a subagent"}; name a primary agent: ${primaries.join(", ") || "(none configured)"}`,
    );
  }
  return { agents, defaultAgent };
}

/**
 * A command's `agent` must name a configured agent, and a subagent when the command is a
 * `subtask` (it runs as one): checked at load, as `default_agent` is, so a typo is not found
 * only when a client runs the command (where it would blame the request's `agent`).
 * Throws `ConfigError` naming `command.<name>.agent` and the agents it may name.
 */
function checkCommandAgents(commands: ConfigFile["command"], agents: ReadonlyMap<string, AgentInfo>, source: string | undefined): void {
  for (const [name, command] of Object.entries(commands)) {
    if (!command.agent) continue;
    const agent = agents.get(command.agent);
    const key = `${source ?? "config"}: command.${name}.agent`;
    if (!agent) throw new ConfigError(`${key}: agent "${command.agent}" is not defined; agents: ${[...agents.keys()].join(", ")}`);
    if (command.subtask && agent.mode === "primary") {
      const subagents = [...agents.values()].filter((a) => a.mode !== "primary").map((a) => a.name);
      throw new ConfigError(
        `${key}: agent "${command.agent}" is a primary agent and the command is a subtask; name a subagent: ${subagents.join(", ") || "(none configured)"}`,
      );
    }
  }
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

/**
 * A start-up warning (one entry of `LedgerConfig.warnings`) for each model the config chooses
 * (`model`, `agent.<name>.model`, `command.<name>.model`) that no `provider.<id>.models` entry
 * configures: e.g. `model: "x/y" is not a configured model (no provider.x.models.y): prompts that
 * use it end with a model_not_found error; configured models: local/qwen`. A warning, not an
 * error: a server may be given its models another way (tests inject them), and a prompt may name
 * a configured one.
 */
function unconfiguredModelWarnings(file: ConfigFile): string[] {
  const configured = Object.entries(file.provider).flatMap(([p, entry]) => Object.keys(entry.models).map((m) => `${p}/${m}`));
  const chosen: Array<[string, string | undefined]> = [
    ["model", file.model],
    ...Object.entries(file.agent)
      .filter(([, a]) => !a.disable)
      .map(([name, a]): [string, string | undefined] => [`agent.${name}.model`, a.model]),
    ...Object.entries(file.command).map(([name, c]): [string, string | undefined] => [`command.${name}.model`, c.model]),
  ];
  return chosen.flatMap(([key, ref]) => {
    if (!ref) return [];
    const { providerId, modelId } = parseModelRef(ref);
    // Own keys only: "constructor/x" names no provider, however objects are built.
    const provider = Object.hasOwn(file.provider, providerId) ? file.provider[providerId] : undefined;
    if (provider && Object.hasOwn(provider.models, modelId)) return [];
    return [
      `${key}: "${ref}" is not a configured model (no provider.${providerId}.models.${modelId}): prompts that use it end with a ` +
        `model_not_found error; configured models: ${configured.join(", ") || "(none)"}`,
    ];
  });
}

function firstModel(providers: Record<string, ProviderConfig>): LedgerConfig["model"] {
  for (const [providerId, provider] of Object.entries(providers)) {
    const modelId = Object.keys(provider.models)[0];
    if (modelId) return { providerId, modelId };
  }
  return undefined;
}
