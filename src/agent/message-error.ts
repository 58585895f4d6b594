import type { MessageInitShape } from "@bufbuild/protobuf";
import { APICallError, LoadAPIKeyError } from "@ai-sdk/provider";
import { NoObjectGeneratedError, RetryError } from "ai";
import type { MessageErrorSchema } from "../../gen/ledger/v1/error_pb.js";
import { isHandOver } from "./hand-over.js";
import { ModelUnavailableError } from "./providers.js";

/** A `ledger.v1.MessageError` as an init shape. */
export type MessageErrorInit = MessageInitShape<typeof MessageErrorSchema>;

/** The error of an answer whose loop was handed over at shutdown. */
const HANDED_OVER: MessageErrorInit = {
  message: "Interrupted: the server running this answer shut down; ResumeSession continues it",
  kind: { case: "interrupted", value: {} },
};

const CONTEXT_OVERFLOW = /context length|context window|maximum context|too many tokens|prompt is too long/i;

/**
 * Classifies a failure of a model step as the assistant message's `error` (OpenCode
 * `MessageV2.fromError`): provider auth (401/403, missing key), API error with status code and
 * `retryable`, context overflow, model not configured, structured output, aborted, unknown.
 * Messages never carry stacks; the API error keeps at most 2,000 characters of the body. An error
 * a provider reports inside its stream arrives as a plain object (OpenAI `response.failed`,
 * Anthropic's `error` event): its `message` is used, else its JSON (OpenCode falls back to JSON too).
 * An abort whose `abortReason` is a hand-over at shutdown (`LoopHandedOver`) is `interrupted`
 * instead of `aborted`: ResumeSession continues it like an answer crash recovery closed.
 */
export function toMessageError(error: unknown, providerId: string, aborted: boolean, abortReason?: unknown): MessageErrorInit {
  if (aborted && isHandOver(abortReason)) return HANDED_OVER;
  if (aborted) return { message: "The run was aborted", kind: { case: "aborted", value: {} } };
  const cause = RetryError.isInstance(error) ? error.lastError : error;
  if (cause instanceof ModelUnavailableError) {
    return {
      message: cause.message,
      kind: { case: "modelNotFound", value: { providerId: cause.providerId, modelId: cause.modelId, available: cause.available } },
    };
  }
  if (LoadAPIKeyError.isInstance(cause)) return { message: cause.message, kind: { case: "providerAuth", value: { providerId } } };
  if (APICallError.isInstance(cause)) {
    const status = cause.statusCode ?? 0;
    if (status === 401 || status === 403) {
      return {
        message: `${providerId}: authentication failed (${status}): ${cause.message}`,
        kind: { case: "providerAuth", value: { providerId } },
      };
    }
    if (CONTEXT_OVERFLOW.test(`${cause.message} ${cause.responseBody ?? ""}`)) {
      return { message: cause.message, kind: { case: "contextOverflow", value: {} } };
    }
    return {
      message: cause.message,
      kind: {
        case: "api",
        value: { statusCode: status, retryable: cause.isRetryable, responseBody: (cause.responseBody ?? "").slice(0, 2000) },
      },
    };
  }
  if (NoObjectGeneratedError.isInstance(cause)) return { message: cause.message, kind: { case: "structuredOutput", value: {} } };
  return { message: cause instanceof Error ? cause.message : plainMessage(cause), kind: { case: "unknown", value: {} } };
}

function plainMessage(value: unknown): string {
  if (value === null || typeof value !== "object") return String(value);
  const message = (value as { message?: unknown }).message;
  if (typeof message === "string") return message;
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

/**
 * Whether the step may be retried, and after how long (ms) the provider asked us to wait. What
 * the provider says decides: an `x-should-retry: true|false` response header (OpenAI,
 * Anthropic) when present, else the AI SDK's `isRetryable` (408, 409, 429, 5xx, and a refused
 * or dropped connection); the wait comes from `retry-after-ms` or `retry-after` (seconds or an
 * HTTP date). Anything but an `APICallError` is not retryable.
 */
export function retryAdvice(error: unknown): { retryable: boolean; afterMs?: number } {
  const cause = RetryError.isInstance(error) ? error.lastError : error;
  if (!APICallError.isInstance(cause)) return { retryable: false };
  const should = cause.responseHeaders?.["x-should-retry"]?.trim().toLowerCase();
  if (!(should === "true" || (should !== "false" && cause.isRetryable))) return { retryable: false };
  const header = cause.responseHeaders?.["retry-after-ms"] ?? cause.responseHeaders?.["retry-after"];
  if (header === undefined) return { retryable: true };
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return { retryable: true, afterMs: cause.responseHeaders?.["retry-after-ms"] ? seconds : seconds * 1000 };
  const date = Date.parse(header);
  return { retryable: true, afterMs: Number.isNaN(date) ? undefined : Math.max(0, date - Date.now()) };
}
