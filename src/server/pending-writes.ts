import type http from "node:http";
import type http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";

/** A write callback as Node calls it: with an error when the write failed. */
type WriteCallback = (error?: Error | null) => void;

/**
 * Makes every write to `res` still waiting to be flushed when `res` closes fail, once, with a
 * `ConnectError` `ABORTED` (the callback Node calls later is then ignored).
 *
 * Why: connect-node (2.3.0) writes each message of a server stream and, when `write` returns
 * false, waits for `drain` or an error. When an HTTP/2 client cancels a stream whose flow-control
 * window is full (it stopped reading), Node 20 emits neither: the response closes and the
 * pending write's callback is called without an error. The call then never ends: its handler
 * stays suspended at `yield` with its replay page, the message being written and its
 * serialized copies (about 3 MB for a 1 MB event), for the life of the process; measured here,
 * 40 cancelled `WatchSession` streams were never logged as ended. With the write failed,
 * connect-node throws the error into the handler (its `finally` blocks run; src/server/shared-frames.ts
 * passes that `throw` through) and, the code being
 * `ABORTED` (its code for a client that went away), logs nothing; the RPC is logged `canceled`.
 * HTTP/1.1 needs none of this: Node fails writes on a destroyed socket itself.
 */
export function failPendingWritesOnClose(res: http2.Http2ServerResponse | http.ServerResponse): void {
  const pending = new Set<WriteCallback>();
  const write = res.write.bind(res) as (chunk: unknown, encoding?: unknown, callback?: unknown) => boolean;
  res.once("close", () => {
    if (pending.size === 0) return;
    const error = new ConnectError("the client went away before this message was written", Code.Aborted);
    for (const callback of [...pending]) callback(error);
  });
  const patched = (chunk: unknown, encoding?: unknown, callback?: unknown): boolean => {
    const given = typeof encoding === "function" ? encoding : callback;
    if (typeof given !== "function") return write(chunk, encoding, callback);
    let settled = false;
    const once: WriteCallback = (error) => {
      if (settled) return;
      settled = true;
      pending.delete(once);
      (given as WriteCallback)(error);
    };
    pending.add(once);
    return typeof encoding === "function" ? write(chunk, once) : write(chunk, encoding, once);
  };
  res.write = patched as typeof res.write;
}
