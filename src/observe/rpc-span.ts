import { Code } from "@connectrpc/connect";
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Span,
  type TextMapGetter,
} from "@opentelemetry/api";
import { TRACER_NAME, tracingEnabled } from "./spans.js";

/** The server span of one RPC; see {@link startRpcSpan}. */
export interface RpcSpan {
  /** The span itself (its ids go on the RPC's log line). */
  readonly span: Span;
  /** The caller's context (from its `traceparent`) with this span active: run the handler in it. */
  readonly context: Context;
  /** Ends the span with the RPC's outcome (`Code`, or undefined for OK) and its `session_id`, when it had one. */
  end(code: Code | undefined, sessionId: string | undefined): void;
}

/** `rpc.system` by the protocol of the request (OpenTelemetry semantic conventions). */
const RPC_SYSTEM = { grpc: "grpc", "grpc-web": "grpc_web", connect: "connect_rpc" } as const;

/** Codes that are the server's failure (span status ERROR), as the gRPC server conventions list them. */
const SERVER_ERRORS: ReadonlySet<Code> = new Set([
  Code.Unknown,
  Code.DeadlineExceeded,
  Code.Unimplemented,
  Code.Internal,
  Code.Unavailable,
  Code.DataLoss,
]);

const headerGetter: TextMapGetter<Headers> = {
  keys: (headers) => [...headers.keys()],
  get: (headers, key) => headers.get(key) ?? undefined,
};

/**
 * Starts the SERVER span of an RPC, named `<package.Service>/<Method>` (e.g.
 * `ledger.v1.SessionService/Prompt`), as a child of the caller's span when the request carries
 * a W3C `traceparent` header (Connect, gRPC and gRPC-Web alike: it is an HTTP header or gRPC
 * metadata); attributes `rpc.system` (`grpc`, `grpc_web` or `connect_rpc`, by the request's
 * protocol), `rpc.service`, `rpc.method`, `ledger.message_id` (the request's `message_id`,
 * when set). At the end: `rpc.grpc.status_code` (0 for OK), `rpc.connect_rpc.error_code` (the
 * Connect code name) on errors, `ledger.session_id`; status ERROR for the codes that mean a
 * server failure (unknown, deadline_exceeded, unimplemented, internal, unavailable, data_loss).
 * Undefined without tracing.
 */
export function startRpcSpan(
  req: { service: { typeName: string }; method: { name: string }; header: Headers; message?: unknown },
  protocol: keyof typeof RPC_SYSTEM,
  codeName: (code: Code) => string,
): RpcSpan | undefined {
  if (!tracingEnabled()) return undefined;
  const parent = propagation.extract(ROOT_CONTEXT, req.header, headerGetter);
  const span = trace.getTracer(TRACER_NAME).startSpan(
    `${req.service.typeName}/${req.method.name}`,
    {
      kind: SpanKind.SERVER,
      attributes: { "rpc.system": RPC_SYSTEM[protocol], "rpc.service": req.service.typeName, "rpc.method": req.method.name },
    },
    parent,
  );
  const messageId = stringField(req.message, "messageId");
  if (messageId) span.setAttribute("ledger.message_id", messageId);
  let ended = false;
  return {
    span,
    context: trace.setSpan(parent, span),
    end(code, sessionId) {
      if (ended) return;
      ended = true;
      if (sessionId) span.setAttribute("ledger.session_id", sessionId);
      span.setAttribute("rpc.grpc.status_code", code ?? 0);
      if (code !== undefined) {
        span.setAttribute("rpc.connect_rpc.error_code", codeName(code));
        if (SERVER_ERRORS.has(code)) span.setStatus({ code: SpanStatusCode.ERROR, message: codeName(code) });
      }
      span.end();
    },
  };
}

/**
 * Passes `messages` through with every step of the iteration (the handler's generator body)
 * running in `ctx`: connect-node reads a response stream from its own code, outside the
 * interceptor's `context.with`.
 */
export async function* inContext<T>(ctx: Context, messages: AsyncIterable<T>): AsyncIterable<T> {
  const iterator = context.with(ctx, () => messages[Symbol.asyncIterator]());
  let done = false;
  try {
    for (;;) {
      const step = await context.with(ctx, () => iterator.next());
      if (step.done) {
        done = true;
        return;
      }
      yield step.value;
    }
  } finally {
    if (!done) await context.with(ctx, async () => iterator.return?.());
  }
}

function stringField(message: unknown, name: string): string | undefined {
  if (typeof message !== "object" || message === null || !(name in message)) return undefined;
  const value = (message as Record<string, unknown>)[name];
  return typeof value === "string" && value !== "" ? value : undefined;
}
