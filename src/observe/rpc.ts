import type http from "node:http";
import type http2 from "node:http2";
import { performance } from "node:perf_hooks";
import { context as otelContext } from "@opentelemetry/api";
import { Code, ConnectError, createContextKey, createContextValues, type ContextValues, type Interceptor } from "@connectrpc/connect";
import { newUlid } from "../ids.js";
import { logger as defaultLogger, type LogFields, type Logger } from "./log.js";
import type { LedgerMetrics } from "./metrics.js";
import { inContext, startRpcSpan } from "./rpc-span.js";

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** Request and response header carrying the request id. */
export const REQUEST_ID_HEADER = "x-request-id";

/** An incoming `x-request-id` is kept when it is 1-128 visible ASCII characters (no spaces). */
const VALID_REQUEST_ID = /^[\x21-\x7e]{1,128}$/;

/**
 * A new request id: a ULID (26 characters, time-ordered), from the ids' pooled randomness (ulid's
 * default PRNG made 16 `getRandomValues` calls per request: 3.6 % of the busy CPU in a profile of
 * noReply prompts).
 */
export function newRequestId(): string {
  return newUlid();
}

/** The client's request id when it is usable, else a new one. */
export function requestIdFrom(header: string | string[] | null | undefined): string {
  const value = Array.isArray(header) ? undefined : header?.trim();
  return value && VALID_REQUEST_ID.test(value) ? value : newRequestId();
}

/** What the HTTP handler knows about a request and hands to the interceptor. */
interface RequestContext {
  requestId: string;
  /** Set by the interceptor when it takes the request over (it logs and counts it). */
  started: boolean;
}

const requestContextKey = createContextKey<RequestContext | undefined>(undefined, { description: "ledger request context" });

/**
 * The request id of an RPC, for other interceptors' log lines (e.g. `errorInterceptor`): the one
 * the HTTP handler assigned, else the client's `x-request-id` header.
 */
export function requestIdOf(req: { contextValues: ContextValues; header: Headers }): string | undefined {
  return req.contextValues.get(requestContextKey)?.requestId ?? req.header.get(REQUEST_ID_HEADER) ?? undefined;
}

/** Observes RPCs: one log line and one metrics sample per RPC. See `createRpcObserver`. */
export interface RpcObserver {
  /**
   * The Connect interceptor; put it first (outermost), so it sees the final code of every error,
   * including authentication and validation failures.
   */
  readonly interceptor: Interceptor;
  /** For `connectNodeAdapter({ contextValues })`: passes the request id to the interceptor. */
  contextValues(req: NodeRequest): ContextValues;
  /** Tells which request paths are procedures (called once the routes are registered). */
  setProcedures(paths: Iterable<string>): void;
  /**
   * Call first for every HTTP request: the client's `x-request-id` (when usable) or a new one,
   * set at once as the `x-request-id` response header so every answer carries it (errors and
   * streams included).
   */
  assignRequestId(req: NodeRequest, res: NodeResponse): string;
  /**
   * Call just before handing a request to the Connect adapter. When the response closes and the
   * interceptor never saw the request (unknown path, body over the size limit, malformed or
   * unsupported request, client gone while sending), logs it here: as `rpc` with the code the
   * response carried for a known procedure (also counted), else as `http` (not counted, so
   * arbitrary paths cannot add metric series).
   */
  track(req: NodeRequest, res: NodeResponse, requestId: string): void;
}

/**
 * Logs every RPC at info when it ends, as one JSON line
 * `{msg:"rpc", procedure, protocol, code, duration_ms, request_id, session_id}`
 * (`code`: "ok" or the Connect code name, e.g. "invalid_argument"; `session_id` from the request
 * message's `session_id` when it has one; a server stream ends when its last message is written,
 * it fails, or the client cancels) and records `ledger_rpc_requests_total` /
 * `ledger_rpc_duration_seconds` in `metrics`. Durations are measured from the interceptor's start:
 * reading a unary request body is not included. While tracing runs (docs/operations.md#tracing),
 * each RPC is also a SERVER span (`startRpcSpan`, a child of the caller's `traceparent`) in
 * which the handler runs, and its log line carries the span's `trace_id` and `span_id`.
 */
export function createRpcObserver(options: { logger?: Logger; metrics?: LedgerMetrics } = {}): RpcObserver {
  const logger = options.logger ?? defaultLogger;
  const metrics = options.metrics;
  const contexts = new WeakMap<NodeRequest, RequestContext>();
  const procedures = new Set<string>();

  const record = (fields: {
    procedure: string;
    protocol: string;
    code: string;
    start: number;
    requestId: string;
    sessionId?: string;
    status?: number;
    trace?: { trace_id: string; span_id: string };
  }) => {
    const seconds = (performance.now() - fields.start) / 1000;
    metrics?.observeRpc(fields.procedure, fields.code, seconds);
    const line: LogFields = {
      procedure: fields.procedure,
      protocol: fields.protocol,
      code: fields.code,
      duration_ms: Math.round(seconds * 1_000_000) / 1000,
      request_id: fields.requestId,
    };
    if (fields.sessionId) line.session_id = fields.sessionId;
    if (fields.status !== undefined) line.http_status = fields.status;
    if (fields.trace) Object.assign(line, fields.trace);
    logger.info("rpc", line);
  };

  const interceptor: Interceptor = (next) => async (req) => {
    const start = performance.now();
    const context = req.contextValues.get(requestContextKey);
    if (context) context.started = true;
    // Without the HTTP handler (another server), the interceptor picks the id and echoes it itself.
    const requestId = context?.requestId ?? requestIdFrom(req.header.get(REQUEST_ID_HEADER));
    const echo = (headers: Headers) => {
      if (!context) headers.set(REQUEST_ID_HEADER, requestId);
    };
    const procedure = `/${req.service.typeName}/${req.method.name}`;
    const protocol = protocolOf(req.header.get("content-type"));
    let sessionId: string | undefined;
    let done = false;
    const rpcSpan = startRpcSpan(req, protocol, codeName);
    const ids = rpcSpan?.span.spanContext();
    const trace = ids && { trace_id: ids.traceId, span_id: ids.spanId };
    /** `code`: undefined for OK. */
    const finish = (code: Code | undefined) => {
      if (done) return;
      done = true;
      rpcSpan?.end(code, sessionId);
      record({ procedure, protocol, code: code === undefined ? "ok" : codeName(code), start, requestId, sessionId, trace });
    };

    if (req.stream) {
      req = { ...req, message: tapEach(req.message, (message) => (sessionId ??= sessionIdOf(message))) };
    } else {
      sessionId = sessionIdOf(req.message);
    }
    try {
      const res = rpcSpan ? await otelContext.with(rpcSpan.context, () => next(req)) : await next(req);
      echo(res.header);
      if (!res.stream) {
        finish(undefined);
        return res;
      }
      const messages = rpcSpan ? inContext(rpcSpan.context, res.message) : res.message;
      return { ...res, message: observeStream(messages, req.signal, finish) };
    } catch (error) {
      if (error instanceof ConnectError) echo(error.metadata);
      finish(ConnectError.from(error).code);
      throw error;
    }
  };

  return {
    interceptor,
    contextValues(req) {
      const values = createContextValues();
      const context = contexts.get(req);
      if (context) values.set(requestContextKey, context);
      return values;
    },
    setProcedures(paths) {
      for (const path of paths) procedures.add(path);
    },
    assignRequestId(req, res) {
      const requestId = requestIdFrom(req.headers[REQUEST_ID_HEADER]);
      res.setHeader(REQUEST_ID_HEADER, requestId);
      return requestId;
    },
    track(req, res, requestId) {
      const start = performance.now();
      const context: RequestContext = { requestId, started: false };
      contexts.set(req, context);
      const grpc = watchGrpcStatus(res, protocolOf(header(req.headers["content-type"])) === "grpc-web");
      res.once("close", () => {
        if (context.started) return;
        const path = (req.url ?? "").split("?", 1)[0] ?? "";
        if (procedures.has(path)) {
          const protocol = protocolOf(header(req.headers["content-type"]));
          record({ procedure: path, protocol, code: responseCode(res, grpc.status), start, requestId, status: res.statusCode });
          return;
        }
        const duration_ms = Math.round((performance.now() - start) * 1000) / 1000;
        logger.info("http", {
          method: req.method,
          path: path.slice(0, 200),
          status: res.headersSent ? res.statusCode : 0,
          duration_ms,
          request_id: requestId,
        });
      });
    },
  };
}

/** Connect's name of a code ("invalid_argument", "unauthenticated", …), as on the wire. */
export function codeName(code: Code): string {
  const name = Code[code] as string | undefined;
  return name ? name.replace(/[A-Z]/g, (c, i: number) => (i === 0 ? "" : "_") + c.toLowerCase()) : String(code);
}

/**
 * The Connect code a Connect-protocol error response with this HTTP status most likely carried
 * (the inverse of the protocol's code → status table; ambiguous statuses take the commoner code).
 */
const CODE_OF_STATUS: Readonly<Record<number, Code>> = {
  400: Code.InvalidArgument,
  401: Code.Unauthenticated,
  403: Code.PermissionDenied,
  404: Code.NotFound,
  408: Code.DeadlineExceeded,
  409: Code.Aborted,
  413: Code.ResourceExhausted,
  // Our 405 and 415 answers (an HTTP method or a content type the procedure does not take) say
  // invalid_argument in their body (server/content-type.ts).
  405: Code.InvalidArgument,
  415: Code.InvalidArgument,
  429: Code.ResourceExhausted,
  499: Code.Canceled,
  501: Code.Unimplemented,
  503: Code.Unavailable,
  504: Code.DeadlineExceeded,
};

/** "grpc", "grpc-web" or "connect", from the request's content type. */
export function protocolOf(contentType: string | null | undefined): "grpc" | "grpc-web" | "connect" {
  const type = contentType?.toLowerCase() ?? "";
  if (type.startsWith("application/grpc-web")) return "grpc-web";
  if (type.startsWith("application/grpc")) return "grpc";
  return "connect";
}

/** The request message's `session_id`, when it has a non-empty one. */
function sessionIdOf(message: unknown): string | undefined {
  if (typeof message !== "object" || message === null || !("sessionId" in message)) return undefined;
  const value = message.sessionId;
  return typeof value === "string" && value !== "" ? value : undefined;
}

/** Passes `messages` through, showing each to `see`. */
async function* tapEach<T>(messages: AsyncIterable<T>, see: (message: T) => void): AsyncIterable<T> {
  for await (const message of messages) {
    see(message);
    yield message;
  }
}

/**
 * Passes a response stream through and calls `finish` once when it ends: undefined (OK) when it
 * completes, the error's code when it fails; when the call's `signal` aborted (client gone,
 * deadline, shutdown) or the reader stopped early, the abort's code (`Canceled` by default),
 * even if the handler then ended quietly.
 */
async function* observeStream<T>(
  messages: AsyncIterable<T>,
  signal: AbortSignal,
  finish: (code: Code | undefined) => void,
): AsyncIterable<T> {
  const aborted = () => (signal.reason === undefined ? Code.Canceled : ConnectError.from(signal.reason, Code.Canceled).code);
  let code: Code | "ok" | undefined;
  try {
    yield* messages;
    code = signal.aborted ? aborted() : "ok";
  } catch (error) {
    code = signal.aborted ? aborted() : ConnectError.from(error).code;
    throw error;
  } finally {
    finish(code === "ok" ? undefined : (code ?? aborted()));
  }
}

/**
 * Watches what `res` says its gRPC status is, for a response written without the interceptor (a
 * request connect-node refused before any handler): `grpc-status` in the headers given to
 * `writeHead` (trailers-only), in the trailers (`addTrailers`), or, for gRPC-Web (`inBody`), in
 * the body's trailer frame (flag 0x80, `grpc-status:3\r\n…`). Returns the holder it fills.
 */
function watchGrpcStatus(res: NodeResponse, inBody: boolean): { status?: string } {
  const seen: { status?: string } = {};
  const take = (headers: unknown) => {
    const value = headers && typeof headers === "object" ? (headers as Record<string, unknown>)["grpc-status"] : undefined;
    if (value !== undefined) seen.status = String(Array.isArray(value) ? value[0] : value);
  };
  const loose = res as unknown as {
    writeHead: (...args: unknown[]) => unknown;
    addTrailers: (headers: unknown) => void;
    write: (...args: unknown[]) => boolean;
  };
  const writeHead = loose.writeHead.bind(res);
  loose.writeHead = (...args: unknown[]) => {
    take(args.at(-1));
    return writeHead(...args);
  };
  const addTrailers = loose.addTrailers.bind(res);
  loose.addTrailers = (headers: unknown) => {
    take(headers);
    addTrailers(headers);
  };
  if (inBody) {
    const write = loose.write.bind(res);
    loose.write = (...args: unknown[]) => {
      const chunk = args[0];
      if (chunk instanceof Uint8Array && chunk[0] === 0x80) {
        const status = /grpc-status:\s*(\d{1,2})/i.exec(Buffer.from(chunk.subarray(5)).toString("latin1"))?.[1];
        if (status !== undefined) seen.status = status;
      }
      return write(...args);
    };
  }
  return seen;
}

/**
 * The outcome a response written without the interceptor carries: its `grpc-status` (`grpc`, as
 * {@link watchGrpcStatus} saw it, or a header set before), else the Connect code of its HTTP
 * status, "canceled" when nothing was sent.
 */
function responseCode(res: NodeResponse, grpc?: string): string {
  if (!res.headersSent) return codeName(Code.Canceled);
  const grpcStatus = grpc ?? header(res.getHeader("grpc-status"));
  if (grpcStatus !== undefined && /^\d{1,2}$/.test(grpcStatus)) return grpcStatus === "0" ? "ok" : codeName(Number(grpcStatus) as Code);
  if (res.statusCode === 200) return "ok";
  return codeName(CODE_OF_STATUS[res.statusCode] ?? (res.statusCode >= 500 ? Code.Internal : Code.Unknown));
}

function header(value: string | string[] | number | undefined): string | undefined {
  if (value === undefined) return undefined;
  return Array.isArray(value) ? value[0] : String(value);
}
