import { mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { finished, spawnCli, waitForOutput, type CliRun } from "./cli.js";
import { createTestDatabase } from "./db.js";

/** A real `ledger serve` process (bin/ledger.js, dist/) on a loopback port; see {@link spawnServe}. */
export interface ServeProcess {
  /** What tests read from a ledger: its URL (as printed on the listening line). */
  ledger: { url: string };
  /** A Connect client (HTTP/1.1, JSON) of the server. */
  client: Client<typeof SessionService>;
  /** A fresh temporary directory (resolved), the server's working directory: the one tests give new sessions. */
  dir: string;
  /** What the process wrote on stderr so far. */
  stderr(): string;
  /**
   * Resolves with the first match of `pattern` in stderr, waiting for it (stderr and stdout are
   * separate pipes: a line written to stderr before or right after the listening line may arrive
   * later). Rejects when the process exits without it or after `timeoutMs` (ms, default 10000).
   */
  waitForStderr(pattern: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  /** SIGTERM, then waits for the exit; drops the database and removes `dir`. Resolves with how it ended. */
  close(): Promise<CliRun>;
}

/**
 * Spawns `ledger serve --port 0` with `config` (the raw ledger.json object, written to a file of
 * its own), a new test database (engine from `LEDGER_TEST_DB`: Postgres through DATABASE_URL, or
 * an embedded `:memory:` one) and `env` added to this process's environment (without
 * NODE_OPTIONS, LEDGER_CONFIG and DATABASE_URL); resolves once it prints its listening line.
 * Rejects when it exits first.
 */
export async function spawnServe(config: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): Promise<ServeProcess> {
  const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-serve-")));
  const configDir = await mkdtemp(path.join(os.tmpdir(), "ledger-serve-config-"));
  const configFile = path.join(configDir, "ledger.json");
  await writeFile(configFile, JSON.stringify(config));
  const database = await createTestDatabase();
  const childEnv: NodeJS.ProcessEnv = { ...process.env, LEDGER_LOG_LEVEL: "warn", ...env };
  for (const name of ["NODE_OPTIONS", "LEDGER_CONFIG", "DATABASE_URL"]) delete childEnv[name];
  if (database.url) childEnv.DATABASE_URL = database.url;
  const child = spawnCli(["serve", "--port", "0", "--db", ":memory:", "--config", configFile], { cwd: dir, env: childEnv });
  let stderr = "";
  const stderrWaiters = new Set<() => void>();
  child.stderr!.on("data", (chunk: Buffer | string) => {
    stderr += String(chunk);
    for (const wake of stderrWaiters) wake();
  });
  const exited = finished(child);
  const cleanUp = async () => {
    await database.drop();
    for (const d of [dir, configDir]) await rm(d, { recursive: true, force: true });
  };
  let url: string;
  try {
    url = (await waitForOutput(child, /^session-ledger listening on (\S+)\n/, exited))[1]!;
  } catch (error) {
    await exited;
    await cleanUp();
    throw error;
  }
  return {
    ledger: { url },
    client: createClient(SessionService, createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: false })),
    dir,
    stderr: () => stderr,
    waitForStderr: (pattern, timeoutMs = 10_000) =>
      new Promise<RegExpExecArray>((resolve, reject) => {
        const done = (settle: () => void) => {
          stderrWaiters.delete(check);
          clearTimeout(timer);
          settle();
        };
        const check = () => {
          const match = pattern.exec(stderr);
          if (match) done(() => resolve(match));
        };
        const timer = setTimeout(
          () => done(() => reject(new Error(`no ${pattern} on stderr within ${timeoutMs} ms; stderr so far:\n${stderr}`))),
          timeoutMs,
        );
        stderrWaiters.add(check);
        void exited.then(() => done(() => reject(new Error(`exited without ${pattern} on stderr; stderr:\n${stderr}`))));
        check();
      }),
    async close() {
      if (child.exitCode === null) child.kill("SIGTERM");
      const run = await exited;
      await cleanUp();
      return run;
    },
  };
}
