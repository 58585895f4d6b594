/** A stream the CLI writes to: the process's stdout/stderr, or a test's buffer. */
export interface CliOutput {
  write(text: string): unknown;
  /** Whether it is a terminal (a spinner is drawn and reasoning dimmed only then). */
  readonly isTTY?: boolean;
  readonly columns?: number;
}

/**
 * What the CLI takes from its process: output streams, working directory, environment,
 * signals and exit. `processIo()` is the real process; tests run `main` in-process with
 * buffers, a temp directory and their own environment (see test/support/cli.ts).
 */
export interface CliIo {
  stdout: CliOutput;
  stderr: CliOutput;
  /** Relative paths (`--file`, `--dir`, `--db`, `--config`, ./ledger.json) resolve against it. */
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** Calls `handler` on each `signal` until the returned function is called. */
  onSignal(signal: "SIGINT" | "SIGTERM", handler: () => void): () => void;
  /** Ends the process now with `code` (in-process runs record it instead; `main` still returns the code). */
  exit(code: number): void;
}

/** The real process. */
export function processIo(): CliIo {
  return {
    stdout: process.stdout,
    stderr: process.stderr,
    cwd: process.cwd(),
    env: process.env,
    onSignal(signal, handler) {
      process.on(signal, handler);
      return () => void process.off(signal, handler);
    },
    exit: (code) => process.exit(code),
  };
}
