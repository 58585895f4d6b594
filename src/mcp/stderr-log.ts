import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import { logger as defaultLogger, type Logger } from "../observe/log.js";

/** Most stderr lines of one server logged per window; the rest are counted and reported once. */
export const STDERR_LINES_PER_WINDOW = 100;
/** The rate limit's window (ms). */
export const STDERR_WINDOW_MS = 10_000;
/** Longer stderr lines are cut to this many characters (with `…`). */
export const STDERR_LINE_CHARS = 2000;

/**
 * Logs each line of an MCP server's stderr as an `info` record `{"msg":"mcp server stderr",
 * "server":<name>,"line":<text>}` (docs/operations.md#mcp-server-logs), at most
 * {@link STDERR_LINES_PER_WINDOW} lines per {@link STDERR_WINDOW_MS} per server; the lines over
 * that are dropped, and the first line after the window reports how many as a `warn` record
 * `{"msg":"mcp server stderr lines dropped","server":<name>,"dropped":N}`. Reads the stream to
 * its end (a server is never blocked on a full pipe).
 */
export function logStderr(server: string, stream: Readable, log: Logger = defaultLogger, now: () => number = Date.now): void {
  let windowStart = now();
  let lines = 0;
  let dropped = 0;
  const flushDropped = () => {
    if (dropped > 0) log.warn("mcp server stderr lines dropped", { server, dropped });
    dropped = 0;
  };
  const reader = createInterface({ input: stream, crlfDelay: Infinity });
  reader.on("line", (raw) => {
    const at = now();
    if (at - windowStart >= STDERR_WINDOW_MS) {
      flushDropped();
      windowStart = at;
      lines = 0;
    }
    if (lines >= STDERR_LINES_PER_WINDOW) {
      dropped++;
      return;
    }
    lines++;
    const line = raw.length > STDERR_LINE_CHARS ? `${raw.slice(0, STDERR_LINE_CHARS)}…` : raw;
    log.info("mcp server stderr", { server, line });
  });
  reader.on("close", flushDropped);
  // A broken pipe must not become an unhandled error event.
  stream.on("error", () => undefined);
}
