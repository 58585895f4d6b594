import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { encodeEnvelope, type UniversalHandler, type UniversalServerResponse } from "@connectrpc/connect/protocol";
import { codeToHttpStatus, errorFromJsonBytes, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { trailerFlag, trailerParse, trailerSerialize } from "@connectrpc/connect/protocol-grpc-web";
import { refineProtocolError } from "./errors.js";

/**
 * Rewrites, on the wire, the errors connect-es raises while reading a unary request, before any
 * interceptor runs, so they reach clients as the ledger's errors (`refineProtocolError`):
 * - a request message over `limits.request_bytes` (connect's `readMaxBytes`: the size from the
 *   content-length or the envelope header, a body that kept coming, or a message that inflated
 *   past it) → `RESOURCE_EXHAUSTED` naming `request_bytes`, the limit and the size when known,
 *   with an `ErrorInfo` (reason `LIMIT_EXCEEDED`, metadata limit/max/actual);
 * - an undecodable binary request message (`INTERNAL` "parse binary: ...") → `INVALID_ARGUMENT`.
 * Per protocol: the Connect unary JSON error body and its HTTP status (429 / 500 → 400); the gRPC
 * `grpc-status`, `grpc-message` and `grpc-status-details-bin` headers or trailers; the gRPC-Web
 * trailer frame at the start of the body. Streaming calls read their request inside the
 * interceptors, where `errorInterceptor` does the same. Other responses pass unchanged (a
 * gRPC-Web body is re-yielded after its first chunk was looked at).
 * Call after every service is registered on `router`.
 */
export function rewriteProtocolErrors(router: ConnectRouter): void {
  const handlers = router.handlers;
  for (let i = 0; i < handlers.length; i++) handlers[i] = wrap(handlers[i]!);
}

function wrap(handler: UniversalHandler): UniversalHandler {
  const wrapped = async (req: Parameters<UniversalHandler>[0]) => rewrite(await handler(req));
  // Keep the handler's routing facts (requestPath, protocolNames, method, ...).
  return Object.assign(wrapped, handler);
}

async function rewrite(res: UniversalServerResponse): Promise<UniversalServerResponse> {
  const type = res.header?.get("content-type") ?? "";
  if (type.startsWith("application/grpc-web")) return rewriteGrpcWeb(res);
  if (type.startsWith("application/grpc")) {
    rewriteGrpcStatus(res.header);
    rewriteGrpcStatus(res.trailer);
    return res;
  }
  // Connect unary errors: RESOURCE_EXHAUSTED is HTTP 429, INTERNAL 500.
  if ((res.status === 429 || res.status === 500) && type.startsWith("application/json")) return rewriteConnectUnary(res);
  return res;
}

/**
 * Rewrites the status in gRPC (or gRPC-Web trailer) headers when `refineProtocolError` refines it.
 * Returns whether it did.
 */
function rewriteGrpcStatus(headers: Headers | undefined): boolean {
  const status = headers?.get("grpc-status");
  // connect-es's own errors carry no details; one that has them is already ours.
  if (!headers || !status || status === "0" || headers.has("grpc-status-details-bin")) return false;
  let message: string;
  try {
    message = decodeURIComponent(headers.get("grpc-message") ?? "");
  } catch {
    return false;
  }
  const error = new ConnectError(message, Number(status) as Code);
  const refined = refineProtocolError(error);
  if (refined === error) return false;
  setTrailerStatus(headers, refined);
  return true;
}

/**
 * gRPC-Web carries its status in a trailer frame inside the body. A request refused before the
 * handler gets a body that is just that frame, and connect-es has already produced it (it waits for
 * the first chunk before answering), so looking at the first chunk costs no waiting.
 */
async function rewriteGrpcWeb(res: UniversalServerResponse): Promise<UniversalServerResponse> {
  if (!res.body) return res;
  const rest = res.body[Symbol.asyncIterator]();
  const first = await rest.next();
  if (first.done === true) return { ...res, body: prepend(undefined, rest) };
  return { ...res, body: prepend(rewriteTrailerFrame(first.value) ?? first.value, rest) };
}

/** A rewritten copy of `chunk` when it is exactly one uncompressed trailer frame whose status is refined. */
function rewriteTrailerFrame(chunk: Uint8Array): Uint8Array | undefined {
  if (chunk.byteLength < 5 || chunk[0] !== trailerFlag) return undefined;
  const length = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength).getUint32(1);
  if (chunk.byteLength !== 5 + length) return undefined;
  const trailer = trailerParse(chunk.subarray(5));
  return rewriteGrpcStatus(trailer) ? encodeEnvelope(trailerFlag, trailerSerialize(trailer)) : undefined;
}

/** `first` (when given), then the rest of `rest`; `return`/`throw` go to `rest`. */
function prepend(first: Uint8Array | undefined, rest: AsyncIterator<Uint8Array>): AsyncIterable<Uint8Array> {
  let pending = first;
  const iterator: AsyncIterator<Uint8Array> = {
    next: () => {
      if (pending === undefined) return rest.next();
      const value = pending;
      pending = undefined;
      return Promise.resolve({ done: false, value });
    },
    return: (value?: unknown) => rest.return?.(value) ?? Promise.resolve({ done: true, value: undefined }),
    throw: (error?: unknown) => rest.throw?.(error) ?? Promise.reject(error),
  };
  return { [Symbol.asyncIterator]: () => iterator };
}

/** The Connect protocol's unary error: a small JSON body `{code, message, details?}` and an HTTP status. */
async function rewriteConnectUnary(res: UniversalServerResponse): Promise<UniversalServerResponse> {
  // A compressed body is not connect-es's short error (those are under compressMinBytes).
  if (!res.body || res.header?.has("content-encoding")) return res;
  const chunks: Uint8Array[] = [];
  for await (const chunk of res.body) chunks.push(chunk);
  const bytes = Buffer.concat(chunks);
  let refined: ConnectError | undefined;
  try {
    const error = errorFromJsonBytes(bytes, undefined, new ConnectError("", Code.Unknown));
    if (error.details.length === 0) {
      const candidate = refineProtocolError(error);
      if (candidate !== error) refined = candidate;
    }
  } catch {
    // not a Connect error body: pass it on unchanged
  }
  if (!refined) return { ...res, body: once(bytes) };
  const out = errorToJsonBytes(refined, {});
  res.header!.set("content-length", String(out.byteLength));
  return { ...res, status: codeToHttpStatus(refined.code), body: once(out) };
}

async function* once(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  yield bytes;
}
