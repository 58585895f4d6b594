/**
 * `ledger serve` child processes for the start-up and memory benchmarks: start one, wait for its
 * listening line, read its resident set size (RSS) from `/proc`, stop it.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { elapsedMs, now } from "./common.js";

const ROOT = path.resolve(import.meta.dirname, "..");
const LISTENING = /^session-ledger listening on (http:\/\/\S+)$/m;

/**
 * How to run the ledger: `built` is `node bin/ledger.js` (compiled `dist/`); `sources` is the
 * pre-issue-13 way, `node --import tsx src/cli/main.ts` (TypeScript compiled on load) with the
 * PGlite template off (`LEDGER_PGLITE_TEMPLATE=off`, so every new embedded database runs initdb).
 */
export type ServeMode = "built" | "sources";

/** A running `ledger serve` child. */
export interface ServeChild {
  url: string;
  pid: number;
  child: ChildProcess;
  /** Milliseconds from spawn until the listening line was read. */
  listenMs: number;
  /** Monotonic time (ns) of the spawn. */
  spawnedAt: bigint;
  stderr(): string;
  /** SIGTERM and wait for the exit (SIGKILL after 10 s). */
  stop(): Promise<void>;
}

/** Starts `ledger serve --port 0 ...args` in `cwd`; `env` adds to the bench's environment. */
export async function startServe(mode: ServeMode, cwd: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<ServeChild> {
  const base: NodeJS.ProcessEnv = { ...process.env, ...env };
  delete base.LEDGER_CONFIG;
  // The bench itself runs under tsx: its loader must not leak into a "built" child.
  delete base.NODE_OPTIONS;
  if (env.DATABASE_URL === undefined) delete base.DATABASE_URL;
  const argv =
    mode === "built"
      ? [path.join(ROOT, "bin/ledger.js"), "serve", "--port", "0", ...args]
      : [
          "--import",
          pathToFileURL(path.join(ROOT, "node_modules/tsx/dist/loader.mjs")).href,
          path.join(ROOT, "src/cli/main.ts"),
          "serve",
          "--port",
          "0",
          ...args,
        ];
  if (mode === "sources") base.LEDGER_PGLITE_TEMPLATE = "off";
  const spawnedAt = now();
  const child = spawn(process.execPath, argv, { cwd, env: base, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`ledger serve did not start within 60 s; stderr:\n${stderr}`));
    }, 60_000);
    const onData = () => {
      const m = LISTENING.exec(stdout);
      if (!m) return;
      clearTimeout(timer);
      child.stdout!.off("data", onData);
      resolve(m[1]!);
    };
    child.stdout!.on("data", onData);
    child.once("exit", () => {
      clearTimeout(timer);
      reject(new Error(`ledger serve exited before listening; stderr:\n${stderr}`));
    });
  });
  const listenMs = elapsedMs(spawnedAt);
  return {
    url,
    pid: child.pid!,
    child,
    listenMs,
    spawnedAt,
    stderr: () => stderr,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** The resident set size of process `pid` in MiB (`VmRSS` of `/proc/<pid>/status`; Linux only). */
export async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(status);
  if (!m) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]) / 1024;
}

/**
 * CPU time (ms, user + system) that process `pid` has used so far: `utime` + `stime` of
 * `/proc/<pid>/stat`, in clock ticks of 10 ms (Linux `USER_HZ` = 100). Throws when the process is gone.
 */
export async function cpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8");
  // Fields after the command name (which may hold spaces), from field 3 on.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/**
 * Write system calls (`write`, `writev`, ...: socket writes included) that process `pid` has
 * made so far: `syscw` of `/proc/<pid>/io` (Linux; readable for the bench's own children).
 * Throws when the process is gone.
 */
export async function writeSyscalls(pid: number): Promise<number> {
  const io = await readFile(`/proc/${pid}/io`, "utf8");
  const m = /^syscw:\s+(\d+)$/m.exec(io);
  if (!m) throw new Error(`no syscw in /proc/${pid}/io`);
  return Number(m[1]);
}
