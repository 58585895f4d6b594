import type { ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";

/** What connect-es says when a binary request message cannot be decoded. */
const PARSE_BINARY = "parse binary:";

/**
 * Makes an undecodable binary request message `INVALID_ARGUMENT`, as an undecodable JSON one
 * already is. connect-es reports a malformed protobuf frame as `INTERNAL` "parse binary: ..."
 * (connect-es `protocol/serialization.ts`), which would tell clients the server is broken when
 * the request is. Rewrites the Connect protocol's JSON error (HTTP 500 → 400) and the gRPC
 * `grpc-status` (13 → 3); gRPC-Web carries its status inside the body and is left as is.
 * Call after every service is registered on `router`.
 */
export function reportDecodeErrorsAsInvalid(router: ConnectRouter): void {
  const handlers = router.handlers;
  for (let i = 0; i < handlers.length; i++) handlers[i] = wrap(handlers[i]!);
}

function wrap(handler: UniversalHandler): UniversalHandler {
  const wrapped = async (req: Parameters<UniversalHandler>[0]) => rewrite(await handler(req));
  // Keep the handler's routing facts (requestPath, protocolNames, method, ...).
  return Object.assign(wrapped, handler);
}

async function rewrite(res: UniversalServerResponse): Promise<UniversalServerResponse> {
  for (const headers of [res.header, res.trailer]) {
    if (headers?.get("grpc-status") === "13" && decodeURIComponent(headers.get("grpc-message") ?? "").startsWith(PARSE_BINARY)) headers.set("grpc-status", "3");
  }
  if (res.status !== 500 || !res.header?.get("content-type")?.startsWith("application/json") || !res.body) return res;
  const chunks: Uint8Array[] = [];
  for await (const chunk of res.body) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString("utf8");
  const replay = (out: string) =>
    (async function* () {
      yield new TextEncoder().encode(out);
    })();
  try {
    const error = JSON.parse(text) as { code?: string; message?: string };
    if (error.code === "internal" && error.message?.startsWith(PARSE_BINARY)) {
      const out = JSON.stringify({ ...error, code: "invalid_argument" });
      res.header.set("content-length", String(Buffer.byteLength(out)));
      return { ...res, status: 400, body: replay(out) };
    }
  } catch {
    // not JSON: pass it on unchanged
  }
  return { ...res, body: replay(text) };
}
