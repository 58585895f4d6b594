/**
 * Shared pieces of the benchmarks (`npm run bench`): result rows, timing and percentiles,
 * iteration scaling (`BENCH_SCALE`), per-benchmark Postgres databases, Connect clients, and a
 * bare Connect server for baselines.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import http from "node:http";
import type net from "node:net";
import os from "node:os";
import path from "node:path";
import { createClient, type Client, type ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport } from "@connectrpc/connect-node";
import pg from "pg";
import { SessionService } from "../gen/ledger/v1/service_pb.js";

/** One line of the results table. `ratio` is always `ours / baseline`. */
export interface Row {
  name: string;
  ours: number;
  baseline: number;
  ratio: number;
  /** "≤ 1.5×", "≥ 0.5×", or null for an informational row. */
  goal: string | null;
  /** null when the row has no goal. */
  pass: boolean | null;
  unit: string;
  /** What exactly was measured, when the name does not say it all. */
  note?: string;
}

/** A goal on `ours / baseline`. */
export interface Goal {
  op: "<=" | ">=";
  value: number;
}

/** A goal met when ours is at most `value` times the baseline. */
export const atMost = (value: number): Goal => ({ op: "<=", value });
/** A goal met when ours is at least `value` times the baseline. */
export const atLeast = (value: number): Goal => ({ op: ">=", value });

/** Builds a row; `ratio = ours / baseline`, checked against `goal` when given. */
export function row(name: string, ours: number, baseline: number, unit: string, goal?: Goal, note?: string): Row {
  const ratio = ours / baseline;
  return {
    name,
    ours: round(ours),
    baseline: round(baseline),
    ratio: round(ratio),
    goal: goal ? `${goal.op === "<=" ? "≤" : "≥"} ${goal.value}×` : null,
    pass: goal ? (goal.op === "<=" ? ratio <= goal.value : ratio >= goal.value) : null,
    unit,
    ...(note ? { note } : {}),
  };
}

/**
 * Millisecond rows comparing two sets of latency samples at percentiles: one row per key of
 * `goals` (the percentile, in ascending order) with that goal (or none), named `${name}, p<N>`.
 *
 * ```ts
 * percentileRows("Kysely vs raw pg: read", writes.a, writes.b, { 50: atMost(1.2), 99: undefined }, note);
 * ```
 */
export function percentileRows(
  name: string,
  ours: readonly number[],
  baseline: readonly number[],
  goals: Record<number, Goal | undefined>,
  note?: string,
): Row[] {
  return Object.entries(goals).map(([p, goal]) =>
    row(`${name}, p${p}`, percentile(ours, Number(p)), percentile(baseline, Number(p)), "ms", goal, note),
  );
}

function round(value: number): number {
  if (!Number.isFinite(value)) return value;
  const magnitude = Math.abs(value);
  const digits = magnitude >= 100 ? 1 : magnitude >= 1 ? 3 : 4;
  return Number(value.toFixed(digits));
}

/** `BENCH_SCALE` (default 1): multiplies iteration counts and durations. */
export const SCALE = (() => {
  const value = Number(process.env.BENCH_SCALE ?? "1");
  if (!Number.isFinite(value) || value <= 0) throw new Error(`BENCH_SCALE must be a positive number, got ${process.env.BENCH_SCALE}`);
  return value;
})();

/** `n * BENCH_SCALE`, rounded, at least `min`. */
export function scaled(n: number, min = 1): number {
  return Math.max(min, Math.round(n * SCALE));
}

/** Monotonic clock in nanoseconds. */
export const now = (): bigint => process.hrtime.bigint();

/** Milliseconds between two `now()` readings. */
export const elapsedMs = (from: bigint, to: bigint = now()): number => Number(to - from) / 1e6;

/** The `p`-th percentile (0..100) of `samples` (nearest rank). */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

/** The median (50th percentile, nearest rank) of `samples`. */
export function median(samples: readonly number[]): number {
  return percentile(samples, 50);
}

/**
 * Runs `a` and `b` alternately (`warmup` unmeasured rounds, then `iterations` measured ones),
 * switching which goes first every round so drift and caching hit both alike. Returns the
 * latency samples (ms) of each.
 */
export async function paired(
  iterations: number,
  warmup: number,
  a: (i: number) => Promise<unknown>,
  b: (i: number) => Promise<unknown>,
): Promise<{ a: number[]; b: number[] }> {
  const samples = { a: [] as number[], b: [] as number[] };
  for (let i = 0; i < warmup + iterations; i++) {
    const order: Array<["a" | "b", (i: number) => Promise<unknown>]> =
      i % 2 === 0
        ? [
            ["a", a],
            ["b", b],
          ]
        : [
            ["b", b],
            ["a", a],
          ];
    for (const [key, fn] of order) {
      const start = now();
      await fn(i);
      const ms = elapsedMs(start);
      if (i >= warmup) samples[key].push(ms);
    }
  }
  return samples;
}

/** Progress on stderr (stdout carries the table). */
export function log(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

/** Server for per-benchmark databases: `BENCH_DATABASE_URL`, else `TEST_DATABASE_URL`, else the local cluster. */
export const ADMIN_URL = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

/** A fresh Postgres database for one benchmark, and how to drop it. */
export interface BenchDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

export async function createBenchDatabase(label: string): Promise<BenchDatabase> {
  const name = `ledger_bench_${label}_${randomBytes(4).toString("hex")}`;
  await admin(`create database ${name}`);
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    name,
    url: url.toString(),
    // pg.Pool#end resolves before its sockets are closed; let them go before forcing the drop,
    // or the closing connections report "terminating connection due to administrator command".
    drop: async () => {
      await sleep(250);
      await admin(`drop database if exists ${name} with (force)`);
    },
  };
}

export async function admin(statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}

/** A resolved temporary directory (session directories, replica working directories). */
export async function tempDir(label: string): Promise<{ dir: string; remove(): Promise<void> }> {
  const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), `ledger-bench-${label}-`)));
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}

/**
 * A Connect client as the CLI makes one: Connect protocol, binary, HTTP/1.1 with keep-alive.
 * Every client in these benchmarks, ours and baselines, uses this transport.
 */
export function connectClient(baseUrl: string): Client<typeof SessionService> {
  return createClient(SessionService, createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: true }));
}

/** A bare Connect server on loopback (plain `http` + `connectNodeAdapter`, no interceptors). */
export interface BareServer {
  url: string;
  close(): Promise<void>;
}

export async function startBareConnect(routes: (router: ConnectRouter) => void): Promise<BareServer> {
  const server = http.createServer(connectNodeAdapter({ routes }));
  const sockets = new Set<net.Socket>();
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const address = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${address.port}`,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}

/**
 * Sustained load: runs every worker in a loop, concurrently, for `warmSeconds` (unmeasured) and
 * then `measureSeconds`; each worker awaits one call at a time (e.g. one client prompting its
 * own session). Returns the measured rate (calls/s), the completed calls of each phase and the
 * measured period's actual length (s). A
 * worker's rejection rejects the whole run (after every worker stopped).
 */
export async function sustain(
  workers: ReadonlyArray<() => Promise<unknown>>,
  warmSeconds: number,
  measureSeconds: number,
): Promise<{ rate: number; warmed: number; measured: number; seconds: number }> {
  let stopping = false;
  let completed = 0;
  const running = workers.map(async (call) => {
    try {
      while (!stopping) {
        await call();
        completed++;
      }
    } finally {
      stopping = true;
    }
  });
  const stopped = Promise.all(running);
  // A failed worker stops the others; the rejection surfaces after the sleeps.
  stopped.catch(() => {});
  await sleep(warmSeconds * 1000);
  const warmed = completed;
  const start = now();
  await sleep(measureSeconds * 1000);
  const measured = completed - warmed;
  const seconds = elapsedMs(start) / 1000;
  stopping = true;
  await stopped;
  return { rate: measured / seconds, warmed, measured, seconds };
}

/** A noReply `Prompt` request with one text part of `bytes` bytes of prose (`seed` varies the words). */
export function noReplyPrompt(sessionId: string, bytes = 200, seed = 0) {
  return { sessionId, noReply: true, parts: [{ kind: { case: "text" as const, value: { text: prose(bytes, seed) } } }] };
}

/** A server child of the bench (a baseline); see {@link startBenchChild}. */
export interface BenchChild {
  url: string;
  /** SIGTERM and wait for the exit. */
  stop(): Promise<void>;
}

/**
 * Starts `node --import tsx bench/<script>` (run from the repository, where `--import tsx`
 * resolves) with `env` added to the bench's environment, and resolves with the URL of its
 * `listening on <url>` line on stdout. Rejects if it exits first.
 */
export async function startBenchChild(script: string, env: NodeJS.ProcessEnv = {}): Promise<BenchChild> {
  const child = spawn(process.execPath, ["--import", "tsx", path.join(import.meta.dirname, script)], {
    cwd: path.resolve(import.meta.dirname, ".."),
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = once(child, "exit");
  let out = "";
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout!.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const match = /listening on (http:\/\/\S+)/.exec(out);
      if (match) resolve(match[1]!);
    });
    child.once("exit", (code) => reject(new Error(`bench child ${script} exited (${code}) before listening`)));
  });
  return {
    url,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      await exited;
    },
  };
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Text of about `bytes` bytes of prose (ASCII). */
export function prose(bytes: number, seed = 0): string {
  const words = ["ledger", "session", "prompt", "stream", "replica", "part", "message", "event", "commit", "order", "durable", "agent"];
  let out = "";
  for (let i = seed; out.length < bytes; i++) out += `${words[i % words.length]} `;
  return out.slice(0, bytes).trimEnd();
}
