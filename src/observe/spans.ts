/**
 * Spans through the OpenTelemetry API only (docs/operations.md#tracing). The API is a no-op
 * until `startTracing` (./tracing.ts, loaded only when telemetry is configured) registers the
 * SDK; until then every helper here returns at once, so the default path pays one boolean test.
 * The domain (src/ledger, src/agent, src/tools) uses these helpers, never the SDK.
 */
import { context, isSpanContextValid, propagation, SpanKind, SpanStatusCode, trace, type Attributes, type Span } from "@opentelemetry/api";

/** The tracer name (instrumentation scope) of the ledger's own spans. */
export const TRACER_NAME = "session-ledger";

let enabled = false;

/** True while the SDK is registered (between `startTracing` and its `shutdown`). */
export function tracingEnabled(): boolean {
  return enabled;
}

/** Called by ./tracing.ts only: the SDK was registered (true) or shut down (false). */
export function setTracingEnabled(value: boolean): void {
  enabled = value;
}

/**
 * Runs `fn` inside a new internal span `name` (a child of the active span), with `attributes`;
 * `fn` may add more through the span it is given. The span ends when `fn` settles; a throw is
 * recorded (`recordException`, status ERROR with the error's message) and rethrown. Without
 * tracing, runs `fn(undefined)` and nothing else.
 *
 * ```ts
 * const drafts = await inSpan("ledger.resolve_drafts", { "ledger.parts": parts.length }, () => resolveDrafts(ctx, parts));
 * ```
 */
export async function inSpan<T>(name: string, attributes: Attributes, fn: (span: Span | undefined) => Promise<T>): Promise<T> {
  if (!enabled) return fn(undefined);
  return trace.getTracer(TRACER_NAME).startActiveSpan(name, { kind: SpanKind.INTERNAL, attributes }, async (span) => {
    try {
      return await fn(span);
    } catch (error) {
      failSpan(span, error);
      throw error;
    } finally {
      span.end();
    }
  });
}

/** Marks `span` failed by `error`: the exception event and status ERROR with its message. */
export function failSpan(span: Span, error: unknown): void {
  span.recordException(error instanceof Error ? error : String(error));
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
}

/** Sets `attributes` on the active span (e.g. the message id a prompt was given); nothing without tracing. */
export function annotateActiveSpan(attributes: Attributes): void {
  if (!enabled) return;
  trace.getActiveSpan()?.setAttributes(attributes);
}

/** The ids of the active span, as log fields `{trace_id, span_id}` (32 and 16 hex digits); undefined outside a span or without tracing. */
export function activeTraceIds(): { trace_id: string; span_id: string } | undefined {
  if (!enabled) return undefined;
  const span = trace.getActiveSpan();
  if (!span) return undefined;
  const ids = span.spanContext();
  return isSpanContextValid(ids) ? { trace_id: ids.traceId, span_id: ids.spanId } : undefined;
}

/**
 * A `fetch` that adds the active span's W3C trace context (`traceparent`, and `tracestate` when
 * set) to each request's headers, for the model providers' HTTP requests: the provider's side
 * then joins the caller's trace. Without tracing it is plain `fetch`.
 */
export const tracedFetch: typeof fetch = (input, init) => {
  if (!enabled) return fetch(input, init);
  const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
  propagation.inject(context.active(), headers, { set: (carrier, key, value) => carrier.set(key, value) });
  return fetch(input, { ...init, headers });
};
