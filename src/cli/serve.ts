import { defaultWebDir, loadWebPage, type WebPage } from "../server/web-page.js";
import type { RunningLedger } from "../app.js";
import type { CliIo } from "./io.js";

/** What `ledger serve` and `ledger web` (without `--url`) were given. */
export interface ServeOptions {
  /** Interface to bind (`--host`, default 127.0.0.1; another needs a token). */
  host: string;
  /** TCP port (`--port`, default 7411; 0 picks a free one). */
  port: number;
  /** Embedded database directory or `:memory:` (`--db`; ignored with DATABASE_URL). */
  db?: string;
  /** Config file (`--config`; default LEDGER_CONFIG, else ./ledger.json, ledger.jsonc, opencode.json, opencode.jsonc). */
  config?: string;
  /** `--lenient-config`: unknown config keys are dropped with a warning instead of stopping the start. */
  lenientConfig?: boolean;
  /** False with `--no-web`: no page at `/`. */
  web: boolean;
  /** `--grace-ms`: how long (ms) in-flight requests and agent loops get after SIGTERM/SIGINT; default 10,000 (`DEFAULT_GRACE_MS` of src/server/server.ts, not imported here: the server stack loads on use). */
  graceMs?: number;
}

/**
 * Runs a server until SIGINT/SIGTERM, then drains it (health `NOT_SERVING`, new RPCs
 * `UNAVAILABLE`, open streams ended with their cursor so clients reconnect elsewhere), lets
 * in-flight requests and agent loops finish for up to `opts.graceMs`, hands over the loops still
 * running, closes the database and calls `io.exit(0)` (docs/operations.md, "Running behind a
 * load balancer"); stderr says so at each step. Resolves once it listens.
 * `serve` prints "session-ledger listening on URL" on stdout and, when
 * the page is served, "browser page: URL/" on stderr; `web` prints only the page's address
 * ("URL/") on stdout, and on stderr "browser page: URL/ (open it in a browser; Ctrl-C stops the
 * server)". The page is web/dist (or `LEDGER_WEB_DIR`): when it is missing, `serve` says so on stderr and serves the RPCs alone, `web` fails. Throws what starting throws (a
 * busy port, a locked database, a bad config).
 */
export async function runServe(opts: ServeOptions, io: CliIo, mode: "serve" | "web"): Promise<void> {
  const page = opts.web ? await findPage(io, mode) : undefined;
  // Loaded on use: the server stack (database, AI SDK, ...) is not needed for --help or --url.
  const { startLocalForCli } = await import("./local.js");
  // Prints the config's warnings (keys that mean nothing here, docs/opencode-migration.md) once, and logs them.
  const ledger = await startLocalForCli(opts, io, { host: opts.host, port: opts.port, web: page });
  io.stderr.write(`database: ${ledger.database.kind} ${ledger.database.location}\n`);
  io.stderr.write(`${relayLine(ledger)}\n`);
  if (ledger.database.kind === "pglite") {
    io.stderr.write(
      "note: the embedded database serves one process; to run several replicas, point them all at Postgres with DATABASE_URL\n",
    );
  }
  if (mode === "web") {
    io.stdout.write(`${ledger.url}/\n`);
    // In the foreground until stopped, like serve: say how (a trial, 2026-12-04).
    io.stderr.write(`browser page: ${ledger.url}/ (open it in a browser; Ctrl-C stops the server)\n`);
  } else {
    io.stdout.write(`session-ledger listening on ${ledger.url}\n`);
    if (page) io.stderr.write(`browser page: ${ledger.url}/\n`);
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) {
      // An operator who does not want to wait for the drain: a second signal ends the process now.
      io.stderr.write(`${signal} again: exiting now without waiting for the drain (in-flight requests and loops are cut off)\n`);
      io.exit(1);
      return;
    }
    stopping = true;
    const graceMs = opts.graceMs ?? 10_000;
    io.stderr.write(
      `${signal}: draining: health answers NOT_SERVING, new requests get UNAVAILABLE, open streams end with UNAVAILABLE and their cursor (reconnect to another replica); finishing in-flight requests and agent loops for up to ${graceMs} ms\n`,
    );
    const started = Date.now();
    ledger.close(graceMs).then(
      () => {
        io.stderr.write(`${signal}: drained in ${Date.now() - started} ms; database closed\n`);
        io.exit(0);
      },
      (error: unknown) => {
        io.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
        io.exit(1);
      },
    );
  };
  io.onSignal("SIGINT", () => stop("SIGINT"));
  io.onSignal("SIGTERM", () => stop("SIGTERM"));
}

/**
 * `ledger web --url URL`: checks that the server at `url` serves the page (GET `/` answers 200
 * with HTML) and returns its address ("URL/"). Throws when it does not (a server started with
 * `--no-web` or without web/dist, or no ledger there) or cannot be reached.
 */
export async function pageAt(url: string): Promise<string> {
  const address = `${url.replace(/\/+$/, "")}/`;
  const res = await fetch(address, { headers: { accept: "text/html" } }).catch((error: unknown) => {
    // fetch says only "fetch failed"; the reason (ECONNREFUSED, ...) is its cause's.
    const cause = error instanceof Error ? (error.cause as { code?: string; message?: string } | undefined) : undefined;
    throw new Error(`--url ${url}: cannot reach it (${cause?.code ?? cause?.message ?? String(error)}); is "ledger serve" running there?`, {
      cause: error,
    });
  });
  await res.body?.cancel();
  if (res.status !== 200 || !(res.headers.get("content-type") ?? "").startsWith("text/html")) {
    throw new Error(
      `${address} serves no browser page (HTTP ${res.status}): that server runs with --no-web or without web/dist (npm run build:web)`,
    );
  }
  return address;
}

/** The page to serve, or undefined (with a note on stderr for `serve`; an error for `web`). */
async function findPage(io: CliIo, mode: "serve" | "web"): Promise<WebPage | undefined> {
  const dir = defaultWebDir(io.env, io.cwd);
  const page = await loadWebPage(dir);
  if (page) return page;
  const missing = `${dir}/index.html is missing (build the page with "npm run build:web")`;
  if (mode === "web") throw new Error(`no browser page to serve: ${missing}`);
  io.stderr.write(`note: no browser page at /: ${missing}; serving the RPCs only\n`);
  return undefined;
}

/**
 * The stderr line saying how this replica hears the others' writes: "relay: none (one process)"
 * on PGlite, "relay: postgres (LISTEN/NOTIFY)", or "relay: nats URL[,URL] (connected)" /
 * "relay: nats URL (not connected yet; ...)". The `ledger_relay_*` metrics say the same later
 * (docs/operations.md, "Running a fleet").
 */
function relayLine(ledger: RunningLedger): string {
  const relay = ledger.deps.relay;
  if (!relay) return "relay: none (one process)";
  const stats = relay.stats();
  if (stats.kind !== "nats") return "relay: postgres (LISTEN/NOTIFY)";
  const servers = ledger.deps.config.nats?.servers.join(",") ?? "";
  const state = stats.connected ? "connected" : "not connected yet; watchers catch up from the table meanwhile";
  return `relay: nats ${servers} (${state})`;
}
