import { create } from "@bufbuild/protobuf";
import { pathToString } from "@bufbuild/protobuf/reflect";
import { ValidationError } from "@bufbuild/protovalidate";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { BadRequestSchema, ErrorInfoSchema, QuotaFailureSchema, RetryInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { logger } from "../observe/log.js";
import {
  AgentNotFoundError,
  CommandNotFoundError,
  AlreadyExistsError,
  CursorOutOfRangeError,
  InvalidArgumentError,
  LedgerError,
  LimitExceededError,
  MessageNotFoundError,
  NotImplementedError,
  PartNotFoundError,
  PathNotAllowedError,
  CommandsNotAllowedError,
  ShuttingDownError,
  PermissionNotFoundError,
  PluginError,
  PreconditionError,
  QuotaExceededError,
  SessionBusyError,
  SessionNotFoundError,
  StoppedWaitingError,
  WatcherTooSlowError,
  LockPoolExhaustedError,
  McpNotAllowedError,
  McpServerNotFoundError,
  McpServerUnavailableError,
} from "../errors.js";

/** `google.rpc.ErrorInfo.domain` of every error this service raises. */
export const ERROR_DOMAIN = "ledger.v1";

/**
 * The one table from domain error class to Connect/gRPC code (docs/design.md §2). Classes not
 * listed are bugs and become `INTERNAL` "internal error" with nothing leaked.
 */
const CODES: ReadonlyArray<[abstract new (...args: never[]) => LedgerError, Code]> = [
  [InvalidArgumentError, Code.InvalidArgument],
  [SessionNotFoundError, Code.NotFound],
  [MessageNotFoundError, Code.NotFound],
  [PartNotFoundError, Code.NotFound],
  [PermissionNotFoundError, Code.NotFound],
  [AgentNotFoundError, Code.NotFound],
  [CommandNotFoundError, Code.NotFound],
  [McpServerNotFoundError, Code.NotFound],
  [AlreadyExistsError, Code.AlreadyExists],
  [LimitExceededError, Code.ResourceExhausted],
  [WatcherTooSlowError, Code.ResourceExhausted],
  [LockPoolExhaustedError, Code.ResourceExhausted],
  [QuotaExceededError, Code.ResourceExhausted],
  [PathNotAllowedError, Code.PermissionDenied],
  [CommandsNotAllowedError, Code.PermissionDenied],
  [McpNotAllowedError, Code.PermissionDenied],
  [PreconditionError, Code.FailedPrecondition],
  [SessionBusyError, Code.FailedPrecondition],
  [NotImplementedError, Code.Unimplemented],
  [ShuttingDownError, Code.Unavailable],
  [McpServerUnavailableError, Code.Unavailable],
  [CursorOutOfRangeError, Code.OutOfRange],
  [PluginError, Code.Internal],
  // The signal's own code decides (deadline, cancel); see `codeOf`.
  [StoppedWaitingError, Code.Canceled],
];

/** The code of a domain error: its row in `CODES`; a `StoppedWaitingError` takes its signal's code (DEADLINE_EXCEEDED on a deadline). */
function codeOf(error: LedgerError): Code {
  if (error instanceof StoppedWaitingError) return ConnectError.from(error.cause, Code.Canceled).code;
  return CODES.find(([cls]) => error instanceof cls)?.[1] ?? Code.Internal;
}

/**
 * Converts anything a handler threw into a `ConnectError`:
 * - a `LedgerError` → its code, its message (which names the field), an `ErrorInfo`
 *   {reason, domain, metadata} and, when it names a field, a `BadRequest` violation; a
 *   `QuotaExceededError` adds a `QuotaFailure` violation {subject, description} and, when it
 *   knows when to retry, a `RetryInfo` {retry_delay};
 * - a protovalidate `InvalidArgument` → the same error plus an `ErrorInfo` (reason
 *   `INVALID_ARGUMENT`, the first field and rule) and a `BadRequest` per violation;
 * - any other `ConnectError` → unchanged (errors raised while reading the request, such as a
 *   message over `limits.request_bytes` or an undecodable one, already arrive as the ledger's,
 *   see `protocol-errors.ts`);
 * - anything else → logged with its stack to stderr, answered as `INTERNAL` "internal error".
 */
export function toConnectError(error: unknown, procedure: string): ConnectError {
  if (error instanceof LedgerError) {
    const code = codeOf(error);
    if (error instanceof PluginError) log(procedure, error.cause ?? error);
    const errorInfo = create(ErrorInfoSchema, { reason: error.reason, domain: ERROR_DOMAIN, metadata: error.metadata });
    const field = "field" in error && typeof error.field === "string" ? error.field : undefined;
    const badRequest =
      field && code !== Code.Internal ? create(BadRequestSchema, { fieldViolations: [{ field, description: error.message }] }) : undefined;
    const details = [
      { desc: ErrorInfoSchema, value: errorInfo },
      ...(badRequest ? [{ desc: BadRequestSchema, value: badRequest }] : []),
      ...(error instanceof QuotaExceededError ? quotaDetails(error) : []),
    ];
    return new ConnectError(error.message, code, undefined, details);
  }
  if (error instanceof ConnectError) return withBadRequest(error);
  log(procedure, error);
  return new ConnectError("internal error", Code.Internal);
}

/**
 * Applies `toConnectError` to unary results and to every step of a server stream (errors
 * thrown inside a streaming generator escape a plain try/catch around `next`). A stream whose
 * client went away (connect-node reports the failed write into the stream: "Cannot call write
 * after a stream was destroyed", "The stream has been destroyed", ECONNRESET) ends as
 * `CANCELED` and is not logged as a failure: the RPC's own log line says `canceled`, at info.
 */
export const errorInterceptor: Interceptor = (next) => async (req) => {
  const procedure = req.method.name;
  try {
    const res = await next(req);
    if (!res.stream) return res;
    return { ...res, message: mapStream(res.message, procedure) };
  } catch (error) {
    throw toConnectError(error, procedure);
  }
};

async function* mapStream<T>(messages: AsyncIterable<T>, procedure: string): AsyncIterable<T> {
  try {
    yield* messages;
  } catch (error) {
    if (isClientGone(error)) throw new ConnectError("the client went away", Code.Canceled, undefined, undefined, error);
    throw toConnectError(error, procedure);
  }
}

/** Node's codes for a write to a response whose client is gone (connect-node `node-error.ts` treats them alike). */
const CLIENT_GONE = new Set([
  "ERR_STREAM_DESTROYED",
  "ERR_STREAM_WRITE_AFTER_END",
  "ERR_HTTP2_INVALID_STREAM",
  "ERR_HTTP2_STREAM_CANCEL",
  "ECONNRESET",
  "EPIPE",
]);

/** True when `error` (or a cause of it) is a failed write to a client that disconnected. */
function isClientGone(error: unknown): boolean {
  for (let e = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && CLIENT_GONE.has(code)) return true;
  }
  return false;
}

/** `ErrorInfo.metadata.limit` of a request message over `limits.request_bytes`. */
const REQUEST_BYTES = "request_bytes";

/**
 * The error for a request message over `limits.request_bytes` (`max` bytes):
 * `RESOURCE_EXHAUSTED` "request message: N bytes exceeds limit request_bytes (M bytes)" when
 * its size `actual` is known (a content-length, an envelope header), else "more than M bytes"
 * (reading stopped at the limit), or "more than M bytes after decompression" when
 * `afterDecompression`. It carries an `ErrorInfo` {reason `LIMIT_EXCEEDED`, domain `ledger.v1`,
 * metadata {limit: "request_bytes", max: M, actual: N (only when known)}}, the shape of a
 * `LimitExceededError` minus `field` (the message as a whole is over, not one field). Sizes are
 * bytes; `cause` (e.g. zlib's error) is kept for logs and never sent.
 */
export function requestTooLargeError(
  max: number,
  size: { actual?: number; afterDecompression?: boolean } = {},
  cause?: unknown,
): ConnectError {
  const { actual, afterDecompression = false } = size;
  const described = actual !== undefined ? `${actual} bytes` : `more than ${max} bytes${afterDecompression ? " after decompression" : ""}`;
  const metadata: Record<string, string> = {
    limit: REQUEST_BYTES,
    max: String(max),
    ...(actual !== undefined ? { actual: String(actual) } : {}),
  };
  const errorInfo = create(ErrorInfoSchema, { reason: "LIMIT_EXCEEDED", domain: ERROR_DOMAIN, metadata });
  return new ConnectError(
    `request message: ${described} exceeds limit ${REQUEST_BYTES} (${max} bytes)`,
    Code.ResourceExhausted,
    undefined,
    [{ desc: ErrorInfoSchema, value: errorInfo }],
    cause,
  );
}

/** `QuotaFailure` {violations: [{subject, description}]} and, when known, `RetryInfo` {retry_delay} of a quota refusal. */
function quotaDetails(error: QuotaExceededError) {
  const failure = create(QuotaFailureSchema, { violations: [{ subject: error.subject, description: error.description }] });
  const retry = error.retryAfterMs !== undefined ? create(RetryInfoSchema, { retryDelay: durationFromMs(error.retryAfterMs) }) : undefined;
  return [{ desc: QuotaFailureSchema, value: failure }, ...(retry ? [{ desc: RetryInfoSchema, value: retry }] : [])];
}

/**
 * A protovalidate refusal in the ledger's shape: the message names each field and says what is
 * expected (`field: message`, joined by "; "; "must not be empty" for protovalidate's "must be at
 * least 1 characters"), without protovalidate's `[rule id]` suffixes,
 * which a person does not read: the first rule is `ErrorInfo.metadata.rule`, and every violation
 * a `BadRequest` field violation. Any other error is returned unchanged.
 */
function withBadRequest(error: ConnectError): ConnectError {
  if (error.code !== Code.InvalidArgument || !(error.cause instanceof ValidationError)) return error;
  const fieldViolations = error.cause.violations.map((v) => ({
    field: pathToString(v.field),
    description: v.ruleId === "string.min_len" && v.message === "must be at least 1 characters" ? "must not be empty" : v.message,
  }));
  const metadata = { field: fieldViolations[0]?.field ?? "", rule: error.cause.violations[0]?.ruleId ?? "" };
  const message = fieldViolations.map((v) => (v.field ? `${v.field}: ${v.description}` : v.description)).join("; ");
  return new ConnectError(
    message || error.rawMessage,
    error.code,
    error.metadata,
    [
      // @connectrpc/validate's own: `buf.validate.Violations`.
      ...error.details.filter((d) => "desc" in d),
      { desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason: "INVALID_ARGUMENT", domain: ERROR_DOMAIN, metadata }) },
      { desc: BadRequestSchema, value: create(BadRequestSchema, { fieldViolations }) },
    ],
    error.cause,
  );
}

function log(procedure: string, error: unknown): void {
  logger.error("rpc failed", { procedure, error });
}

/**
 * An `UNAUTHENTICATED` error with an ErrorInfo (`reason`, `metadata`) and a `www-authenticate`
 * challenge (RFC 6750) in its metadata; the token itself is never echoed.
 */
export function unauthenticated(reason: string, message: string, challenge: string, metadata: Record<string, string> = {}): ConnectError {
  return new ConnectError(message, Code.Unauthenticated, { "www-authenticate": challenge }, [
    { desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason, domain: ERROR_DOMAIN, metadata }) },
  ]);
}
