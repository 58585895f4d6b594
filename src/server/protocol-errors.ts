import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextKey,
  createContextValues,
  type ConnectRouter,
  type HandlerContext,
  type Interceptor,
} from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerRequest } from "@connectrpc/connect/protocol";
import { headerStreamEncoding } from "@connectrpc/connect/protocol-connect";
import { headerEncoding } from "@connectrpc/connect/protocol-grpc";
import type { ConnectNodeAdapterOptions } from "@connectrpc/connect-node";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { ERROR_DOMAIN } from "./errors.js";
import { failingRequest, limitedCompressions, limitRequestBody } from "./request-limit.js";

/**
 * Adds to `options` (for `connectNodeAdapter`) the ledger's handling of what can go wrong while
 * connect-es reads a request, so those errors reach clients as the ledger's own on every
 * protocol (Connect unary JSON and its HTTP status, Connect end-stream, gRPC trailers, gRPC-Web
 * trailer frame). Nothing here reads an error's message text:
 * - a request message over `requestBytes` is refused by us before connect-es reads it
 *   (`limitRequestBody`, `limitedCompressions`): `RESOURCE_EXHAUSTED` with an `ErrorInfo`
 *   naming `request_bytes`, the limit and the size when known (`requestTooLargeError`). A
 *   `readMaxBytes` the caller sets is only a backstop: each of our checks runs before
 *   connect-es's own, which therefore never answers while it is at least `requestBytes`;
 * - a binary request message that cannot be decoded: connect-es raises `INTERNAL` (no details)
 *   while reading the request, and this is recognised by where it was raised, not by its text:
 *   for a unary call, before the request reached any interceptor (connect-es decodes a unary
 *   request before the interceptors run), its client still connected; for a streaming call,
 *   from the request messages' iterator itself. It becomes `INVALID_ARGUMENT` with connect-es's
 *   message unchanged and an `ErrorInfo` (reason `MALFORMED_REQUEST`), and so does connect-es's
 *   own `INVALID_ARGUMENT` for JSON it cannot decode (which carries no details). An enveloped message
 *   flagged compressed on a request that declared no encoding stays `INTERNAL` (gRPC's rule;
 *   connect-es raises that from the same place). A compressed message that does not inflate
 *   is `INVALID_ARGUMENT` "decompression failed" (`limitedCompressions`).
 * Installs a wrapper around every handler `options.routes` registers, a `requestGate` (run
 * before the caller's), an interceptor (first; it only marks and watches) and
 * `acceptCompression` (gzip and brotli, capped at `requestBytes`; replaces the caller's).
 *
 * ```ts
 * connectNodeAdapter(withProtocolErrors({ routes, interceptors, readMaxBytes: limit }, limit));
 * ```
 */
export function withProtocolErrors(options: ConnectNodeAdapterOptions, requestBytes: number): ConnectNodeAdapterOptions {
  const gate = options.requestGate;
  return {
    ...options,
    routes: (router: ConnectRouter) => {
      options.routes(router);
      const handlers = router.handlers;
      for (let i = 0; i < handlers.length; i++) handlers[i] = guard(handlers[i]!, requestBytes);
    },
    requestGate: async (context: HandlerContext) => {
      const state = context.values.get(readStateKey);
      if (state) state.context = context;
      await gate?.(context);
    },
    interceptors: [watchRequest, ...(options.interceptors ?? [])],
    acceptCompression: limitedCompressions(requestBytes),
  };
}

/** What one call's request reading has shown so far. */
interface ReadState {
  /** The call's context (from the request gate): its signal's reason is the error connect-es answered with. */
  context?: HandlerContext;
  /** The request reached the interceptors (for a unary call: its message was decoded). */
  reached: boolean;
  /** An enveloped message was flagged compressed although the request declared no encoding. */
  compressedWithoutEncoding: boolean;
}

const readStateKey = createContextKey<ReadState | undefined>(undefined, { description: "ledger request read state" });

/** Envelope flag of a compressed message (the same in gRPC, gRPC-Web and Connect streaming). */
const COMPRESSED_FLAG = 0b1;

/**
 * `handler`, with its request body limited to `max` bytes and watched, and a unary call that
 * connect-es refused with an undecodable message (see `undecodable`) answered again with the
 * `INVALID_ARGUMENT` error: the handler runs once more on a body that fails with it at once, so
 * connect-es writes it in the call's protocol (the request was already read; nothing else runs).
 */
function guard(handler: UniversalHandler, max: number): UniversalHandler {
  const guarded = async (req: UniversalServerRequest) => {
    const state: ReadState = { reached: false, compressedWithoutEncoding: false };
    const contextValues = req.contextValues ?? createContextValues();
    contextValues.set(readStateKey, state);
    const encoding = req.header.get(headerEncoding) ?? req.header.get(headerStreamEncoding);
    const declaresEncoding = encoding !== null && encoding !== "identity";
    const limited = limitRequestBody({ ...req, contextValues }, max, {
      onEnvelope: (flags) => {
        if ((flags & COMPRESSED_FLAG) !== 0 && !declaresEncoding) state.compressedWithoutEncoding = true;
      },
    });
    const res = await handler(limited);
    // A client that went away made the request signal's reason the call's: nothing to refine.
    if (state.reached || req.signal.aborted) return res;
    const refined = undecodable(state.context?.signal.reason, state);
    if (!refined) return res;
    return handler(failingRequest(limited, refined));
  };
  // Keep the handler's routing facts (requestPath, protocolNames, method, ...).
  return Object.assign(guarded, handler);
}

/**
 * Marks that the request reached the interceptors and, for streaming calls, turns an
 * undecodable request message into `INVALID_ARGUMENT` where its iterator raises it.
 */
const watchRequest: Interceptor = (next) => async (req) => {
  const state = req.contextValues.get(readStateKey);
  if (!state) return next(req);
  state.reached = true;
  if (!req.stream) return next(req);
  return next({ ...req, message: refineReadErrors(req.message, state) });
};

async function* refineReadErrors<T>(messages: AsyncIterable<T>, state: ReadState): AsyncIterable<T> {
  try {
    yield* messages;
  } catch (error) {
    throw undecodable(error, state) ?? error;
  }
}

/**
 * The `INVALID_ARGUMENT` error (same message, `error` as cause, an `ErrorInfo` with reason
 * `MALFORMED_REQUEST` and domain `ledger.v1`) for an error connect-es raised while reading a
 * request message it could not decode: a `ConnectError` with no details (connect-es's own errors
 * carry none; ours always do) and either `Code.Internal` (undecodable binary), unless the request
 * sent a compressed message without declaring an encoding, or `Code.InvalidArgument` (JSON that
 * is not the message: a wrong type, text that is not JSON). Undefined for
 * anything else (a failed transport reaches here as Node's own error, not a `ConnectError`).
 */
function undecodable(error: unknown, state: ReadState): ConnectError | undefined {
  if (!(error instanceof ConnectError) || error.details.length > 0) return undefined;
  if (error.code === Code.Internal ? state.compressedWithoutEncoding : error.code !== Code.InvalidArgument) return undefined;
  const info = create(ErrorInfoSchema, { reason: "MALFORMED_REQUEST", domain: ERROR_DOMAIN });
  return new ConnectError(error.rawMessage, Code.InvalidArgument, undefined, [{ desc: ErrorInfoSchema, value: info }], error);
}
