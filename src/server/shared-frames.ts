import { randomBytes } from "node:crypto";
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { createContextKey, createContextValues, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerRequest } from "@connectrpc/connect/protocol";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import {
  PromptStreamResponseSchema,
  ResumeSessionResponseSchema,
  SessionService,
  WatchSessionResponseSchema,
} from "../../gen/ledger/v1/service_pb.js";
import { isSharedEvent } from "../events/feed.js";
import { logger } from "../observe/log.js";

/**
 * Large replayed events, written once per process instead of once per stream.
 *
 * `WatchSession`, `ResumeSession` and `PromptStream` answer with the same message shape
 * (`SessionEvent event = 1`), so one serialized response serves all three. connect-node
 * serializes every message of every stream itself and keeps two copies of it until the frame has
 * gone out (the serialized message, which its serialize and envelope steps still reference, and
 * the frame that copies it behind its 5-byte header), and protobuf-es's writer sizes its buffer
 * for 3 bytes per character (4 MiB for a 1,000,000-character text). Measured
 * (docs/streams-and-replicas.md "Replay with bounded memory"): 32 streams whose clients read
 * nothing, stalled on the same 1 MB event, held 64 such buffers; 8 readers of the same log
 * serialized each event 8 times.
 *
 * For a call in a binary codec (`shareFrames`), the handler yields, for an event the replays of
 * this process share (`isSharedEvent`: stored events of 64 KiB or more), a tiny placeholder
 * message (`eventResponse`): an unknown field carrying a token that is unique in the process.
 * connect-node serializes and frames it as any message (22 bytes, under connect-es's
 * `compressMinBytes`, so never compressed); the wrapped handler's response body then replaces
 * that frame by a 5-byte header and the event's serialized response, made once per event and
 * kept as long as the event is (`encodedOnce`). A stalled stream thus holds a reference to the
 * shared bytes, not copies. Such frames are sent uncompressed (flag 0) even when the call
 * negotiated a response compression: gRPC and Connect mark compression per message, and
 * compressing a shared frame per stream would cost the copies this avoids.
 */

/** Content types (before any `;` parameter) whose messages are protobuf binary. */
const BINARY_TYPES = new Set([
  "application/grpc",
  "application/grpc+proto",
  "application/grpc-web",
  "application/grpc-web+proto",
  "application/connect+proto",
]);

/** The unknown field that carries a placeholder's token: the highest field number protobuf allows. */
const TOKEN_FIELD = 536_870_911;
/** Frame flags of a trailer or end-stream frame (gRPC-Web 0x80, Connect 0x02): not a message. */
const TRAILER_FLAGS = 0x80 | 0x02;
/** Bytes of a placeholder's token: 8 random ones per process, then a counter. */
const TOKEN_BYTES = 16;
/** A placeholder message: its field's tag (5 bytes), the token's length (1 byte) and the token. */
const PLACEHOLDER_BYTES = 5 + 1 + TOKEN_BYTES;
/** A placeholder frame: flags (1 byte, 0: not compressed), the message's length (4) and the message. */
const PLACEHOLDER_FRAME_BYTES = 5 + PLACEHOLDER_BYTES;

const processToken = randomBytes(8);
let counter = 0n;

/** The serialized `{ event }` response of each shared event this process wrote in a binary codec. */
const encoded = new WeakMap<SessionEvent, Uint8Array>();

/** What one call in a binary codec has placed: token (hex) → the serialized response to send instead. */
type Placed = Map<string, Uint8Array>;

const placedKey = createContextKey<Placed | undefined>(undefined, { description: "ledger shared frames" });

/** The procedures whose responses are `SessionEvent event = 1` and that yield `eventResponse`. */
const EVENT_STREAMS = [SessionService.method.watchSession, SessionService.method.resumeSession, SessionService.method.promptStream];

/** Wraps the handlers `router` holds for the event streams (WatchSession, ResumeSession, PromptStream) with `shareFrames`. */
export function shareEventFrames(router: ConnectRouter): void {
  const paths = new Set(EVENT_STREAMS.map((m) => `/${m.parent.typeName}/${m.name}`));
  const handlers = router.handlers;
  for (let i = 0; i < handlers.length; i++) if (paths.has(handlers[i]!.requestPath)) handlers[i] = shareFrames(handlers[i]!);
}

/**
 * `handler` (a server-streaming procedure whose response is `SessionEvent event = 1`), whose
 * calls in a binary codec may yield placeholders (`eventResponse`) that its response body
 * replaces by the shared serialized response. Calls in JSON get `handler` unchanged.
 */
export function shareFrames(handler: UniversalHandler): UniversalHandler {
  const wrapped = async (req: UniversalServerRequest) => {
    const type = req.header.get("content-type")?.split(";")[0]?.trim().toLowerCase();
    if (!type || !BINARY_TYPES.has(type)) return handler(req);
    const placed: Placed = new Map();
    const contextValues = req.contextValues ?? createContextValues();
    contextValues.set(placedKey, placed);
    const res = await handler({ ...req, contextValues });
    if (!res.body || !(Symbol.asyncIterator in res.body)) return res;
    const encoding = res.header?.get("grpc-encoding") ?? res.header?.get("connect-content-encoding") ?? undefined;
    return { ...res, body: substitute(res.body, placed, encoding) };
  };
  // Keep the handler's routing facts (requestPath, protocolNames, method, ...).
  return Object.assign(wrapped, handler);
}

/** The responses of the event streams: the same shape, `SessionEvent event = 1`. */
export type EventResponseSchema =
  typeof WatchSessionResponseSchema | typeof ResumeSessionResponseSchema | typeof PromptStreamResponseSchema;

/**
 * The response (of `schema`) to yield for `event` in a handler wrapped by `shareFrames`:
 * `{ event }`, or, for an event the process's replays share in a call in a binary codec, a
 * placeholder that the response body replaces by the event's serialized response (made here
 * once per event; the three schemas serialize alike).
 */
export function eventResponse<S extends EventResponseSchema>(ctx: HandlerContext, schema: S, event: SessionEvent): MessageInitShape<S> {
  const placed = ctx.values.get(placedKey);
  if (!placed || !isSharedEvent(event)) return { event } as MessageInitShape<S>;
  let bytes = encoded.get(event);
  if (!bytes) encoded.set(event, (bytes = toBinary(WatchSessionResponseSchema, create(WatchSessionResponseSchema, { event }))));
  const token = new Uint8Array(TOKEN_BYTES);
  token.set(processToken);
  new DataView(token.buffer).setBigUint64(8, counter++);
  placed.set(Buffer.from(token).toString("hex"), bytes);
  const data = new Uint8Array(1 + TOKEN_BYTES);
  data[0] = TOKEN_BYTES;
  data.set(token, 1);
  const placeholder = create(schema as typeof WatchSessionResponseSchema);
  placeholder.$unknown = [{ no: TOKEN_FIELD, wireType: 2, data }];
  return placeholder as MessageInitShape<S>;
}

/**
 * `body` with each placeholder frame replaced by a header and the serialized response it stands
 * for. `throw` and `return` go to `body` itself, so connect-node's handling of a failed write
 * (it throws the error into the body) reaches the handler as before. A placeholder is 22 bytes,
 * under connect-es's `compressMinBytes` (pinned at 1024 in src/server/server.ts), so it is not
 * compressed; were it (`encoding`: the call's response compression, gzip or br), it is inflated
 * to be found all the same. A data frame that passes while a placeholder is outstanding cannot
 * happen while protobuf-es writes unknown fields (its default); it is logged as an error.
 */
function substitute(body: AsyncIterable<Uint8Array>, placed: Placed, encoding: string | undefined): AsyncIterable<Uint8Array> {
  const inner = body[Symbol.asyncIterator]();
  let shared: Uint8Array | undefined;
  const iterator: AsyncIterator<Uint8Array> = {
    async next() {
      if (shared) {
        const value = shared;
        shared = undefined;
        return { done: false, value };
      }
      const result = await inner.next();
      if (result.done) return result;
      const chunk = result.value;
      const bytes = placed.size > 0 ? take(uncompressed(chunk, encoding), placed) : undefined;
      if (!bytes) {
        if (placed.size > 0 && (chunk[0]! & TRAILER_FLAGS) === 0) {
          logger.error("shared frames: a placeholder was not found in the frame written for it", {
            frame_bytes: chunk.byteLength,
            encoding,
          });
          placed.clear();
        }
        return result;
      }
      shared = bytes;
      const header = new Uint8Array(5);
      new DataView(header.buffer).setUint32(1, bytes.byteLength);
      return { done: false, value: header };
    },
    return: (value?: unknown) => inner.return?.(value) ?? Promise.resolve({ done: true, value: undefined }),
    throw: (error?: unknown) => inner.throw?.(error) ?? Promise.reject(error),
  };
  return { [Symbol.asyncIterator]: () => iterator };
}

/** A small compressed message frame (flag 1) inflated back to an uncompressed one; any other frame as it is. */
function uncompressed(frame: Uint8Array, encoding: string | undefined): Uint8Array {
  if ((frame[0]! & 1) === 0 || frame.byteLength > 256 || (encoding !== "gzip" && encoding !== "br")) return frame;
  try {
    const body = frame.subarray(5);
    const message = encoding === "gzip" ? gunzipSync(body) : brotliDecompressSync(body);
    const plain = new Uint8Array(5 + message.byteLength);
    new DataView(plain.buffer).setUint32(1, message.byteLength);
    plain.set(message, 5);
    return plain;
  } catch {
    return frame;
  }
}

/** The serialized response `frame` stands for, if it is an uncompressed placeholder this call placed (removed from `placed`). */
function take(frame: Uint8Array, placed: Placed): Uint8Array | undefined {
  if (frame.byteLength !== PLACEHOLDER_FRAME_BYTES) return undefined;
  if (frame[0] !== 0 || new DataView(frame.buffer, frame.byteOffset).getUint32(1) !== PLACEHOLDER_BYTES) return undefined;
  const token = Buffer.from(frame.buffer, frame.byteOffset + PLACEHOLDER_FRAME_BYTES - TOKEN_BYTES, TOKEN_BYTES).toString("hex");
  const bytes = placed.get(token);
  placed.delete(token);
  return bytes;
}
