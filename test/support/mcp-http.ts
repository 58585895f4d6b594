import { spawn, type ChildProcess } from "node:child_process";
import http, { type IncomingHttpHeaders } from "node:http";
import net from "node:net";
import { EVERYTHING } from "./mcp-servers.js";

/** A free TCP port on 127.0.0.1 (bound and released; taken again by the caller right away). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A running HTTP mode of `server-everything`: its MCP endpoint's URL, and how to stop it. */
export interface EverythingHttp {
  /** `http://127.0.0.1:<port>/mcp` (Streamable HTTP) or `/sse` (HTTP+SSE). */
  url: string;
  port: number;
  child: ChildProcess;
  /** Kills the process (SIGKILL) and waits for it to end. */
  stop(): Promise<void>;
}

/**
 * Starts the published reference server `server-everything` (a devDependency) in its HTTP mode
 * — `node dist/index.js streamableHttp` (endpoint `/mcp`) or `sse` (endpoint `/sse`), port from
 * `PORT` — on `port` (a free one by default), and waits until it says it listens. Express binds
 * every interface; the tests reach it on 127.0.0.1.
 */
export async function startEverythingHttp(mode: "streamableHttp" | "sse", port?: number): Promise<EverythingHttp> {
  const chosen = port ?? (await freePort());
  const child = spawn(process.execPath, [EVERYTHING, mode], {
    env: { PATH: process.env.PATH ?? "", PORT: String(chosen) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let output = "";
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server-everything ${mode} did not listen within 20 s: ${output}`)), 20_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (/listening on port|running on port/i.test(output)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`server-everything ${mode} exited (${code}): ${output}`));
    });
  });
  return {
    url: `http://127.0.0.1:${chosen}/${mode === "sse" ? "sse" : "mcp"}`,
    port: chosen,
    child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}

/** One request the recording proxy forwarded: method, path and query, headers as received. */
export interface Recorded {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  status?: number;
}

/** The proxy of {@link recordingProxy}. */
export interface RecordingProxy {
  /** Its origin, `http://127.0.0.1:<port>`. */
  url: string;
  /** Every request so far, in order. */
  requests: Recorded[];
  /** When set, a request it gives a status for is answered with that status by the proxy itself (not forwarded). */
  answer?: (request: Recorded) => number | undefined;
  close(): Promise<void>;
}

/**
 * A plain HTTP proxy on 127.0.0.1 in front of `target` (an origin) that records every request
 * (see {@link Recorded}) and streams bodies both ways (SSE included). `close()` ends it and its
 * open connections.
 */
export async function recordingProxy(target: string): Promise<RecordingProxy> {
  const upstream = new URL(target);
  const requests: Recorded[] = [];
  const server = http.createServer((req, res) => {
    const record: Recorded = { method: req.method ?? "", path: req.url ?? "", headers: req.headers };
    requests.push(record);
    const status = proxy.answer?.(record);
    if (status !== undefined) {
      record.status = status;
      req.resume();
      const body = { jsonrpc: "2.0", error: { code: -32001, message: `answered ${status} by the test proxy` }, id: null };
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
      return;
    }
    const forward = http.request(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: { ...req.headers, host: upstream.host } },
      (answer) => {
        record.status = answer.statusCode;
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    forward.on("error", () => res.destroy());
    res.on("close", () => forward.destroy());
    req.pipe(forward);
  });
  const proxy: RecordingProxy = {
    url: "",
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  proxy.url = `http://127.0.0.1:${port}`;
  return proxy;
}
