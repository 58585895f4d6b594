import { create } from "@bufbuild/protobuf";
import { timestampFromDate, timestampNow } from "@bufbuild/protobuf/wkt";
import type { JsonObject } from "@bufbuild/protobuf";
import { jsonSchema, Output, stepCountIs, streamText, type JSONSchema7, type ModelMessage, type ToolSet } from "ai";
import { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { newId } from "../ids.js";
import { tracingEnabled } from "../observe/spans.js";
import type { RetryConfig } from "../config/config.js";
import type { SessionLedger } from "../ledger/session-ledger.js";
import { toLoopEvents, type LoopEvent } from "./ai-sdk-events.js";
import { retryAdvice, toMessageError } from "./message-error.js";
import { processStep, type StepResult, type StepSnapshot, type ToolProgress } from "./processor.js";
import { OUTPUT_TOKEN_MAX, type ResolvedModel } from "./providers.js";
import { stepCost } from "./usage.js";

/** One model call: what to send, where to write. */
export interface StepRequest {
  ledger: SessionLedger;
  sessionId: string;
  messageId: string;
  model: ResolvedModel;
  variant?: string;
  system: string;
  messages: ModelMessage[];
  tools?: ToolSet;
  signal: AbortSignal;
  retry: RetryConfig;
  /** JSON schema the final answer must match (`format: json_schema`); yields a `structured` event. */
  schema?: JsonObject;
  /** Progress of running tool calls, stored on their parts. */
  progress?: ToolProgress;
  /** The step's lazy snapshot (`step_start.snapshot`, `patch`). */
  snapshot?: StepSnapshot;
  /** Whether the AI SDK's spans carry prompts and answers (`telemetry.record_content`); default false. */
  recordContent?: boolean;
  /**
   * The agent's sampling settings and provider options (`agent.<name>.temperature`, `top_p`,
   * `options`); absent ones are not sent (the provider's defaults apply).
   */
  agent?: { temperature?: number; topP?: number; options?: Record<string, unknown> };
}

/**
 * Runs one model step (`streamText` limited to one step, no SDK retries) and writes it with
 * `processStep`. A provider error the provider calls retryable (see `retryAdvice`: 408, 409,
 * 429, 5xx, a refused or dropped connection, `x-should-retry`) that came before any output is
 * retried up to `retry.attempts` times, waiting `retry.initialMs` doubled each time up to
 * `retry.maxMs`, or the provider's `retry-after`; each retry is recorded as a `retry` part and
 * a `session_status` retry event (with the time of the next attempt). No retry starts later
 * than `retry.maxTotalMs` after the first call: the last wait is cut to fit, and a `retry-after`
 * that would end past it stops retrying (the step ends with the provider's error).
 *
 * Hand-written on purpose: the retry library that still supports Node 20 (p-retry 7) computes
 * its own delays (no `retry-after`) and does not say how long it will wait before it waits,
 * which the `retry` part and status need; the AI SDK's own retries have no hooks to record them.
 */
export async function runStep(request: StepRequest): Promise<StepResult> {
  const { ledger, model } = request;
  const deadline = Date.now() + request.retry.maxTotalMs;
  for (let attempt = 1; ; attempt++) {
    const result = await processStep(
      {
        ledger,
        sessionId: request.sessionId,
        messageId: request.messageId,
        cost: (usage) => stepCost(model.config, usage),
        progress: request.progress,
        snapshot: request.snapshot,
      },
      modelEvents(request),
    );
    if (!result.error || result.aborted || request.signal.aborted) return result;
    const advice = retryAdvice(result.error);
    if (!advice.retryable || result.produced || attempt > request.retry.attempts) return result;
    const left = deadline - Date.now();
    // Retrying before the provider's retry-after would only fail again.
    if (left <= 0 || (advice.afterMs !== undefined && advice.afterMs > left)) return result;
    const wait = advice.afterMs ?? Math.min(request.retry.initialMs * 2 ** (attempt - 1), request.retry.maxMs, left);
    const error = toMessageError(result.error, model.providerId, false);
    await ledger.savePart(
      create(PartSchema, {
        id: newId("prt"),
        sessionId: request.sessionId,
        messageId: request.messageId,
        kind: { case: "retry", value: { attempt, error, timeCreated: timestampNow() } },
      }),
    );
    await ledger.setStatus({
      case: "retry",
      value: { attempt, message: error.message, next: timestampFromDate(new Date(Date.now() + wait)) },
    });
    await sleep(wait, request.signal);
    await ledger.setStatus({ case: "busy", value: {} });
  }
}

async function* modelEvents(request: StepRequest): AsyncIterable<LoopEvent> {
  // As OpenCode merges them: the model's options, then the agent's, then the variant's.
  const options = {
    ...request.model.config.options,
    ...request.agent?.options,
    ...(request.variant ? request.model.config.variants[request.variant] : undefined),
  };
  const outputLimit = request.model.config.limit?.output;
  const stream = streamText({
    model: request.model.model,
    system: request.system,
    messages: request.messages,
    tools: request.tools,
    stopWhen: stepCountIs(1),
    maxRetries: 0,
    abortSignal: request.signal,
    providerOptions: Object.keys(options).length > 0 ? { [request.model.optionsKey]: options as never } : undefined,
    // The model's `headers` (opencode.json `provider.<id>.models.<id>.headers`) on every call, over
    // the provider's `options.headers` (the AI SDK merges them; OpenCode `LLM.stream` sends `model.headers`).
    headers: request.model.config.headers,
    temperature: request.agent?.temperature,
    topP: request.agent?.topP,
    // OpenCode `ProviderTransform.maxOutputTokens`: the model's `limit.output`, at most OUTPUT_TOKEN_MAX
    // (OpenCode sends OUTPUT_TOKEN_MAX when the limit is unknown; here nothing is sent then).
    maxOutputTokens: outputLimit ? Math.min(outputLimit, OUTPUT_TOKEN_MAX) : undefined,
    output: request.schema ? Output.object({ schema: jsonSchema(request.schema as JSONSchema7) }) : undefined,
    onError: () => {},
    // The AI SDK's own spans (ai.streamText, ai.streamText.doStream, ai.toolCall) while tracing runs (docs/operations.md#tracing).
    experimental_telemetry: tracingEnabled()
      ? {
          isEnabled: true,
          functionId: "ledger.step",
          metadata: { sessionId: request.sessionId, messageId: request.messageId },
          recordInputs: request.recordContent ?? false,
          recordOutputs: request.recordContent ?? false,
        }
      : undefined,
  });
  let finish: string | undefined;
  for await (const part of stream.fullStream) {
    if (part.type === "finish-step") finish = part.finishReason;
    yield* toLoopEvents(part);
  }
  if (request.schema && finish && finish !== "tool-calls") {
    try {
      yield { type: "structured", value: await stream.output };
    } catch (error) {
      yield { type: "structured", error };
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}
