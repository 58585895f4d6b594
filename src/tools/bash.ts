import { spawn } from "node:child_process";
import { z } from "zod";
import { READ_DEFAULT_LIMIT, READ_MAX_BYTES } from "../files/read-file.js";
import { ToolInputError, type ToolContext, type ToolDefinition, type ToolOutput } from "./tool-context.js";

/** Timeout of a command when the call gives none (ms). Follows OpenCode bash.ts. */
export const BASH_DEFAULT_TIMEOUT_MS = 2 * 60 * 1000;
/** Longest timeout a call may ask for (ms). Follows OpenCode bash.ts. */
export const BASH_MAX_TIMEOUT_MS = 10 * 60 * 1000;
/** Wait between SIGTERM and SIGKILL of the process group on abort or timeout (ms). */
const KILL_GRACE_MS = 200;
/** Environment variables of the server that commands never see (the database and the token). */
// The service's own settings and secrets never reach a command: every LEDGER_* variable (tokens,
// the JWT secret, NATS and pool settings), the database URLs, libpq's PG* and OpenTelemetry's
// OTEL_* (exporter headers may carry credentials).
const HIDDEN_ENV = /^(LEDGER_[A-Z0-9_]*|DATABASE_URL|TEST_DATABASE_URL|PG[A-Z]+|OTEL_[A-Z0-9_]*)$/;

/** Input of {@link bashTool}. Follows OpenCode bash.ts parameters. */
export interface BashInput {
  /** Run with `/bin/sh -c` in the session directory. */
  command: string;
  /** Milliseconds before the command's process group is killed; default 2 min, at most 10 min. */
  timeout?: number;
  /** What the command does, in 5-10 words (for the person approving it). */
  description?: string;
}

/** How a command ended; see {@link runCommand}. */
export interface CommandResult {
  /** stdout and stderr interleaved as they came, cut at the read limits. */
  output: string;
  /** Exit code, or null when a signal ended it. */
  exit: number | null;
  /** True when output beyond the read limits was dropped. */
  truncated: boolean;
  /** Bytes the command wrote in all. */
  bytes: number;
  timedOut: boolean;
  aborted: boolean;
}

/** The `bash` tool as the model sees it and {@link bashTool}. Follows OpenCode bash.ts. */
export const bashDefinition: ToolDefinition<BashInput> = {
  id: "bash",
  asks: true,
  changesFiles: true,
  description:
    "Run a shell command (/bin/sh -c) in the project directory and get its output (stdout and stderr, cut at 2000 lines or 50 KB) and exit code. Default timeout 2 minutes, at most 10 minutes.",
  inputSchema: z.object({
    command: z.string().describe("The command to run"),
    timeout: z.number().int().min(1).optional().describe("Timeout in milliseconds (default 120000, at most 600000)"),
    description: z.string().optional().describe("What the command does, in 5-10 words"),
  }),
  execute: bashTool,
};

/**
 * The model's `bash` tool (OpenCode bash.ts): asks permission `bash` with the command as the
 * pattern, then runs it with {@link runCommand}, reporting the output so far through
 * `ctx.progress` as it comes.
 *
 * @returns `output`: the command's output, plus a `<bash_metadata>` note when it was cut, timed
 *   out or exited non-zero; `title` the description (else the command); `metadata`
 *   `{ output, exit, description, truncated, timedOut }`.
 * @throws ToolInputError for an empty command or a timeout over 10 minutes; the denial or
 *   rejection from `ctx.ask`; the signal's reason when the call was aborted (the process group
 *   is killed first).
 */
export async function bashTool(input: BashInput, ctx: ToolContext): Promise<ToolOutput> {
  ctx.signal?.throwIfAborted();
  if (!input.command.trim()) throw new ToolInputError("command is required");
  if (input.timeout !== undefined && input.timeout > BASH_MAX_TIMEOUT_MS)
    throw new ToolInputError(`timeout ${input.timeout} ms is over the maximum of ${BASH_MAX_TIMEOUT_MS} ms`);
  await ctx.ask?.({
    permission: "bash",
    patterns: [input.command],
    metadata: { command: input.command, description: input.description ?? "" },
  });
  const description = input.description ?? "";
  const result = await runCommand(input.command, {
    cwd: ctx.directory,
    timeoutMs: input.timeout ?? BASH_DEFAULT_TIMEOUT_MS,
    signal: ctx.signal,
    onOutput: (output) => ctx.progress?.({ title: description || input.command, metadata: { output, description } }),
  });
  if (result.aborted) throw ctx.signal?.reason ?? new Error("aborted");
  return {
    title: description || input.command,
    output: formatResult(result, input.timeout ?? BASH_DEFAULT_TIMEOUT_MS),
    metadata: { output: result.output, exit: result.exit, description, truncated: result.truncated, timedOut: result.timedOut },
  };
}

/**
 * The text a model (or a Shell tool part) gets for a finished command: its output, then one
 * `<bash_metadata>` block with what else happened (cut output, timeout, abort, a non-zero exit).
 */
export function formatResult(result: CommandResult, timeoutMs: number): string {
  const notes: string[] = [];
  if (result.truncated)
    notes.push(`Output truncated: showed the first ${READ_DEFAULT_LIMIT} lines or ${READ_MAX_BYTES / 1024} KB of ${result.bytes} bytes.`);
  if (result.timedOut) notes.push(`bash tool terminated command after exceeding timeout ${timeoutMs} ms`);
  if (result.aborted) notes.push("User aborted the command");
  if (!result.timedOut && !result.aborted && result.exit !== 0) notes.push(`exit code: ${result.exit ?? "killed by a signal"}`);
  return notes.length > 0 ? `${result.output}\n\n<bash_metadata>\n${notes.join("\n")}\n</bash_metadata>` : result.output;
}

/**
 * Runs `command` with `/bin/sh -c` in `cwd`, in a process group of its own (`detached`), stdin
 * closed, with the server's environment minus the database URL and the token. Keeps the first
 * {@link READ_DEFAULT_LIMIT} lines / {@link READ_MAX_BYTES} bytes of stdout and stderr
 * (interleaved) and counts the rest. On timeout or abort the whole group gets SIGTERM, then
 * SIGKILL 200 ms later, so no process of it is left. Resolves when the shell has exited (output
 * a background process writes later is not waited for). Never rejects for the command's own
 * failure: a spawn error becomes output with exit 127.
 */
export function runCommand(
  command: string,
  options: { cwd: string; timeoutMs: number; signal?: AbortSignal; onOutput?: (output: string) => void },
): Promise<CommandResult> {
  return new Promise((resolve) => {
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !HIDDEN_ENV.test(k)));
    const child = spawn("/bin/sh", ["-c", command], { cwd: options.cwd, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    let lines = 0;
    let kept = 0;
    let bytes = 0;
    let truncated = false;
    let timedOut = false;
    let aborted = false;
    let settled = false;
    const take = (chunk: Buffer) => {
      bytes += chunk.length;
      if (truncated) return;
      let text = chunk.toString("utf8");
      const room = READ_MAX_BYTES - kept;
      if (chunk.length > room) {
        text = Buffer.from(text, "utf8")
          .subarray(0, room)
          .toString("utf8")
          .replace(/\uFFFD$/, "");
        truncated = true;
      }
      const parts = text.split("\n");
      if (lines + parts.length - 1 >= READ_DEFAULT_LIMIT) {
        text = parts.slice(0, READ_DEFAULT_LIMIT - lines).join("\n") + "\n";
        truncated = true;
      }
      lines += text.split("\n").length - 1;
      kept += Buffer.byteLength(text, "utf8");
      output += text;
      options.onOutput?.(output);
    };
    child.stdout!.on("data", take);
    child.stderr!.on("data", take);
    const killGroup = (signal: NodeJS.Signals) => {
      try {
        if (child.pid) process.kill(-child.pid, signal);
      } catch {
        // the group is gone already
      }
    };
    const stop = () => {
      killGroup("SIGTERM");
      setTimeout(() => killGroup("SIGKILL"), KILL_GRACE_MS).unref();
    };
    const timer = setTimeout(() => {
      timedOut = true;
      stop();
    }, options.timeoutMs);
    const onAbort = () => {
      aborted = true;
      stop();
    };
    if (options.signal?.aborted) onAbort();
    else options.signal?.addEventListener("abort", onAbort, { once: true });
    const finish = (exit: number | null, extra = "") => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
      if (timedOut || aborted) killGroup("SIGKILL");
      // Output still buffered in the pipes arrives before 'close'; give it a moment, no more.
      const done = () => {
        child.stdout!.destroy();
        child.stderr!.destroy();
        resolve({ output: output + extra, exit, truncated, bytes, timedOut, aborted });
      };
      if (child.stdout!.readableEnded && child.stderr!.readableEnded) done();
      else {
        const wait = setTimeout(done, 100);
        child.once("close", () => {
          clearTimeout(wait);
          done();
        });
      }
    };
    child.once("exit", (code) => finish(code));
    child.once("error", (error) => finish(127, String(error.message)));
  });
}
