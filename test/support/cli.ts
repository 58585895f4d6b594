import { spawn, type ChildProcess } from "node:child_process";
import { EventEmitter } from "node:events";
import path from "node:path";
import type { CliIo } from "../../src/cli/io.js";
import { main } from "../../src/cli/program.js";
import { waitFor } from "./wait.js";

/** The `ledger` executable (runs the TypeScript sources through tsx). */
export const LEDGER_BIN = path.resolve(import.meta.dirname, "../../bin/ledger.js");

/** How a `ledger` run ended and what it printed. */
export interface CliRun {
  /** The exit code (null when a spawned process was ended by a signal). */
  code: number | null;
  signal?: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Where a run happens: its working directory and its whole environment. */
export interface CliPlace {
  cwd: string;
  env: NodeJS.ProcessEnv;
}

/** A `ledger` command running in this process; see {@link startCli}. */
export interface InProcessCli {
  /** Resolves when `main` returns. */
  done: Promise<CliRun>;
  stdout(): string;
  stderr(): string;
  /** Resolves with the first match of `pattern` in stdout so far (waits for it; rejects if the run ends first). */
  waitForStdout(pattern: RegExp): Promise<RegExpExecArray>;
  /** Delivers `signal` to the handlers the command registered (as Ctrl-C would to the process). */
  signal(signal: "SIGINT" | "SIGTERM"): void;
}

/**
 * Runs `ledger <args>` in this process: the CLI's own `main` with output into buffers, `place.cwd`
 * as its working directory and `place.env` as its environment (nothing read from this process's).
 * `code` is what `main` returned; a call of `io.exit` must agree with it (checked). `onStderr`
 * sees each write to stderr as it happens, `onExit` each call of `io.exit`.
 */
export function startCli(
  args: string[],
  place: CliPlace,
  options: { onStderr?: (text: string) => void; onExit?: (code: number) => void } = {},
): InProcessCli {
  let stdout = "";
  let stderr = "";
  let exited: number | undefined;
  const signals = new EventEmitter();
  const io: CliIo = {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: {
      write: (text: string) => {
        stderr += text;
        options.onStderr?.(text);
      },
    },
    cwd: place.cwd,
    env: place.env,
    onSignal(signal, handler) {
      signals.on(signal, handler);
      return () => void signals.off(signal, handler);
    },
    exit: (code) => {
      options.onExit?.(code);
      exited ??= code;
    },
  };
  let ended = false;
  const done = main(args, io).then((code) => {
    ended = true;
    if (exited !== undefined && exited !== code) throw new Error(`ledger ${args.join(" ")}: exit(${exited}) but main returned ${code}`);
    return { code, stdout, stderr };
  });
  return {
    done,
    stdout: () => stdout,
    stderr: () => stderr,
    waitForStdout: (pattern) =>
      waitFor(`ledger ${args.join(" ")} to print ${pattern}`, () => {
        const match = pattern.exec(stdout);
        if (!match && ended) throw new Error(`ended before printing ${pattern}:\n${stdout}\n${stderr}`);
        return match ?? undefined;
      }),
    signal: (signal) => void signals.emit(signal),
  };
}

/** Runs `ledger <args>` in this process to completion (see {@link startCli}). */
export function runCli(args: string[], place: CliPlace, options: { onStderr?: (text: string) => void } = {}): Promise<CliRun> {
  return startCli(args, place, options).done;
}

/** Spawns `node bin/ledger.js <args>` (a real process, for the end-to-end tests) in `place`. */
export function spawnCli(args: string[], place: CliPlace): ChildProcess {
  return spawn(process.execPath, [LEDGER_BIN, ...args], { cwd: place.cwd, env: place.env, stdio: ["ignore", "pipe", "pipe"] });
}

/** Collects a spawned child's output until it exits. */
export function finished(child: ChildProcess): Promise<CliRun> {
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

/** Resolves with the first match of `pattern` in a spawned child's stdout; rejects if it exits first (`exited`: its {@link finished}). */
export function waitForOutput(child: ChildProcess, pattern: RegExp, exited: Promise<CliRun>): Promise<RegExpExecArray> {
  return new Promise((resolve, reject) => {
    let seen = "";
    const onData = (chunk: Buffer | string) => {
      seen += String(chunk);
      const match = pattern.exec(seen);
      if (!match) return;
      child.stdout!.off("data", onData);
      resolve(match);
    };
    child.stdout!.on("data", onData);
    void exited.then((run) => reject(new Error(`exited (${run.code}) before printing ${pattern}:\n${run.stdout}\n${run.stderr}`)));
  });
}
