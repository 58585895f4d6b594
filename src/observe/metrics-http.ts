import { createHash, timingSafeEqual } from "node:crypto";
import type http from "node:http";
import type http2 from "node:http2";
import { performance } from "node:perf_hooks";
import { logger as defaultLogger, type Logger } from "./log.js";
import type { LedgerMetrics } from "./metrics.js";

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** Path of the Prometheus scrape endpoint. */
export const METRICS_PATH = "/metrics";

/**
 * Answers `GET /metrics` (and HEAD) with the Prometheus text exposition of `metrics`. With a
 * `token`, the request needs `authorization: Bearer <token>` (compared in constant time), else
 * 401; other methods get 405. Logs each scrape at debug (`msg: "http"`).
 */
export function metricsHandler(
  metrics: LedgerMetrics,
  options: { token?: string; logger?: Logger } = {},
): (req: NodeRequest, res: NodeResponse, requestId: string) => Promise<void> {
  const logger = options.logger ?? defaultLogger;
  const expected = options.token ? digest(options.token) : undefined;
  return async (req, res, requestId) => {
    const start = performance.now();
    let status: number;
    if (req.method !== "GET" && req.method !== "HEAD") {
      status = plain(res, 405, "method not allowed\n", { allow: "GET, HEAD" });
    } else if (expected && !authorized(req.headers.authorization, expected)) {
      status = plain(res, 401, "unauthorized: a bearer token is required (header `authorization: Bearer <token>`)\n", {
        "www-authenticate": "Bearer",
      });
    } else {
      try {
        const body = await metrics.scrape();
        res.writeHead(200, { "content-type": metrics.contentType, "cache-control": "no-store" });
        if (req.method === "HEAD") res.end();
        else res.end(body);
        status = 200;
      } catch (error) {
        logger.error("metrics scrape failed", { error, request_id: requestId });
        status = plain(res, 500, "metrics collection failed\n");
      }
    }
    const duration_ms = Math.round((performance.now() - start) * 1000) / 1000;
    logger.debug("http", { method: req.method, path: METRICS_PATH, status, duration_ms, request_id: requestId });
  };
}

function plain(res: NodeResponse, status: number, text: string, headers: Record<string, string> = {}): number {
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8", ...headers });
  res.end(text);
  return status;
}

function authorized(header: string | undefined, expected: Buffer): boolean {
  const match = /^Bearer\s+(.+)$/i.exec((header ?? "").trim());
  return match !== null && timingSafeEqual(digest(match[1]!), expected);
}

function digest(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}
