import type http from "node:http";
import type http2 from "node:http2";

/**
 * `text` as the gRPC spec's Percent-Encoded `grpc-message`: UTF-8, with every byte outside
 * 0x20–0x7E, `%` itself and a leading or trailing space written as `%XX`, everything else as it is (`session_id: must be …`
 * stays readable). connect-es writes `encodeURIComponent(message)` instead, which also encodes
 * `: , ; = / ?`; @grpc/grpc-js decodes with `decodeURI`, which leaves those encoded, so a Node
 * client read "session_id%3A must be …". Decoders that follow the spec read both the same.
 */
export function encodeGrpcMessage(text: string): string {
  const bytes = Buffer.from(text, "utf8");
  let out = "";
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i]!;
    // A space first or last is encoded too: HTTP/2 forbids a field value that starts or ends with
    // whitespace (RFC 9113 §8.2.1), and a strict peer resets the stream (INTERNAL for the caller).
    const edgeSpace = byte === 0x20 && (i === 0 || i === bytes.length - 1);
    out +=
      byte >= 0x20 && byte <= 0x7e && byte !== 0x25 && !edgeSpace
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/**
 * Rewrites the `grpc-message` that connect-node sends on a gRPC (HTTP/2) response, in its headers
 * (a trailers-only response) and in its trailers, from connect-es's encoding to
 * {@link encodeGrpcMessage}'s, so every gRPC client reads the same text. gRPC-Web and Connect are
 * left alone (their trailers travel in the body or as JSON). Call before handing `res` to the adapter.
 */
export function specGrpcMessages(
  req: http2.Http2ServerRequest | http.IncomingMessage,
  res: http2.Http2ServerResponse | http.ServerResponse,
): void {
  // Media types are case-insensitive (RFC 9110), and connect-es accepts any case.
  const type = (req.headers["content-type"] ?? "").toLowerCase();
  if (req.httpVersionMajor !== 2 || !type.startsWith("application/grpc") || type.startsWith("application/grpc-web")) return;
  const fix = (headers: unknown) => {
    if (headers === null || typeof headers !== "object" || Array.isArray(headers)) return;
    const record = headers as Record<string, unknown>;
    const value = record["grpc-message"];
    if (typeof value !== "string") return;
    try {
      record["grpc-message"] = encodeGrpcMessage(decodeURIComponent(value));
    } catch {
      // Not percent-encoded as connect-es writes it: sent as it is.
    }
  };
  const h2res = res as http2.Http2ServerResponse;
  const writeHead = h2res.writeHead.bind(h2res) as (...args: unknown[]) => unknown;
  h2res.writeHead = ((...args: unknown[]) => {
    fix(args[args.length - 1]);
    return writeHead(...args);
  }) as typeof h2res.writeHead;
  const addTrailers = h2res.addTrailers.bind(h2res);
  h2res.addTrailers = (trailers) => {
    fix(trailers);
    addTrailers(trailers);
  };
}
