import http from "node:http";
import http2 from "node:http2";
import { setMaxListeners } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import net from "node:net";
import { Duplex } from "node:stream";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import { createValidateInterceptor } from "@connectrpc/validate";
import type { LedgerDeps } from "../ledger/deps.js";
import { createMetrics } from "../observe/metrics.js";
import { METRICS_PATH, metricsHandler } from "./metrics-http.js";
import { createRpcObserver } from "../observe/rpc.js";
import { checkContentType, checkMethod, sendRejection } from "./content-type.js";
import { corsHeaders } from "./cors.js";
import { authInterceptor, createAuthenticator, isLoopback } from "./auth.js";
import { createDrain } from "./drain.js";
import { errorInterceptor } from "./errors.js";
import { failPendingWritesOnClose } from "./pending-writes.js";
import { withProtocolErrors } from "./protocol-errors.js";
import { createRoutes } from "./routes.js";
import { shareEventFrames } from "./shared-frames.js";
import type { WebPage } from "./web-page.js";
import { specGrpcMessages } from "./grpc-message.js";

/** A started or startable server on one plaintext port. */
export interface LedgerServer {
  /** Starts listening; resolves with the bound address. `port` 0 picks a free port. */
  listen(port: number, host: string): Promise<{ host: string; port: number; url: string }>;
  /**
   * Starts draining without closing (see `Drain` in drain.ts): health says `NOT_SERVING`, new
   * RPCs get `UNAVAILABLE` (`DRAINING`), open streams end with `UNAVAILABLE` and their cursor.
   * `close` starts it too; idempotent.
   */
  drain(): void;
  /**
   * Graceful shutdown: drains (`drain()`), sends HTTP/2 GOAWAY and stops accepting connections,
   * lets in-flight requests finish (their writes commit) and waits while `hooks.busy()` (e.g.
   * agent loops running) for up to `graceMs` (default 10,000 ms); if requests still run or
   * `busy()` still holds, calls `hooks.beforeForce` (e.g. hand agent loops over) and waits up
   * to 2,000 ms more for the requests; then closes every socket.
   */
  close(graceMs?: number, hooks?: CloseHooks): Promise<void>;
  /** Number of requests being served right now. */
  readonly inFlight: number;
}

/** What {@link LedgerServer.close} waits for and does at the end of its grace period. */
export interface CloseHooks {
  /** True while work outside requests runs (agent loops): the grace period waits for it too. */
  busy?: () => boolean;
  /** Called when the grace period ends with requests in flight or `busy()` true. */
  beforeForce?: () => Promise<void>;
  /**
   * How long (ms) to wait for requests still on their way: connections in the kernel's accept
   * queue are taken before the listener closes, and the drain lasts until no request has
   * arrived for this long. Default {@link DRAIN_QUIET_MS} (200 ms); 0 for a server that no other
   * process knows of (the CLI's own, whose calls are done when it closes): it closes at once.
   */
  quietMs?: number;
}

/** Default grace period (ms) of {@link LedgerServer.close}: `ledger serve --grace-ms`. */
export const DEFAULT_GRACE_MS = 10_000;

/** What a server serves besides its RPCs and `/metrics`. */
export interface ServerOptions {
  /** The browser page, served at `/` (GET/HEAD of paths that are no procedure); absent: none. */
  web?: WebPage;
}

/**
 * Builds (does not start) the ledger server: one plaintext port that serves Connect (JSON and
 * binary), gRPC and gRPC-Web over both HTTP/1.1 and h2c. The first bytes of each connection
 * decide: the HTTP/2 preface goes to an `http2` server, anything else to an `http` server
 * (`http2.createServer({allowHTTP1})` ignores HTTP/1.1 without TLS). CORS answers browsers from
 * loopback origins and `config.cors.origins`; with a configured token every RPC but health needs
 * it (`UNAUTHENTICATED` otherwise); requests are validated with protovalidate and capped at
 * `limits.request_bytes` (`RESOURCE_EXHAUSTED` beyond; an undecodable message is
 * `INVALID_ARGUMENT`, see `withProtocolErrors`). A POST to a procedure with a content type
 * no protocol accepts gets 415 with a Connect error body naming the expected types (see
 * `checkContentType`), and another HTTP method than it takes 405 with one (`checkMethod`).
 *
 * Observability (src/observe): every response carries `x-request-id` (the client's, or a new
 * ULID); every RPC is logged as one JSON line on stderr and counted in `deps.metrics` (a fresh
 * registry when absent); `GET /metrics` serves them in the Prometheus text format (behind the
 * bearer token when one is configured).
 *
 * With `options.web`, GET and HEAD of any path that is no procedure (nor `/metrics`) are the
 * page's: its files, else 404 (see `WebPage.serve`). The page needs no token; its RPCs do.
 */
export function createServer(deps: LedgerDeps, options: ServerOptions = {}): LedgerServer {
  const shutdown = new AbortController();
  // connect-node adds one abort listener per request to this signal.
  setMaxListeners(0, shutdown.signal);
  const metrics = deps.metrics ?? createMetrics();
  const observer = createRpcObserver({ metrics });
  const authenticator = createAuthenticator({ token: deps.config.token, jwt: deps.config.jwt });
  const serveMetrics = metricsHandler(metrics, { authenticator });
  const drain = createDrain();
  const routes = createRoutes(deps, { drain });
  const handlers = new Map<string, UniversalHandler>();
  const requestBytes = deps.config.limits.request_bytes;
  const adapter = connectNodeAdapter(
    withProtocolErrors(
      {
        routes: (router) => {
          routes(router);
          shareEventFrames(router);
          for (const h of router.handlers) handlers.set(h.requestPath, h);
          observer.setProcedures(handlers.keys());
        },
        // The observer comes first (outermost but for withProtocolErrors's marker), so it logs the
        // code errorInterceptor settled on.
        interceptors: [
          observer.interceptor,
          errorInterceptor,
          // Inside errorInterceptor: it turns a stream's interruption into its own UNAVAILABLE first.
          drain.interceptor,
          authInterceptor(authenticator),
          createValidateInterceptor(),
        ],
        contextValues: (req) => observer.contextValues(req),
        // A backstop only: withProtocolErrors refuses a message over the limit before connect-es reads it.
        readMaxBytes: requestBytes,
        // connect-es's default, pinned: the placeholders of shared frames (22 bytes,
        // src/server/shared-frames.ts) then go out uncompressed (it inflates one that did not).
        compressMinBytes: 1024,
        shutdownSignal: shutdown.signal,
      },
      requestBytes,
    ),
  );
  let inFlight = 0;
  let lastRequestAt = 0;
  let closing = false;
  const handler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => {
    lastRequestAt = Date.now();
    const requestId = observer.assignRequestId(req, res);
    const cors = corsHeaders(req.headers, deps.config.corsOrigins);
    if (cors) for (const [name, value] of Object.entries(cors)) res.setHeader(name, value);
    // While draining, HTTP/1.1 clients are told not to reuse the connection.
    if (closing && req.httpVersionMajor === 1) res.setHeader("connection", "close");
    if (req.method === "OPTIONS") {
      res.writeHead(cors ? 204 : 403);
      res.end();
      return;
    }
    // Without a token the server trusts only this machine: refuse other Host names, so a web
    // page cannot reach it through DNS rebinding.
    if (!authenticator.required && !isLoopbackHost(req.headers.host ?? req.headers[":authority"])) {
      res.writeHead(403, { "content-type": "text/plain" });
      res.end("host not allowed: without a token this server answers only loopback host names\n");
      return;
    }
    inFlight++;
    res.once("close", () => void inFlight--);
    const path = (req.url ?? "").split("?", 1)[0] ?? "";
    if (path === METRICS_PATH) {
      void serveMetrics(req, res, requestId);
      return;
    }
    const procedure = handlers.get(path);
    if (!procedure && options.web?.serve(req, res, path)) return;
    observer.track(req, res, requestId);
    // connect-es answers an unsupported content type with a bare 415; say what to send instead.
    const unsupported =
      procedure && (checkMethod(procedure, req.method) ?? checkContentType(procedure, req.method, req.headers["content-type"]));
    if (unsupported) {
      sendRejection(res, unsupported);
      return;
    }
    // An HTTP/2 stream whose client left while a write waited for `drain` must still end.
    if (req.httpVersionMajor === 2) failPendingWritesOnClose(res);
    specGrpcMessages(req, res);
    adapter(req as never, res as never);
  };

  const h1 = http.createServer(handler);
  const h2 = http2.createServer({}, handler);
  const sockets = new Set<net.Socket>();
  const sessions = new Set<http2.Http2Session>();
  h2.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  const front = net.createServer((socket) => {
    sockets.add(socket);
    // The front server accepts sockets itself, so the http servers never set TCP_NODELAY:
    // without it, stream writes wait on the client's delayed ACK (up to 40 ms).
    socket.setNoDelay(true);
    socket.once("close", () => sockets.delete(socket));
    // A peer that resets before the hand-over must not crash the process.
    socket.on("error", () => socket.destroy());
    // A connection that never says anything is dropped (the HTTP servers time out the rest).
    socket.setTimeout(SNIFF_TIMEOUT_MS, () => socket.destroy());
    socket.once("data", (chunk: Buffer) => {
      socket.setTimeout(0);
      socket.pause();
      if (chunk.subarray(0, 3).toString("latin1") === "PRI") {
        h2.emit("connection", replay(socket, chunk));
        return;
      }
      socket.unshift(chunk);
      h1.emit("connection", socket);
      socket.resume();
    });
  });

  return {
    get inFlight() {
      return inFlight;
    },
    listen(port, host) {
      return new Promise((resolve, reject) => {
        front.once("error", reject);
        front.listen(port, host, () => {
          const address = front.address() as net.AddressInfo;
          const shown = address.family === "IPv6" ? `[${address.address}]` : address.address;
          resolve({ host: address.address, port: address.port, url: `http://${shown}:${address.port}` });
        });
      });
    },
    drain: () => drain.start(),
    async close(graceMs = DEFAULT_GRACE_MS, hooks = {}) {
      drain.start();
      closing = true;
      // HTTP/2: GOAWAY; streams already open finish, new ones go elsewhere.
      for (const session of sessions) session.close();
      // Closing the listener resets connections still waiting in the kernel's accept queue, so
      // accept those first (they may carry requests clients already sent).
      const quietMs = hooks.quietMs ?? DRAIN_QUIET_MS;
      if (quietMs > 0) await delay(quietMs);
      const closed = new Promise<void>((resolve) => front.close(() => resolve()));
      // Drain: wait until nothing is in flight (streams ended at drain start), nothing else is
      // busy and no request arrived for a moment (requests already written by clients are still
      // being parsed), at most `graceMs`.
      const busy = () => inFlight > 0 || (hooks.busy?.() ?? false);
      const deadline = Date.now() + graceMs;
      while (Date.now() < deadline && (busy() || Date.now() - lastRequestAt < quietMs)) await delay(DRAIN_POLL_MS);
      if (busy() && hooks.beforeForce) {
        // Requests or loops still running: let the owner end them, then give their answers a
        // moment to be written.
        // Bounded: a loop whose tool ignores its abort signal must not hold the shutdown forever.
        await Promise.race([hooks.beforeForce(), delay(FORCE_WAIT_MS)]);
        const last = Date.now() + FORCE_WAIT_MS;
        while (Date.now() < last && inFlight > 0) await delay(DRAIN_POLL_MS);
      }
      h1.closeIdleConnections();
      shutdown.abort();
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}

/**
 * A duplex over `socket` that first yields `head` (bytes already read while sniffing). The
 * http2 server reads a real socket through its native handle, which would skip bytes put back
 * with `unshift`; given a plain duplex it reads through JS and sees them.
 */
function replay(socket: net.Socket, head: Buffer): Duplex {
  const duplex = new Duplex({
    read: () => void socket.resume(),
    write: (chunk: Buffer, _encoding, callback) => void socket.write(chunk, callback),
    final: (callback) => void socket.end(callback),
    destroy: (error, callback) => {
      socket.destroy(error ?? undefined);
      callback(error);
    },
  });
  duplex.push(head);
  socket.on("data", (data: Buffer) => {
    if (!duplex.push(data)) socket.pause();
  });
  socket.once("end", () => duplex.push(null));
  socket.once("close", () => duplex.destroy());
  socket.on("error", (error) => duplex.destroy(error));
  socket.resume();
  return duplex;
}

/** How long (ms) a new connection may stay silent before it is closed. */
const SNIFF_TIMEOUT_MS = 30_000;

/** True for a Host header naming this machine (any port), or no Host at all. */
function isLoopbackHost(host: string | string[] | undefined): boolean {
  if (host === undefined) return true;
  const value = Array.isArray(host) ? (host[0] ?? "") : host;
  const name = value.startsWith("[") ? value.slice(0, value.indexOf("]") + 1) : value.replace(/:\d+$/, "");
  return isLoopback(name);
}

/** A draining server waits until no request has arrived for this long (ms), unless `CloseHooks.quietMs` says otherwise. */
export const DRAIN_QUIET_MS = 200;
const DRAIN_POLL_MS = 20;
/** After `beforeForce`, how long (ms) remaining requests get to finish. */
const FORCE_WAIT_MS = 2000;

function delay(ms: number): Promise<void> {
  return sleep(ms, undefined, { ref: false });
}
