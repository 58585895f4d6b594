import type http from "node:http";
import type http2 from "node:http2";
import { performance } from "node:perf_hooks";
import { logger as defaultLogger, type Logger } from "../observe/log.js";
import type { LedgerMetrics } from "../observe/metrics.js";
import { ConnectError } from "@connectrpc/connect";
import { hasScope } from "../ledger/principal.js";
import type { Authenticator } from "./auth.js";

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** Path of the Prometheus scrape endpoint. */
export const METRICS_PATH = "/metrics";

/**
 * Answers `GET /metrics` (and HEAD) with the Prometheus text exposition of `metrics`. With an
 * `authenticator` that requires tokens, the request needs `authorization: Bearer <token>` of a
 * caller with the `ledger:admin` scope (the static token, or a JWT granting it), else 401 (no or
 * invalid token) or 403 (no admin scope); other methods get 405. Logs each scrape at debug
 * (`msg: "http"`).
 */
export function metricsHandler(
  metrics: LedgerMetrics,
  options: { authenticator?: Authenticator; logger?: Logger } = {},
): (req: NodeRequest, res: NodeResponse, requestId: string) => Promise<void> {
  const logger = options.logger ?? defaultLogger;
  const authenticator = options.authenticator;
  return async (req, res, requestId) => {
    const start = performance.now();
    let status = 0;
    if (req.method !== "GET" && req.method !== "HEAD") {
      status = plain(res, 405, "method not allowed\n", { allow: "GET, HEAD" });
    } else if (authenticator?.required) {
      // 401 or 403 answered here; 0 when the caller may scrape.
      status = await refused(authenticator, req.headers.authorization, res);
    }
    if (status === 0) {
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

/** Answers 401/403 and returns the status when the caller may not scrape; 0 when it may. */
async function refused(authenticator: Authenticator, header: string | undefined, res: NodeResponse): Promise<number> {
  let principal;
  try {
    principal = await authenticator.principal(header);
  } catch (error) {
    const challenge = error instanceof ConnectError ? error.metadata.get("www-authenticate") : null;
    return plain(res, 401, `unauthorized: ${error instanceof ConnectError ? error.rawMessage : "a bearer token is required"}\n`, {
      "www-authenticate": challenge ?? "Bearer",
    });
  }
  if (hasScope(principal, "ledger:admin")) return 0;
  return plain(res, 403, "forbidden: /metrics needs the scope ledger:admin\n", {
    "www-authenticate": 'Bearer error="insufficient_scope", scope="ledger:admin"',
  });
}
