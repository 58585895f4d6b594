/**
 * Scripted models for loop tests: the AI SDK's own `MockLanguageModelV3` (from `ai/test`) behind
 * a `ModelResolver`, and builders of V3 stream results (one per model step).
 *
 * A `MockLanguageModelV3` answers its n-th `doStream` call with the n-th scripted result and
 * records every call's options in `doStreamCalls` (`prompt`, `tools`, `providerOptions`...).
 * Each result's stream can be read once, so build a new model per test.
 */
import type {
  LanguageModelV3,
  LanguageModelV3FinishReason,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
  LanguageModelV3Usage,
  SharedV3ProviderMetadata,
} from "@ai-sdk/provider";
import { simulateReadableStream } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { ModelUnavailableError, type ModelResolver } from "../../src/agent/providers.js";
import type { ModelConfig } from "../../src/config/config.js";

/** "provider/model". */
export type ModelKey = `${string}/${string}`;

/**
 * A resolver over `models` (looked up on every `resolve`, so a test may put a new model under a
 * key before each prompt), `configured: true`. `configs` gives a model's config entry (cost,
 * modalities, variants, options); defaults: no variants, no options. An unknown key throws
 * `ModelUnavailableError` naming the known ones.
 */
export function mockResolver(
  models: Partial<Record<ModelKey, LanguageModelV3>>,
  configs: Partial<Record<ModelKey, Partial<ModelConfig>>> = {},
): ModelResolver {
  return {
    configured: true,
    resolve({ providerId, modelId }) {
      const key: ModelKey = `${providerId}/${modelId}`;
      const model = models[key];
      if (!model)
        throw new ModelUnavailableError(
          providerId,
          modelId,
          Object.keys(models).filter((k) => models[k as ModelKey]),
        );
      // The mock model receives the prompt as the AI SDK builds it: media may stay in tool results.
      return {
        providerId,
        modelId,
        model,
        config: { variants: {}, options: {}, ...configs[key] },
        optionsKey: providerId,
        mediaInToolResults: true,
      };
    },
  };
}

/**
 * A mock model answering its calls with `results` in order; a call beyond them fails with an
 * error naming the call (recorded on the assistant message as an unknown error).
 */
export function scriptedModel(
  results: LanguageModelV3StreamResult[],
  id: { provider?: string; modelId?: string } = {},
): MockLanguageModelV3 {
  let next = 0;
  return new MockLanguageModelV3({
    provider: id.provider ?? "mock",
    modelId: id.modelId ?? "model",
    doStream: async () => {
      const result = results[next++];
      if (!result) throw new Error(`mock model: no scripted reply for call ${next}`);
      return result;
    },
  });
}

/** V3 usage from token counts; `input` is the non-cached input (total input = input + cache read + cache write). */
export function usage(
  input = 0,
  output = 0,
  extra: { reasoning?: number; cacheRead?: number; cacheWrite?: number } = {},
): LanguageModelV3Usage {
  const reasoning = extra.reasoning ?? 0;
  const cacheRead = extra.cacheRead ?? 0;
  const cacheWrite = extra.cacheWrite ?? 0;
  return {
    inputTokens: { total: input + cacheRead + cacheWrite, noCache: input, cacheRead, cacheWrite },
    outputTokens: { total: output, text: output - reasoning, reasoning },
  };
}

/** A stream result from raw V3 parts: `stream-start`, the parts, then `finish`. */
export function reply(
  parts: LanguageModelV3StreamPart[],
  finish: LanguageModelV3FinishReason["unified"],
  tokens: LanguageModelV3Usage = usage(),
  providerMetadata?: SharedV3ProviderMetadata,
): LanguageModelV3StreamResult {
  const raw = finish === "tool-calls" ? "tool_calls" : finish;
  const chunks: LanguageModelV3StreamPart[] = [
    { type: "stream-start", warnings: [] },
    ...parts,
    { type: "finish", finishReason: { unified: finish, raw }, usage: tokens, providerMetadata },
  ];
  return { stream: simulateReadableStream({ chunks }) };
}

/** `text-start`, one `text-delta` per word (spaces kept), `text-end` for block `id`. */
export function textParts(text: string, id = "txt-0", providerMetadata?: SharedV3ProviderMetadata): LanguageModelV3StreamPart[] {
  const deltas = text.match(/\S+\s*|\s+/g) ?? [];
  return [
    { type: "text-start", id, providerMetadata },
    ...deltas.map((delta): LanguageModelV3StreamPart => ({ type: "text-delta", id, delta })),
    { type: "text-end", id, providerMetadata },
  ];
}

/** `reasoning-start`, one `reasoning-delta` per word, `reasoning-end` for block `id`. */
export function reasoningParts(text: string, id = "rsn-0", providerMetadata?: SharedV3ProviderMetadata): LanguageModelV3StreamPart[] {
  const deltas = text.match(/\S+\s*|\s+/g) ?? [];
  return [
    { type: "reasoning-start", id, providerMetadata },
    ...deltas.map((delta): LanguageModelV3StreamPart => ({ type: "reasoning-delta", id, delta })),
    { type: "reasoning-end", id, providerMetadata },
  ];
}

/**
 * A `tool-call` part (input as a JSON string). With `streamInput`, preceded by
 * `tool-input-start`, two `tool-input-delta`s and `tool-input-end`, as real providers stream it.
 */
export function toolCallParts(
  callId: string,
  toolName: string,
  input: Record<string, unknown>,
  options: { streamInput?: boolean; providerMetadata?: SharedV3ProviderMetadata } = {},
): LanguageModelV3StreamPart[] {
  const json = JSON.stringify(input);
  const half = Math.floor(json.length / 2);
  const streamed: LanguageModelV3StreamPart[] = options.streamInput
    ? [
        { type: "tool-input-start", id: callId, toolName },
        { type: "tool-input-delta", id: callId, delta: json.slice(0, half) },
        { type: "tool-input-delta", id: callId, delta: json.slice(half) },
        { type: "tool-input-end", id: callId },
      ]
    : [];
  return [...streamed, { type: "tool-call", toolCallId: callId, toolName, input: json, providerMetadata: options.providerMetadata }];
}

/** A step answering with `text`, finish `stop`. */
export function textReply(text: string, tokens?: LanguageModelV3Usage): LanguageModelV3StreamResult {
  return reply(textParts(text), "stop", tokens);
}

/** A step with a reasoning block, then `text`, finish `stop`. */
export function reasoningReply(reasoning: string, text: string, tokens?: LanguageModelV3Usage): LanguageModelV3StreamResult {
  return reply([...reasoningParts(reasoning), ...textParts(text)], "stop", tokens);
}

/** A step calling one tool, finish `tool-calls`. */
export function toolCallReply(
  callId: string,
  toolName: string,
  input: Record<string, unknown>,
  options: { streamInput?: boolean; providerMetadata?: SharedV3ProviderMetadata; usage?: LanguageModelV3Usage } = {},
): LanguageModelV3StreamResult {
  return reply(toolCallParts(callId, toolName, input, options), "tool-calls", options.usage);
}

/** A step cut at the output token limit after `text`, finish `length`. */
export function lengthReply(text: string, tokens?: LanguageModelV3Usage): LanguageModelV3StreamResult {
  return reply(textParts(text), "length", tokens);
}

// The fake model config: what tests put in ledger.json for a scripted model server
// (./openai-server.ts, ./anthropic-server.ts) or a port nobody listens on.

/** `retry` that never retries: a failed model call ends the step at once. */
export const NO_RETRY = { attempts: 0, initial_ms: 0, max_ms: 0 } as const;

/**
 * The ledger.json `provider` entry of an OpenAI-compatible server at `baseURL`: `models` (default
 * one model, "m"), sending `apiKey` as the bearer token when given.
 */
export function compatibleProvider(
  baseURL: string,
  models: Record<string, Record<string, unknown>> = { m: {} },
  apiKey?: string,
): { npm: string; options: { baseURL: string; apiKey?: string }; models: Record<string, Record<string, unknown>> } {
  return { npm: "@ai-sdk/openai-compatible", options: apiKey === undefined ? { baseURL } : { baseURL, apiKey }, models };
}
