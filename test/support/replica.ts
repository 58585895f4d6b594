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

/**
 * Writes `ledger.json` (or `file`) in `dir`: provider `local` (openai-compatible) at `baseURL`,
 * model `local/qwen`, fast retries, then the keys of `extra` (replacing those). Returns the file's path.
 */
export async function writeLedgerConfig(
  dir: string,
  baseURL: string,
  extra: Record<string, unknown> = {},
  file = "ledger.json",
): Promise<string> {
  const config = {
    model: "local/qwen",
    provider: {
      local: compatibleProvider(baseURL, { qwen: { name: "Qwen (fake)" } }, "test"),
    },
    retry: { attempts: 1, initial_ms: 10, max_ms: 20 },
    ...extra,
  };
  const target = path.join(dir, file);
  await writeFile(target, `${JSON.stringify(config, null, 2)}\n`);
  return target;
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

/** Replicas on one Postgres database, with what a multi-replica test needs around them; see {@link startReplicas}. */
export interface ReplicaSet {
  /** The replicas' working directory (a new temp dir): holds their `ledger.json`, and serves as a session directory. */
  dir: string;
  /** The new Postgres test database the replicas use. */
  database: TestDatabase;
  /** The model endpoint in the replicas' `ledger.json`; {@link ReplicaSet.freshModel} points it at a new fake. */
  proxy: ModelProxy;
  /** A plain pg client on the database, for checks straight from the tables. */
  sql: pg.Client;
  /** The replicas started, in the order of `options.replicas` (the first one ran the migrations). */
  replicas: Replica[];
  /** Starts one more replica on the same database, in `dir` (its spec as in `options.replicas`; the set's `env` applies first). */
  add(spec: ReplicaSpec): Promise<Replica>;
  /** Closes the fake model server of the previous call (if any) and puts a new one behind `proxy`. */
  freshModel(): Promise<FakeOpenAI>;
  /** The fake model server behind `proxy` since the last `freshModel()`; throws before the first. */
  model(): FakeOpenAI;
  /** Kills every replica still running (`killReplicas`), closes the pg client and the servers, drops the database and removes `dir`. */
  close(): Promise<void>;
}

/** One replica of a {@link ReplicaSet}: its name, and what it gets on top of the set's `env` and `ledger.json`. */
export interface ReplicaSpec {
  name: string;
  /** Added to the set's `env` for this replica only (e.g. its own `LEDGER_NATS_URL`). */
  env?: NodeJS.ProcessEnv;
  /** Extra `ledger serve` arguments (e.g. `["--config", file]` for a config of its own). */
  serveArgs?: string[];
}

/**
 * Starts `options.replicas`, the first alone, then the others together (each up to `timeoutMs`; `env` added to every
 * replica's environment, then the replica's own) on a new Postgres test database, in a new temp
 * dir (`prefix`) whose `ledger.json` points the model at a {@link startModelProxy} proxy (see
 * {@link writeLedgerConfig}, `config` added to it); no fake model is behind it until
 * `freshModel()`. What started before a failure is closed again, and the failure rethrown.
 */
export async function startReplicas(options: {
  prefix: string;
  replicas: ReplicaSpec[];
  timeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  /** More ledger.json keys for every replica (e.g. `{ events: { catch_up_ms: 0 } }`). */
  config?: Record<string, unknown>;
}): Promise<ReplicaSet> {
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
    const cwd = await realpath(await mkdtemp(path.join(os.tmpdir(), options.prefix)));
    dir = cwd;
    proxy = await startModelProxy();
    await writeLedgerConfig(cwd, proxy.url, options.config);
    const url = (database = await createTestDatabase("postgres")).url!;
    const add = (spec: ReplicaSpec) =>
      startReplica({ ...spec, cwd, databaseUrl: url, timeoutMs: options.timeoutMs, env: { ...options.env, ...spec.env } });
    // The first one runs the migrations; the others then start together.
    const [first, ...rest] = options.replicas;
    const replicas: Replica[] = first ? [await add(first)] : [];
    replicas.push(...(await Promise.all(rest.map(add))));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    sql = client;
    const target = proxy;
    return {
      dir,
      database,
      proxy,
      sql,
      replicas,
      add,
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

/** Two replicas on one Postgres database: a {@link ReplicaSet} of A and B; see {@link startReplicaPair}. */
export interface ReplicaPair extends ReplicaSet {
  /** Started first (it runs the migrations). */
  A: Replica;
  B: Replica;
}

/**
 * Starts replicas A, then B (each up to `timeoutMs`, `env` added to their environment) on a
 * new Postgres test database: {@link startReplicas} with those two.
 */
export async function startReplicaPair(options: {
  prefix: string;
  timeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  /** More ledger.json keys for both replicas (e.g. `{ events: { catch_up_ms: 0 } }`). */
  config?: Record<string, unknown>;
}): Promise<ReplicaPair> {
  const set = await startReplicas({ ...options, replicas: [{ name: "A" }, { name: "B" }] });
  return { ...set, A: set.replicas[0]!, B: set.replicas[1]! };
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
