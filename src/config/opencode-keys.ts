import { isPlainObject } from "./unknown-keys.js";

/**
 * The opencode.json keys this service reads but does not use, and why (docs/opencode-migration.md).
 * Derived from OpenCode's config schema (`Config.Info`, `Config.Agent`, `Config.Provider` and the
 * models.dev model fields of packages/opencode/src/config/config.ts): every key of it is either
 * supported (in `configFileSchema`), listed here, or, unknown, an error.
 */

const NO_TUI = "this service has no terminal UI";

/** Top-level keys: name → why it is ignored. */
const TOP_LEVEL: Readonly<Record<string, string>> = {
  theme: `the colour theme of OpenCode's terminal UI; ${NO_TUI}`,
  keybinds: `key bindings of OpenCode's terminal UI; ${NO_TUI}`,
  tui: `settings of OpenCode's terminal UI; ${NO_TUI}`,
  layout: `layout of OpenCode's terminal UI (deprecated there); ${NO_TUI}`,
  username: `the name OpenCode's terminal UI shows; ${NO_TUI} (callers are known by their token)`,
  logLevel: "OpenCode's log level; here LEDGER_LOG_LEVEL sets it",
  server: "the address of OpenCode's own server; here ledger serve --host/--port and cors.origins",
  share: "sharing sessions on opencode.ai; not offered here",
  autoshare: "sharing sessions on opencode.ai (deprecated there); not offered here",
  autoupdate: "OpenCode updating itself; this service is updated by its deployment",
  small_model: "the model OpenCode uses for titles; this service writes no titles, and compaction uses the session's model",
  disabled_providers: "OpenCode's automatically loaded providers; here the only providers are those under provider",
  enabled_providers: "OpenCode's automatically loaded providers; here the only providers are those under provider",
  watcher: "ignore globs of OpenCode's file watcher; not configurable here",
  formatter: "OpenCode runs formatters after edits; this service does not",
  lsp: "OpenCode's language servers; none are run here",
  enterprise: "OpenCode's enterprise URL; not used here",
  experimental: "OpenCode's experimental switches; none of them exist here",
  mode: 'deprecated in OpenCode; write these agents under agent with "mode": "primary"',
};

/** Keys of `agent.<name>`. */
const AGENT: Readonly<Record<string, string>> = {
  color: `the agent's colour in OpenCode's terminal UI; ${NO_TUI}`,
  name: "OpenCode's display name of the agent; here an agent is named by its key",
};

/** Keys of `provider.<id>`. */
const PROVIDER: Readonly<Record<string, string>> = {
  api: "models.dev's API address; here give options.baseURL",
  env: "models.dev's API key variables; here give options.apiKey (with {env:NAME})",
  id: "models.dev's provider id; here the provider is named by its key",
  whitelist: "filters OpenCode's models.dev catalogue; here the only models are those under models",
  blacklist: "filters OpenCode's models.dev catalogue; here the only models are those under models",
};

/** The provider options this service uses; other `provider.<id>.options` keys are ignored. */
const PROVIDER_OPTIONS = new Set(["baseURL", "apiKey", "headers"]);

/** Keys of `provider.<id>.models.<id>` (models.dev fields). */
const MODEL: Readonly<Record<string, string>> = Object.fromEntries(
  [
    "id",
    "family",
    "release_date",
    "last_updated",
    "knowledge",
    "open_weights",
    "attachment",
    "reasoning",
    "temperature",
    "tool_call",
    "interleaved",
    "experimental",
    "status",
    "provider",
  ].map((k) => [k, "a models.dev catalogue field OpenCode uses; not used here"]),
);

/** An ignored key: its path (`agent.review.color`) and why it is ignored. */
export interface IgnoredKey {
  path: string;
  reason: string;
}

/**
 * Splits a parsed config file into what this service reads and the OpenCode keys it ignores:
 * returns a copy of `raw` without them, and the ignored keys with their reasons in the order
 * written (top level, then agents, then providers). `snapshot` is ignored only as OpenCode's
 * boolean (here it is an object).
 */
export function stripIgnoredKeys(raw: unknown): { value: unknown; ignored: IgnoredKey[] } {
  if (!isPlainObject(raw)) return { value: raw, ignored: [] };
  const ignored: IgnoredKey[] = [];
  const take = (node: Record<string, unknown>, table: Readonly<Record<string, string>>, prefix: string) => {
    for (const key of Object.keys(node)) {
      const reason = Object.hasOwn(table, key) ? table[key] : undefined;
      if (reason === undefined) continue;
      ignored.push({ path: `${prefix}${key}`, reason });
      delete node[key];
    }
  };
  const value = structuredClone(raw);
  take(value, TOP_LEVEL, "");
  if (typeof value.snapshot === "boolean") {
    ignored.push({
      path: "snapshot",
      reason:
        "OpenCode's on/off switch; here snapshots are taken whenever an agent may change files (snapshot is {dir, max_bytes, max_files})",
    });
    delete value.snapshot;
  }
  if (isPlainObject(value.agent))
    for (const [name, agent] of Object.entries(value.agent)) if (isPlainObject(agent)) take(agent, AGENT, `agent.${name}.`);
  if (isPlainObject(value.provider)) {
    for (const [id, provider] of Object.entries(value.provider)) {
      if (!isPlainObject(provider)) continue;
      take(provider, PROVIDER, `provider.${id}.`);
      if (isPlainObject(provider.options)) {
        const unused = Object.keys(provider.options).filter((k) => !PROVIDER_OPTIONS.has(k));
        take(
          provider.options,
          Object.fromEntries(unused.map((k) => [k, "only baseURL, apiKey and headers of a provider's options are used here"])),
          `provider.${id}.options.`,
        );
      }
      if (isPlainObject(provider.models))
        for (const [modelId, model] of Object.entries(provider.models)) {
          if (!isPlainObject(model)) continue;
          take(model, MODEL, `provider.${id}.models.${modelId}.`);
          if (isPlainObject(model.limit))
            take(
              model.limit,
              { input: "OpenCode's input-token limit; here overflow is judged by context and output" },
              `provider.${id}.models.${modelId}.limit.`,
            );
          if (isPlainObject(model.variants))
            for (const [variant, options] of Object.entries(model.variants))
              if (isPlainObject(options))
                take(
                  options,
                  { disabled: "OpenCode hides a disabled variant; here every configured variant is offered (remove it instead)" },
                  `provider.${id}.models.${modelId}.variants.${variant}.`,
                );
          if (isPlainObject(model.cost))
            take(
              model.cost,
              { context_over_200k: "OpenCode's price above 200k tokens of context; not used here" },
              `provider.${id}.models.${modelId}.cost.`,
            );
        }
    }
  }
  return { value, ignored };
}

/**
 * The one start-up warning about ignored keys of `source` (undefined when there are none):
 * `<source>: these OpenCode keys are ignored (docs/opencode-migration.md):` then one line per key,
 * `  <path>: <reason>`.
 */
export function ignoredKeysWarning(source: string, ignored: readonly IgnoredKey[]): string | undefined {
  if (ignored.length === 0) return undefined;
  return [
    `${source}: these OpenCode keys are ignored (docs/opencode-migration.md):`,
    ...ignored.map((k) => `  ${k.path}: ${k.reason}`),
  ].join("\n");
}
