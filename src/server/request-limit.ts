import { promisify } from "node:util";
import zlib from "node:zlib";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Compression, UniversalServerRequest } from "@connectrpc/connect/protocol";
import { headerUnaryContentLength, parseContentType } from "@connectrpc/connect/protocol-connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import { requestTooLargeError } from "./errors.js";

/** What `limitRequestBody` reports about a request body while it passes through. */
export interface BodyWatch {
  /** Called with the flags byte of each enveloped message (gRPC, gRPC-Web, Connect streaming). */
  onEnvelope?(flags: number): void;
}

/**
 * Enforces the request size limit (`max` bytes, `limits.request_bytes`) on `req` before
 * connect-es reads it: returns a request whose body fails with `requestTooLargeError` as soon
 * as a message is known to be over `max`, so connect-es answers that error in the form of the
 * call's protocol (Connect JSON body and HTTP 429, gRPC trailers, gRPC-Web trailer frame, Connect
 * end-stream). Every byte passes through unchanged and unbuffered:
 * - a Connect unary request (`application/json`, `application/proto`) with a content-length
 *   over `max` fails before a byte is read, naming the size (the content-length is removed, so
 *   connect-es neither checks nor allocates it); one without a content-length fails once more
 *   than `max` bytes arrived (size unknown);
 * - gRPC, gRPC-Web and Connect streaming bodies are read as 5-byte envelope headers (flags,
 *   big-endian uint32 length) and payloads; an envelope announcing more than `max` bytes fails
 *   before its header is handed on, naming that length.
 * A compressed message that inflates past `max` is caught by `limitedCompressions`. A body that
 * is not a byte stream (a parsed JSON body) is returned as is.
 */
export function limitRequestBody(req: UniversalServerRequest, max: number, watch: BodyWatch = {}): UniversalServerRequest {
  const body = req.body;
  if (!isByteStream(body)) return req;
  const type = parseContentType(req.header.get("content-type"));
  if (type === undefined || type.stream) return { ...req, body: splitEnvelopes(body, max, watch) };
  // Read as connect-es reads it (parseInt), so every length it would check is checked here first.
  const length = parseInt(req.header.get(headerUnaryContentLength) ?? "", 10);
  if (Number.isSafeInteger(length) && length > max) return failingRequest(req, requestTooLargeError(max, { actual: length }));
  return { ...req, body: countBytes(body, max) };
}

/**
 * gzip and brotli for a server's `acceptCompression`: responses are compressed by connect-node's
 * `compressionGzip` and `compressionBrotli`; requests are decompressed here with zlib, its
 * `maxOutputLength` set to `max` bytes whatever `readMaxBytes` connect-es passes. A message that
 * inflates past `max` fails with `requestTooLargeError` ("after decompression", size unknown;
 * zlib's `ERR_BUFFER_TOO_LARGE`, Node's documented code, as cause); any other failure (corrupt or
 * truncated data) is `INVALID_ARGUMENT` "decompression failed" with zlib's error as cause.
 * (connect-node's own decompression raises `RESOURCE_EXHAUSTED` where connect-es's `Compression`
 * documentation says `INVALID_ARGUMENT`, and `INTERNAL` for a truncated stream: neither is relied on.)
 */
export function limitedCompressions(max: number): Compression[] {
  return [limited(compressionGzip, promisify(zlib.gunzip), max), limited(compressionBrotli, promisify(zlib.brotliDecompress), max)];
}

type Inflate = (bytes: Uint8Array, options: { maxOutputLength: number }) => Promise<Buffer>;

function limited(compression: Compression, inflate: Inflate, max: number): Compression {
  return {
    name: compression.name,
    compress: (bytes) => compression.compress(bytes),
    async decompress(bytes) {
      if (bytes.byteLength === 0) return new Uint8Array(0);
      try {
        const out = await inflate(bytes, { maxOutputLength: max });
        return out.buffer instanceof ArrayBuffer ? new Uint8Array(out.buffer, out.byteOffset, out.byteLength) : new Uint8Array(out);
      } catch (error) {
        if ((error as { code?: unknown }).code === "ERR_BUFFER_TOO_LARGE") {
          throw requestTooLargeError(max, { afterDecompression: true }, error);
        }
        throw new ConnectError("decompression failed", Code.InvalidArgument, undefined, undefined, error);
      }
    },
  };
}

/** A Connect unary body: fails once more than `max` bytes have arrived. */
async function* countBytes(body: AsyncIterable<Uint8Array>, max: number): AsyncIterable<Uint8Array> {
  let total = 0;
  for await (const chunk of body) {
    total += chunk.byteLength;
    if (total > max) throw requestTooLargeError(max);
    yield chunk;
  }
}

/** Size of an envelope header: one flags byte, then the payload length as a big-endian uint32. */
const ENVELOPE_HEADER_BYTES = 5;

/**
 * An enveloped body: each chunk is scanned for envelope headers before it is handed on; a header
 * announcing more than `max` bytes fails the body with the announced length.
 */
async function* splitEnvelopes(body: AsyncIterable<Uint8Array>, max: number, watch: BodyWatch): AsyncIterable<Uint8Array> {
  const header = new Uint8Array(ENVELOPE_HEADER_BYTES);
  const view = new DataView(header.buffer);
  let headerBytes = 0;
  let payloadLeft = 0;
  for await (const chunk of body) {
    let at = 0;
    while (at < chunk.byteLength) {
      if (payloadLeft > 0) {
        const skipped = Math.min(payloadLeft, chunk.byteLength - at);
        payloadLeft -= skipped;
        at += skipped;
        continue;
      }
      header[headerBytes++] = chunk[at++]!;
      // A JSON body sent without the envelope (a first "{" or "[" where the flag byte goes)
      // would otherwise be read as a length of hundreds of MB.
      if (headerBytes === 1 && (header[0] === 0x7b || header[0] === 0x5b)) throw unframedError(header[0]);
      if (headerBytes < ENVELOPE_HEADER_BYTES) continue;
      headerBytes = 0;
      payloadLeft = view.getUint32(1);
      if (payloadLeft > max) throw requestTooLargeError(max, { actual: payloadLeft });
      watch.onEnvelope?.(header[0]!);
    }
    yield chunk;
  }
}

/**
 * INVALID_ARGUMENT for a streaming body that starts like JSON instead of an envelope: Connect
 * and gRPC streams frame every message (the request too) with one flag byte and a 4-byte
 * big-endian length.
 */
function unframedError(first: number): ConnectError {
  return new ConnectError(
    `request body: not an enveloped message (it starts with "${String.fromCharCode(first)}"): streaming calls (application/connect+json, gRPC) ` +
      "frame every message, the request too, with one flag byte (0) and its length as a big-endian uint32 before it",
    Code.InvalidArgument,
  );
}

/**
 * `req` with a body whose first read fails with `error`, so connect-es answers `error` in the
 * call's protocol without reading anything. Its content-length is removed: connect-es would
 * check it against `readMaxBytes` and allocate that many bytes before reading.
 */
export function failingRequest(req: UniversalServerRequest, error: ConnectError): UniversalServerRequest {
  const header = new Headers(req.header);
  header.delete(headerUnaryContentLength);
  const body: AsyncIterable<Uint8Array> = { [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(error) }) };
  return { ...req, header, body };
}

function isByteStream(body: unknown): body is AsyncIterable<Uint8Array> {
  return typeof body === "object" && body !== null && Symbol.asyncIterator in body;
}
