import type { LanguageModelV3 } from "@ai-sdk/provider";
import type { LedgerConfig, ModelConfig, ProviderConfig } from "../config/config.js";
import { DEFAULT_COMPATIBLE_BASE_URL, providerPackage } from "../config/provider-package.js";
import { loadOncePerKey } from "../load-once.js";
import { tracedFetch } from "../observe/spans.js";

/**
 * OpenCode's `OUTPUT_TOKEN_MAX`: the most output tokens a step asks for, whatever the model's
 * `limit.output`, and the most the overflow check keeps free for them.
 */
export const OUTPUT_TOKEN_MAX = 32_000;

/** A model as the loop uses it: the AI SDK model, its config entry and the provider-options key. */
export interface ResolvedModel {
  providerId: string;
  modelId: string;
  model: LanguageModelV3;
  config: ModelConfig;
  /** Key under which `providerOptions` for this provider go (e.g. "openai", "anthropic", or the provider id). */
  optionsKey: string;
  /**
   * True when the provider's API takes images and PDFs inside a tool result (Anthropic Messages'
   * `tool_result` blocks, OpenAI Responses' `function_call_output`); OpenAI-compatible chat
   * completions take only text there (OpenCode `supportsMediaInToolResults`).
   */
  mediaInToolResults: boolean;
}

/** Finds models by provider/model id. */
export interface ModelResolver {
  /** True when at least one model is configured (otherwise prompts cannot be answered). */
  readonly configured: boolean;
  /**
   * The model. Throws `ModelUnavailableError` naming the configured models (synchronously) when
   * it is not configured; may return a promise (the provider's package is imported on first
   * use), which rejects when the provider's npm package is not supported.
   */
  resolve(ref: { providerId: string; modelId: string }): ResolvedModel | Promise<ResolvedModel>;
}

/** The requested model is not configured. `available` lists "provider/model" names that are. */
export class ModelUnavailableError extends Error {
  override name = "ModelUnavailableError";
  constructor(
    readonly providerId: string,
    readonly modelId: string,
    readonly available: string[],
  ) {
    super(`model ${providerId}/${modelId} is not configured; configured models: ${available.join(", ") || "(none)"}`);
  }
}

/** The npm packages a provider entry may name; `npm` defaults by provider id, else openai-compatible. */
export const PROVIDER_PACKAGES = ["@ai-sdk/openai-compatible", "@ai-sdk/openai", "@ai-sdk/anthropic"] as const;

/**
 * Builds AI SDK models from `ledger.json`'s `provider` map (opencode.json style). Built in:
 * `@ai-sdk/openai-compatible` (Ollama, llama.cpp, vLLM, LM Studio: `options.baseURL`),
 * `@ai-sdk/openai` and `@ai-sdk/anthropic`. API keys come from `options.apiKey` or the usual
 * environment variables (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `<PROVIDER_ID>_API_KEY` for
 * openai-compatible). Providers are created once, on first use, and each provider package is
 * imported then (`import()`), not when the ledger starts. Their HTTP requests carry the W3C
 * trace context (`traceparent`) of the model step while tracing runs (`tracedFetch`).
 */
export function createModelResolver(config: LedgerConfig, env: NodeJS.ProcessEnv = process.env): ModelResolver {
  // Created on first use; a failed import is tried again on the next prompt, not cached for the process.
  const providerOf = loadOncePerKey((providerId: string) => createProvider(providerId, config.providers[providerId]!, env));
  const available = Object.entries(config.providers).flatMap(([p, entry]) => Object.keys(entry.models).map((m) => `${p}/${m}`));
  return {
    configured: available.length > 0,
    resolve({ providerId, modelId }) {
      // Own keys only: "constructor/x" or "p/toString" must not find Object.prototype members.
      const entry = Object.hasOwn(config.providers, providerId) ? config.providers[providerId] : undefined;
      const modelConfig = entry && Object.hasOwn(entry.models, modelId) ? entry.models[modelId] : undefined;
      if (!entry || !modelConfig) throw new ModelUnavailableError(providerId, modelId, available);
      return providerOf(providerId).then((p) => ({
        providerId,
        modelId,
        model: p.make(modelId),
        config: modelConfig,
        optionsKey: p.optionsKey,
        mediaInToolResults: p.mediaInToolResults,
      }));
    },
  };
}

/** A created provider: makes a model by id; `optionsKey` and `mediaInToolResults` as in {@link ResolvedModel}. */
interface Provider {
  make: (modelId: string) => LanguageModelV3;
  optionsKey: string;
  mediaInToolResults: boolean;
}

/** Imports the provider's package and creates it; rejects for an unsupported `npm` package. */
async function createProvider(providerId: string, entry: ProviderConfig, env: NodeJS.ProcessEnv): Promise<Provider> {
  const options = entry.options as { baseURL?: string; apiKey?: string; headers?: Record<string, string> };
  const npm = providerPackage(providerId, entry);
  switch (npm) {
    case "@ai-sdk/openai": {
      const { createOpenAI } = await import("@ai-sdk/openai");
      const openai = createOpenAI({
        baseURL: options.baseURL,
        apiKey: options.apiKey || env.OPENAI_API_KEY,
        headers: options.headers,
        fetch: tracedFetch,
      });
      return { make: (id: string) => openai(id), optionsKey: "openai", mediaInToolResults: true };
    }
    case "@ai-sdk/anthropic": {
      const { createAnthropic } = await import("@ai-sdk/anthropic");
      const anthropic = createAnthropic({
        baseURL: options.baseURL,
        apiKey: options.apiKey || env.ANTHROPIC_API_KEY,
        headers: options.headers,
        fetch: tracedFetch,
      });
      return { make: (id: string) => anthropic(id), optionsKey: "anthropic", mediaInToolResults: true };
    }
    case "@ai-sdk/openai-compatible": {
      const key = options.apiKey || env[`${providerId.toUpperCase().replace(/[^A-Z0-9]/g, "_")}_API_KEY`];
      const { createOpenAICompatible } = await import("@ai-sdk/openai-compatible");
      const compatible = createOpenAICompatible({
        name: providerId,
        baseURL: options.baseURL ?? DEFAULT_COMPATIBLE_BASE_URL,
        apiKey: key,
        headers: options.headers,
        includeUsage: true,
        fetch: tracedFetch,
      });
      return { make: (id: string) => compatible.chatModel(id), optionsKey: providerId, mediaInToolResults: false };
    }
    default:
      throw new Error(`provider ${providerId}: npm package "${npm}" is not supported; use one of ${PROVIDER_PACKAGES.join(", ")}`);
  }
}
