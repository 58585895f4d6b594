/**
 * NATS for tests of the NATS relay: the machine's server (where it is, whether it answers), a
 * loopback port where nothing listens (NATS "down"), and `nats-server` children a test starts
 * and kills itself.
 */
import { spawn, spawnSync } from "node:child_process";
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

/** Whether Debian's `nats-server` binary is on PATH (tests that start their own server need it). */
export function hasNatsServer(): boolean {
  return spawnSync("nats-server", ["--version"], { stdio: "ignore" }).status === 0;
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
  const child = spawn("nats-server", args, { stdio: ["ignore", "pipe", "pipe"] });
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
