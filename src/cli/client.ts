import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { logger } from "../observe/log.js";
import type { CliIo } from "./io.js";

/** A Connect client of `ledger.v1.SessionService`. */
export type Ledger = Client<typeof SessionService>;

/** Where a client command finds its server: `--url`, or an in-process one on `--db` with `--config`. */
export interface ClientOptions {
  url?: string;
  db?: string;
  config?: string;
  /** `--lenient-config`: unknown config keys are dropped with a warning (also `LEDGER_LENIENT_CONFIG=1`). */
  lenientConfig?: boolean;
}

/**
 * Runs `fn` with a client (sending `LEDGER_TOKEN` as a bearer token when set) of the server at `--url`, or, without one, of a server started in
 * this process on a random loopback port (embedded database, closed again afterwards). Relative
 * `--db`/`--config` paths and ./ledger.json are found from `io.cwd`; `DATABASE_URL` and `LEDGER_TOKEN` come from `io.env`.
 * The in-process server's config warnings go to `io.stderr` once, before `fn` runs. `use.reads`:
 * the command only reads, so a missing embedded database is not made (see `startLocalForCli`).
 */
export async function withClient<T>(
  opts: ClientOptions,
  io: Pick<CliIo, "cwd" | "env" | "stderr" | "exit">,
  fn: (client: Ledger) => Promise<T>,
  use: { reads?: boolean } = {},
): Promise<T> {
  if (opts.url) {
    const url = opts.url;
    return fn(connect(url, io.env)).catch((error: unknown) => {
      throw explainUrlError(error, url);
    });
  }
  // The in-process server's RPC log lines would mix into this command's output.
  if (!io.env.LEDGER_LOG_LEVEL) logger.setLevel("warn");
  // Loaded on use: with --url the CLI never loads the server stack (database, AI SDK, ...).
  const { startLocalForCli } = await import("./local.js");
  const ledger = await startLocalForCli(opts, io, undefined, use);
  try {
    return await fn(connect(ledger.url, io.env));
  } finally {
    // Only this process knows the server's port, and its calls are done: no request is on its
    // way, so it closes without the 200 ms a shared server waits for one (2.2 s to 2.0 s a command).
    await ledger.close(undefined, { quietMs: 0 });
  }
}

function connect(baseUrl: string, env: NodeJS.ProcessEnv): Ledger {
  const token = env.LEDGER_TOKEN;
  const auth: Interceptor = (next) => (req) => {
    if (token) req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  return createClient(SessionService, createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors: [auth] }));
}

/** Errors of a connection that never reached a server (not one cut in the middle of a call). */
const UNREACHABLE = new Set(["ECONNREFUSED", "ENOTFOUND", "EHOSTUNREACH", "ENETUNREACH", "ETIMEDOUT", "EAI_AGAIN"]);

/**
 * `error` with what the user can do about `--url` when the server there could not be reached as a
 * ledger: nothing listening (UNAVAILABLE, ECONNREFUSED and the like), a TLS client talking to the
 * plaintext port (EPROTO: then UNAVAILABLE with only the hint), or no ledger service at that
 * address (an HTTP status without a Connect error: a path, another server). Other errors (the
 * server's own answers) are returned as they are.
 */
export function explainUrlError(error: unknown, url: string): unknown {
  if (!(error instanceof ConnectError) || error.details.length > 0) return error;
  const cause = (error.cause as { code?: unknown } | undefined)?.code;
  let hint: string | undefined;
  if (cause === "EPROTO" || cause === "ERR_SSL_WRONG_VERSION_NUMBER")
    // The TLS library's own text (a trial, 2026-12-04: "write EPROTO 802C...:SSL routines:...") tells a user nothing more.
    return new ConnectError(
      `--url ${url}: "ledger serve" speaks plain HTTP; use http://, or https:// only for a TLS proxy in front of it`,
      Code.Unavailable,
      error.metadata,
      undefined,
      error.cause,
    );
  // Another server: its 404 (as "HTTP 404", or a JSON body Connect reads as an empty error), or
  // a 405, 415 or 501 without a Connect error body (a trial, 2026-12-04: "Unknown: HTTP 501").
  // (Not a 401, 403, 429 or 5xx: a ledger, or a proxy in front of one, answers those itself.)
  else if (/^HTTP (404|405|415|501)\b/.test(error.rawMessage) || (error.code === Code.Unimplemented && error.rawMessage === ""))
    hint = `--url ${url}: no ledger service there (or one too old for this command); give the server's base URL, as "ledger serve" prints it (listening on http://host:port)`;
  else if (error.code === Code.Unavailable && typeof cause === "string" && UNREACHABLE.has(cause))
    hint = `--url ${url}: is "ledger serve" running there?`;
  if (!hint) return error;
  return new ConnectError(error.rawMessage ? `${error.rawMessage} (${hint})` : hint, error.code, error.metadata, undefined, error.cause);
}
