/**
 * A loopback HTTP proxy in front of a replaceable upstream (e.g. a fake OpenAI server), so
 * long-lived `ledger serve` children configured once with the proxy's URL can be pointed at a
 * fresh fake per test: scripted replies left over by a failed test never leak into the next.
 */
import { request } from "node:http";
import { listenLoopback, sendJson } from "./fake-http.js";

/** A running proxy; see {@link startModelProxy}. */
export interface ModelProxy {
  /** Base URL to configure, e.g. `http://127.0.0.1:PORT/v1`. */
  url: string;
  /** Sends later requests to `baseUrl` (same path layout, e.g. `http://127.0.0.1:OTHER/v1`). */
  setTarget(baseUrl: string): void;
  /** Stops listening and destroys open connections. */
  close(): Promise<void>;
}

/** Starts the proxy on 127.0.0.1 with an ephemeral port; it answers 503 until a target is set. */
export async function startModelProxy(): Promise<ModelProxy> {
  let target: URL | undefined;
  const server = await listenLoopback(async (req, res) => {
    if (!target) {
      sendJson(res, 503, { error: { message: "model proxy: no upstream", type: "server_error", code: null } });
      return;
    }
    const upstream = request(new URL(req.url ?? "/", target.origin), { method: req.method, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
      // The upstream went away mid-stream (closed fake, hung reply destroyed): cut the client off too.
      up.on("close", () => {
        if (!res.writableFinished) res.destroy();
      });
    });
    upstream.on("error", () => {
      if (!res.headersSent) sendJson(res, 502, { error: { message: "model proxy: upstream failed", type: "server_error", code: null } });
      else res.destroy();
    });
    req.pipe(upstream);
    // The client went away (aborted run, killed process): stop the upstream request.
    res.on("close", () => {
      if (!res.writableFinished) upstream.destroy();
    });
  });
  return {
    url: `${server.origin}/v1`,
    setTarget(baseUrl) {
      target = new URL(baseUrl);
    },
    close: server.close,
  };
}
