/**
 * NATS for tests of the NATS relay: the machine's server (where it is, whether it answers), a
 * loopback port where nothing listens (NATS "down"), and `nats-server` children a test starts
 * and kills itself: one server ({@link startNatsServer}) or a routed cluster of them
 * ({@link startNatsCluster}).
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import net from "node:net";

/** The NATS server the tests use: `TEST_NATS_URL`, default `nats://127.0.0.1:4222`. */
export const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222";

/**
 * Whether a TCP connection to {@link NATS_URL} succeeds within 1 s. With
 * `LEDGER_NATS_REQUIRED=1` an unreachable server throws instead (CI must not skip silently);
 * otherwise the caller skips its tests and prints why ({@link skipMessage}).
 */
export async function natsReachable(): Promise<boolean> {
  const up = await reachable(NATS_URL);
  if (!up && process.env.LEDGER_NATS_REQUIRED === "1") {
    throw new Error(`NATS is not reachable at ${NATS_URL} and LEDGER_NATS_REQUIRED=1: start nats-server (with -js) or set TEST_NATS_URL`);
  }
  if (!up) process.stderr.write(skipMessage());
  return up;
}

/** The line printed when NATS tests are skipped. */
export function skipMessage(): string {
  return `NATS tests skipped: nothing answers at ${NATS_URL} (start nats-server, set TEST_NATS_URL, or LEDGER_NATS_REQUIRED=1 to fail instead)\n`;
}

/** A `nats://127.0.0.1:PORT` URL where nothing listens (a port just bound and released). */
export async function closedNatsUrl(): Promise<string> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `nats://127.0.0.1:${port}`;
}

/** A `nats-server` child on a loopback port; see {@link startNatsServer}. */
export interface NatsServer {
  url: string;
  /** `http://127.0.0.1:MPORT` of the monitoring endpoint (`/connz`, `/varz`), when started with `monitor`. */
  monitorUrl?: string;
  /** The server's process id. */
  pid: number;
  /** Stops the server (SIGKILL: as if the node died) and waits for its exit. */
  kill(): Promise<void>;
}

let binary: string | undefined;
/** Debian's `nats-server` binary: `nats-server` on PATH, else `/usr/sbin/nats-server` (not on a non-root PATH). */
function natsServerBin(): string {
  binary ??=
    spawnSync("nats-server", ["--version"], { stdio: "ignore" }).status !== 0 && existsSync("/usr/sbin/nats-server")
      ? "/usr/sbin/nats-server"
      : "nats-server";
  return binary;
}

/** Whether Debian's `nats-server` binary is installed (tests that start their own server need it). */
export function hasNatsServer(): boolean {
  return spawnSync(natsServerBin(), ["--version"], { stdio: "ignore" }).status === 0;
}

/**
 * {@link hasNatsServer}, for tests that start their own servers: with `LEDGER_NATS_REQUIRED=1`
 * a missing binary throws instead (CI must not skip silently); otherwise the caller skips and
 * a line on stderr says why.
 */
export function natsServerInstalled(): boolean {
  const installed = hasNatsServer();
  if (!installed && process.env.LEDGER_NATS_REQUIRED === "1") {
    throw new Error("nats-server is not installed and LEDGER_NATS_REQUIRED=1: apt-get install nats-server");
  }
  if (!installed) process.stderr.write("NATS cluster tests skipped: no nats-server binary (apt-get install nats-server)\n");
  return installed;
}

/**
 * Starts `nats-server -a 127.0.0.1 -p <port>` (default: a free port) and resolves once the port
 * accepts connections (up to 10 s; rejects with its output otherwise). With `monitor` it also
 * serves HTTP monitoring (`-m`) on a free loopback port, at `monitorUrl` (ready when resolved).
 */
export async function startNatsServer(port?: number, options: { monitor?: boolean } = {}): Promise<NatsServer> {
  const url = port ? `nats://127.0.0.1:${port}` : await closedNatsUrl();
  const monitorUrl = options.monitor ? (await closedNatsUrl()).replace("nats:", "http:") : undefined;
  const args = ["-a", "127.0.0.1", "-p", new URL(url).port, ...(monitorUrl ? ["-m", new URL(monitorUrl).port] : [])];
  const child = spawn(natsServerBin(), args, { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
  const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
  const deadline = Date.now() + 10_000;
  while (!(await reachable(url)) || (monitorUrl && !(await reachable(monitorUrl)))) {
    if (Date.now() > deadline || child.exitCode !== null) {
      child.kill("SIGKILL");
      throw new Error(`nats-server did not start on ${url}:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    ...(monitorUrl ? { monitorUrl } : {}),
    pid: child.pid!,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}

function reachable(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect({ host: hostname, port: Number(port), timeout: 1000 });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once("connect", () => done(true));
    socket.once("timeout", () => done(false));
    socket.once("error", () => done(false));
  });
}

/** One client connection as a NATS server's monitoring reports it (`/connz?subs=1`; the fields tests read). */
export interface NatsConnectionInfo {
  /** The server's id for the connection (unique on that node). */
  cid: number;
  /** The client's connection name (`bus.nats.name`), if it sent one. */
  name?: string;
  /** Messages the server received from this client (its publishes). */
  in_msgs: number;
  /** Messages the server delivered to this client (on its subscriptions). */
  out_msgs: number;
  /** The subjects this client is subscribed to now. */
  subscriptions_list?: string[];
}

/** One node of a {@link NatsCluster}. */
export interface NatsNode {
  /** Client URL, `nats://127.0.0.1:PORT`. */
  url: string;
  /** Monitoring base URL, `http://127.0.0.1:PORT` (`/varz`, `/connz`, `/routez`). */
  monitorUrl: string;
  /** True while the node's process runs and is not paused (false once killed or dead, until a restart). */
  alive(): boolean;
  /** The node's client connections now (`/connz?subs=1`); rejects when the node is down. */
  connections(): Promise<NatsConnectionInfo[]>;
  /** Subjects the node's routes have interest in now (`/routez?subs=1`): what the other nodes' clients subscribe to. */
  routedSubjects(): Promise<string[]>;
  /** SIGKILLs the node (as if it died) and waits for its exit; a no-op while it is down. */
  kill(): Promise<void>;
  /**
   * SIGSTOPs the node: it stays "up" for the kernel (its sockets accept and buffer, nothing is
   * reset) but answers nothing, like a hung host or a network partition; `resume()` (SIGCONT)
   * undoes it. `kill()` works on a paused node.
   */
  pause(): void;
  /** SIGCONTs a paused node. */
  resume(): void;
}

/** A routed cluster of `nats-server` children on loopback; see {@link startNatsCluster}. */
export interface NatsCluster {
  /** The nodes, in start order; each client URL is in `urls` at the same index. */
  nodes: NatsNode[];
  /** Every node's client URL, in node order. */
  urls: string[];
  /**
   * The node `name` is connected to now and its connection there (by connection name, over the
   * nodes alive), or undefined when it is connected nowhere; throws when several connections
   * have that name or a live node's monitoring does not answer.
   */
  locate(name: string): Promise<{ node: NatsNode; connection: NatsConnectionInfo } | undefined>;
  /**
   * Resumes the paused nodes, starts again, on their old ports, the nodes that are down, and
   * waits as {@link startNatsCluster} does for the whole cluster (rejects with the output on a timeout).
   */
  restart(options?: { timeoutMs?: number }): Promise<void>;
  /** Kills every node still running and waits for their exits. */
  close(): Promise<void>;
}

/**
 * Starts a NATS cluster of `size` nodes (default 3) on free loopback ports: each node is
 * `nats-server -a 127.0.0.1 -p P -m M --cluster nats://127.0.0.1:C --routes <the others'
 * cluster URLs> --cluster_name <name>`. Resolves once every node accepts clients and reports
 * `size - 1` routes on `/routez` (so a subscription on one node reaches the others), within
 * `timeoutMs` (default 15 s); otherwise kills what started and rejects with the nodes' output.
 * Clients of one node learn the others' client URLs from its INFO (`connect_urls`).
 */
export async function startNatsCluster(options: { size?: number; name?: string; timeoutMs?: number } = {}): Promise<NatsCluster> {
  const size = options.size ?? 3;
  const ports = await freePorts(size * 3);
  const nodes = Array.from({ length: size }, (_, i) => {
    const [client, cluster, monitorPort] = ports.slice(3 * i, 3 * i + 3) as [number, number, number];
    const routes = Array.from({ length: size }, (_, j) => ports[3 * j + 1]).filter((_, j) => j !== i);
    const args = ["-a", "127.0.0.1", "-p", String(client), "-m", String(monitorPort), "--cluster", `nats://127.0.0.1:${cluster}`];
    args.push("--routes", routes.map((port) => `nats://127.0.0.1:${port}`).join(","), "--cluster_name", options.name ?? "ledger-test");
    return clusterNode(args, `nats://127.0.0.1:${client}`, `http://127.0.0.1:${monitorPort}`);
  });
  const close = async () => {
    await Promise.all(nodes.map((node) => node.kill()));
  };
  const formed = async (timeoutMs = options.timeoutMs ?? 15_000) => {
    const deadline = Date.now() + timeoutMs;
    for (const node of nodes) {
      for (;;) {
        const routes = await monitor(node.monitorUrl, "/routez").then(
          (r) => (r as { num_routes: number }).num_routes,
          () => -1,
        );
        if (routes === size - 1 && (await reachable(node.url))) break;
        if (Date.now() > deadline || !nodes.every((n) => n.alive())) {
          const output = nodes.map((n) => n.output()).join("\n---\n");
          await close();
          throw new Error(`NATS cluster did not form (${node.url}: ${routes} routes):\n${output}`);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  };
  for (const node of nodes) node.start();
  await formed();
  return {
    nodes,
    urls: nodes.map((node) => node.url),
    async locate(name) {
      const found: Array<{ node: NatsNode; connection: NatsConnectionInfo }> = [];
      for (const node of nodes.filter((n) => n.alive())) {
        for (const connection of await node.connections()) if (connection.name === name) found.push({ node, connection });
      }
      if (found.length > 1) throw new Error(`${found.length} NATS connections named ${name}`);
      return found[0];
    },
    async restart(restartOptions = {}) {
      for (const node of nodes) if (node.running()) node.resume();
      for (const node of nodes) if (!node.running()) node.start();
      await formed(restartOptions.timeoutMs);
    },
    close,
  };
}

/** A node of a cluster: `nats-server args` (re)started by `start()`, with its output kept for errors; `running()` includes paused. */
function clusterNode(args: string[], url: string, monitorUrl: string): NatsNode & { start(): void; running(): boolean; output(): string } {
  let child: ChildProcess | undefined;
  let exited = Promise.resolve();
  let output = "";
  let paused = false;
  const running = () => child !== undefined && child.exitCode === null && child.signalCode === null;
  const alive = () => running() && !paused;
  return {
    url,
    monitorUrl,
    alive,
    running,
    output: () => output,
    start() {
      paused = false;
      const started = spawn(natsServerBin(), args, { stdio: ["ignore", "pipe", "pipe"] });
      started.stdout!.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
      started.stderr!.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
      exited = new Promise<void>((resolve) => started.once("close", () => resolve()));
      child = started;
    },
    async connections() {
      const connz = (await monitor(monitorUrl, "/connz?subs=1")) as { connections: NatsConnectionInfo[] | null };
      return connz.connections ?? [];
    },
    async routedSubjects() {
      const routez = (await monitor(monitorUrl, "/routez?subs=1")) as { routes: Array<{ subscriptions_list?: string[] }> | null };
      return (routez.routes ?? []).flatMap((r) => r.subscriptions_list ?? []);
    },
    async kill() {
      if (running()) child!.kill("SIGKILL");
      paused = false;
      await exited;
    },
    pause() {
      if (running()) child!.kill("SIGSTOP");
      paused = true;
    },
    resume() {
      if (running()) child!.kill("SIGCONT");
      paused = false;
    },
  };
}

/** GETs a monitoring endpoint as JSON (2 s timeout); rejects on a failure or a non-2xx answer. */
async function monitor(base: string, path: string): Promise<unknown> {
  const res = await fetch(`${base}${path}`, { signal: AbortSignal.timeout(2000) });
  if (!res.ok) throw new Error(`${base}${path}: HTTP ${res.status}`);
  return res.json();
}

/** `count` distinct free loopback ports (bound together, then released). */
async function freePorts(count: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from({ length: count }, async () => {
      const server = net.createServer();
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      return server;
    }),
  );
  const ports = servers.map((server) => (server.address() as net.AddressInfo).port);
  await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  return ports;
}
