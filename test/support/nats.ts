/**
 * The machine's NATS server for tests of the NATS relay: where it is, whether it answers, and
 * a loopback port where nothing listens (NATS "down").
 */
import net from "node:net";

/** The NATS server the tests use: `TEST_NATS_URL`, default `nats://127.0.0.1:4222`. */
export const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222";

/**
 * Whether a TCP connection to {@link NATS_URL} succeeds within 1 s. With
 * `LEDGER_NATS_REQUIRED=1` an unreachable server throws instead (CI must not skip silently);
 * otherwise the caller skips its tests and prints why ({@link skipMessage}).
 */
export async function natsReachable(): Promise<boolean> {
  const url = new URL(NATS_URL);
  const up = await new Promise<boolean>((resolve) => {
    const socket = net.connect({ host: url.hostname, port: Number(url.port || 4222), timeout: 1000 });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once("connect", () => done(true));
    socket.once("timeout", () => done(false));
    socket.once("error", () => done(false));
  });
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
