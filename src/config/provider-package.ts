// Which AI SDK package a `provider` entry uses when it does not say (`npm`), and where an
// OpenAI-compatible provider without `options.baseURL` is called (docs/configuration.md#model-providers).

/** Where an OpenAI-compatible provider without `options.baseURL` is called: Ollama's local address. */
export const DEFAULT_COMPATIBLE_BASE_URL = "http://127.0.0.1:11434/v1";

/**
 * The npm package of provider `providerId`: its `npm`, else `@ai-sdk/openai` for the id `openai`,
 * `@ai-sdk/anthropic` for `anthropic`, and `@ai-sdk/openai-compatible` for any other id.
 */
export function providerPackage(providerId: string, entry: { npm?: string }): string {
  if (entry.npm) return entry.npm;
  if (providerId === "openai") return "@ai-sdk/openai";
  if (providerId === "anthropic") return "@ai-sdk/anthropic";
  return "@ai-sdk/openai-compatible";
}

/**
 * The start-up warning about providers whose calls would go to {@link DEFAULT_COMPATIBLE_BASE_URL}
 * without the config saying so (no `npm` and no `options.baseURL`: an opencode.json relies on
 * models.dev for both, which is not read here), e.g. `provider.openrouter: no "npm" and no
 * "options.baseURL": …`; undefined when there is none. One entry of `LedgerConfig.warnings`.
 */
export function implicitProviderWarning(providers: Record<string, { npm?: string; options: Record<string, unknown> }>): string | undefined {
  const implicit = Object.entries(providers)
    .filter(([id, entry]) => !entry.npm && providerPackage(id, entry) === "@ai-sdk/openai-compatible" && !entry.options.baseURL)
    .map(([id]) => `provider.${id}`);
  if (implicit.length === 0) return undefined;
  return (
    `${implicit.join(", ")}: no "npm" and no "options.baseURL", so ${implicit.length > 1 ? "their" : "its"} models are called as ` +
    `@ai-sdk/openai-compatible at ${DEFAULT_COMPATIBLE_BASE_URL} (a local Ollama); OpenCode takes a provider's package and ` +
    `address from models.dev, which is not read here: give "npm" and "options.baseURL"`
  );
}
