/**
 * Real `ledger serve` child processes sharing one Postgres database, for multi-replica tests
 * (or one child on its own embedded PGlite database, for tests that measure a server process).
 *
 * Each replica is `node bin/ledger.js serve --port 0` with `DATABASE_URL` set, run in a working
 * directory that holds its `ledger.json`; it is ready once it prints
 * `session-ledger listening on http://HOST:PORT`. Every started child is remembered so
 * `killReplicas()` (in `afterAll`) can SIGKILL whatever a failed test left running.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import pg from "pg";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { createTestDatabase, type TestDatabase } from "./db.js";
import { compatibleProvider } from "./mock-models.js";
import { startModelProxy, type ModelProxy } from "./model-proxy.js";
import { startFakeOpenAI, type FakeOpenAI } from "./openai-server.js";

const BIN = path.resolve(import.meta.dirname, "../../bin/ledger.js");
const LISTENING = /^session-ledger listening on (http:\/\/\S+)$/m;

/** How a child ended. */
export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A running `ledger serve` child and clients talking to it. */
export interface Replica {
  name: string;
  url: string;
  child: ChildProcess;
  pid: number;
  /** Connect protocol, HTTP/1.1, JSON. */
  connect: Client<typeof SessionService>;
  /** gRPC over h2c. */
  grpc: Client<typeof SessionService>;
  /** Everything the child wrote to stderr so far. */
  stderr(): string;
  /** Resolves when the child has exited (and its stdio closed). */
  exited: Promise<Exit>;
  /** True once the child has exited. */
  hasExited(): boolean;
  /** SIGTERM, then waits for the exit; SIGKILL after `timeoutMs` (the result then says so). */
  stop(timeoutMs?: number): Promise<Exit & { forced: boolean }>;
  /** `kill -9` and wait for the exit. */
  kill9(): Promise<Exit>;
}

const started = new Set<ChildProcess>();

/** Writes `ledger.json` in `dir`: provider `local` (openai-compatible) at `baseURL`, model `local/qwen`, fast retries. */
export async function writeLedgerConfig(dir: string, baseURL: string, extra: Record<string, unknown> = {}): Promise<void> {
  const config = {
    model: "local/qwen",
    provider: {
      local: compatibleProvider(baseURL, { qwen: { name: "Qwen (fake)" } }, "test"),
    },
    retry: { attempts: 1, initial_ms: 10, max_ms: 20 },
    ...extra,
  };
  await writeFile(path.join(dir, "ledger.json"), `${JSON.stringify(config, null, 2)}\n`);
}

/**
 * Starts `ledger serve --port 0` in `cwd` against `databaseUrl` and waits (up to `timeoutMs`)
 * for its listening line. Without `databaseUrl` the child uses its embedded PGlite database
 * (`serveArgs: ["--db", dir]` picks where). `env` adds to (or overrides) the test's environment,
 * e.g. `{ LEDGER_LOG_LEVEL: "info" }`; `nodeArgs` go to node before the script (e.g.
 * `["--max-old-space-size=384"]`). Rejects with the child's stderr if it exits or times out first.
 */
export async function startReplica(options: {
  name: string;
  cwd: string;
  databaseUrl?: string;
  timeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  nodeArgs?: string[];
  serveArgs?: string[];
}): Promise<Replica> {
  const env: NodeJS.ProcessEnv = { ...process.env, ...options.env, DATABASE_URL: options.databaseUrl };
  if (options.databaseUrl === undefined) delete env.DATABASE_URL;
  delete env.LEDGER_CONFIG;
  delete env.LEDGER_TOKEN;
  const args = [...(options.nodeArgs ?? []), BIN, "serve", "--port", "0", ...(options.serveArgs ?? [])];
  const child = spawn(process.execPath, args, { cwd: options.cwd, env, stdio: ["ignore", "pipe", "pipe"] });
  started.add(child);
  let stdout = "";
  let stderr = "";
  let done = false;
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<Exit>((resolve) => {
    child.once("close", (code, signal) => {
      done = true;
      started.delete(child);
      resolve({ code, signal });
    });
  });

  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      child.kill("SIGKILL");
      reject(new Error(`replica ${options.name} did not start within ${options.timeoutMs ?? 60_000} ms; stderr:\n${stderr}`));
    }, options.timeoutMs ?? 60_000);
    const onData = () => {
      const m = LISTENING.exec(stdout);
      if (!m) return;
      cleanup();
      resolve(m[1]!);
    };
    const onExit = () => {
      cleanup();
      reject(new Error(`replica ${options.name} exited before listening; stdout:\n${stdout}\nstderr:\n${stderr}`));
    };
    const cleanup = () => {
      clearTimeout(timer);
      child.stdout!.off("data", onData);
      child.off("exit", onExit);
    };
    child.stdout!.on("data", onData);
    child.once("exit", onExit);
  });

  const replica: Replica = {
    name: options.name,
    url,
    child,
    pid: child.pid!,
    connect: createClient(SessionService, createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: false })),
    grpc: createClient(SessionService, createGrpcTransport({ baseUrl: url })),
    stderr: () => stderr,
    exited,
    hasExited: () => done,
    async stop(timeoutMs = 20_000) {
      if (done) return { ...(await exited), forced: false };
      child.kill("SIGTERM");
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), timeoutMs)));
      const result = await Promise.race([exited, timeout]);
      clearTimeout(timer);
      if (result !== "timeout") return { ...result, forced: false };
      child.kill("SIGKILL");
      return { ...(await exited), forced: true };
    },
    async kill9() {
      if (!done) child.kill("SIGKILL");
      return exited;
    },
  };
  return replica;
}

/** Two replicas on one Postgres database, with what a multi-replica test needs around them; see {@link startReplicaPair}. */
export interface ReplicaPair {
  /** The replicas' working directory (a new temp dir): holds their `ledger.json`, and serves as a session directory. */
  dir: string;
  /** The new Postgres test database both replicas use. */
  database: TestDatabase;
  /** The model endpoint in the replicas' `ledger.json`; {@link ReplicaPair.freshModel} points it at a new fake. */
  proxy: ModelProxy;
  /** A plain pg client on the database, for checks straight from the tables. */
  sql: pg.Client;
  /** Started first (it runs the migrations). */
  A: Replica;
  B: Replica;
  /** Closes the fake model server of the previous call (if any) and puts a new one behind `proxy`. */
  freshModel(): Promise<FakeOpenAI>;
  /** The fake model server behind `proxy` since the last `freshModel()`; throws before the first. */
  model(): FakeOpenAI;
  /** Kills every replica still running (`killReplicas`), closes the pg client and the servers, drops the database and removes `dir`. */
  close(): Promise<void>;
}

/**
 * Starts replicas A, then B (each up to `timeoutMs`, `env` added to their environment) on a
 * new Postgres test database, in a new temp dir (`prefix`) whose `ledger.json` points the model
 * at a {@link startModelProxy} proxy (see {@link writeLedgerConfig}); no fake model is behind it
 * until `freshModel()`. What started before a failure is closed again.
 */
export async function startReplicaPair(options: {
  prefix: string;
  timeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  /** More ledger.json keys for both replicas (e.g. `{ events: { catch_up_ms: 0 } }`). */
  config?: Record<string, unknown>;
}): Promise<ReplicaPair> {
  let dir: string | undefined;
  let proxy: ModelProxy | undefined;
  let database: TestDatabase | undefined;
  let sql: pg.Client | undefined;
  let fake: FakeOpenAI | undefined;
  const close = async () => {
    await killReplicas();
    await sql?.end().catch(() => {});
    await fake?.close();
    await proxy?.close();
    await database?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  };
  try {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), options.prefix)));
    proxy = await startModelProxy();
    await writeLedgerConfig(dir, proxy.url, options.config);
    database = await createTestDatabase("postgres");
    const start = { cwd: dir, databaseUrl: database.url!, timeoutMs: options.timeoutMs, env: options.env };
    const A = await startReplica({ name: "A", ...start });
    const B = await startReplica({ name: "B", ...start });
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    sql = client;
    const target = proxy;
    return {
      dir,
      database,
      proxy,
      sql,
      A,
      B,
      async freshModel() {
        await fake?.close();
        fake = await startFakeOpenAI();
        target.setTarget(fake.url);
        return fake;
      },
      model() {
        if (!fake) throw new Error("no fake OpenAI server: call freshModel() first");
        return fake;
      },
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

/** SIGKILLs every replica still running (for `afterAll` after a failed test) and waits for them. */
export async function killReplicas(): Promise<void> {
  const children = [...started];
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once("close", () => resolve());
          child.kill("SIGKILL");
        }),
    ),
  );
}
