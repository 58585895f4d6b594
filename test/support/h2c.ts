import http2 from "node:http2";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { WatchSessionRequestSchema, WatchSessionResponseSchema } from "../../gen/ledger/v1/service_pb.js";

/**
 * Posts `body` (already gRPC-framed) to `procedure` of the ledger at `url` over plaintext HTTP/2
 * (h2c) with `content-type: application/grpc`, reads the whole response, and returns its
 * `grpc-status` (from the trailers, or from the headers of a trailers-only response).
 */
export async function grpcStatusOverH2c(url: string, procedure: string, body: Buffer): Promise<string | undefined> {
  const session = http2.connect(url);
  try {
    return await new Promise<string | undefined>((resolve, reject) => {
      const req = session.request({
        ":method": "POST",
        ":path": `/ledger.v1.SessionService/${procedure}`,
        "content-type": "application/grpc",
        te: "trailers",
      });
      let grpcStatus: string | undefined;
      req.on("response", (headers) => (grpcStatus ??= headers["grpc-status"] as string | undefined));
      req.on("trailers", (trailers) => (grpcStatus = trailers["grpc-status"] as string | undefined));
      req.on("end", () => resolve(grpcStatus));
      req.on("error", reject);
      req.resume();
      req.end(body);
    });
  } finally {
    session.close();
  }
}

/** A `WatchSession` call made over a connection of its own with plain `node:http2` (gRPC, binary). */
export interface RawWatch {
  /** The `seq` of every event received, in order (reading watches only). */
  seqs: number[];
  /** How many received text parts have exactly `textChars` characters (reading watches only). */
  fullTexts: number;
  /** Response bytes the client has received and not read (non-reading watches: what the server could send). */
  buffered(): number;
  /** Resolves once an event with `seq >= untilSeq` arrived; rejects if the stream ends or fails before. */
  reached: Promise<void>;
  /** Cancels the call (RST_STREAM CANCEL) and closes the connection. */
  close(): void;
}

/**
 * Opens `WatchSession{session_id, after_seq}` on the ledger at `url` over a connection of its
 * own. A reading watch decodes every message as it arrives, keeping its seqs and counting text
 * parts of `textChars` characters, with windows of 4 MiB per stream and 16 MiB per connection
 * (what grpc-go's flow control grows to for a fast reader; with Node's 64 KiB a 1 MB message took
 * 16 window updates, and 8 readers of 80 MB took 13 s instead of 7); a non-reading one never
 * reads (its stream stays paused) and keeps Node's 64 KiB window, so HTTP/2 flow control stops
 * the server after about one window.
 */
export function watchOverH2c(
  url: string,
  options: { sessionId: string; afterSeq: bigint; read: boolean; untilSeq: bigint; textChars: number },
): RawWatch {
  const session = http2.connect(url, options.read ? { settings: { initialWindowSize: 4 << 20 } } : {});
  session.on("error", () => {});
  if (options.read) session.on("connect", () => session.setLocalWindowSize(16 << 20));
  const body = toBinary(
    WatchSessionRequestSchema,
    create(WatchSessionRequestSchema, { sessionId: options.sessionId, afterSeq: options.afterSeq }),
  );
  const frame = Buffer.alloc(5 + body.length);
  frame.writeUInt32BE(body.length, 1);
  frame.set(body, 5);
  const req = session.request({
    ":method": "POST",
    ":path": "/ledger.v1.SessionService/WatchSession",
    "content-type": "application/grpc",
    te: "trailers",
  });
  req.on("error", () => {});
  req.end(frame);
  const watch: RawWatch = {
    seqs: [],
    fullTexts: 0,
    buffered: () => req.readableLength,
    reached: Promise.resolve(),
    close() {
      if (!req.closed) req.close(http2.constants.NGHTTP2_CANCEL);
      session.close();
    },
  };
  if (!options.read) return watch;
  watch.reached = new Promise<void>((resolve, reject) => {
    const frames = grpcFrames((message) => {
      const event = fromBinary(WatchSessionResponseSchema, message).event;
      if (!event) return;
      watch.seqs.push(Number(event.seq));
      const part = event.kind.case === "partUpdated" ? event.kind.value.part : undefined;
      if (part?.kind.case === "text" && part.kind.value.text.length === options.textChars) watch.fullTexts++;
      if (event.seq >= options.untilSeq) resolve();
    });
    req.on("data", frames);
    req.on("close", () => reject(new Error(`the watch ended after seq ${watch.seqs.at(-1) ?? "none"} (${req.rstCode ?? "no reset"})`)));
  });
  return watch;
}

/** Splits a gRPC response body into messages (5-byte frame header, then the message), calling `onMessage` for each. */
function grpcFrames(onMessage: (message: Uint8Array) => void): (chunk: Buffer) => void {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let head = Buffer.alloc(0);
  return (chunk) => {
    pending.push(chunk);
    pendingBytes += chunk.length;
    for (;;) {
      const size = head.length >= 5 ? 5 + head.readUInt32BE(1) : 5;
      if (head.length + pendingBytes < size) return;
      // Concatenate only once a whole frame is there (a 1 MB message arrives in many chunks).
      const all = Buffer.concat([head, ...pending]);
      pending = [];
      pendingBytes = 0;
      if (all.length < 5) {
        head = all;
        continue;
      }
      const end = 5 + all.readUInt32BE(1);
      if (all.length < end) {
        head = all;
        continue;
      }
      onMessage(all.subarray(5, end));
      head = all.subarray(end);
    }
  };
}
