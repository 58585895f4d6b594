import { stat } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { create, toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { MessageWithPartsSchema, type MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { PartInputSchema, type PartInput } from "../../gen/ledger/v1/part_pb.js";
import { parseModelRef } from "../config/config.js";
import type { ClientOptions, Ledger } from "./client.js";
import type { CliIo } from "./io.js";
import { finalErrorText, formatMessage, terminalSafe } from "./print.js";
import { EXIT_ABORTED, EXIT_FAILED, EXIT_OK, PromptRenderer } from "./render.js";
import { parseResourceOption, resourceDraft } from "./mcp.js";
import { createSpinner } from "./spinner.js";
import { answerWhileRunning, permissionAsker, type PermissionPolicy } from "./permissions.js";

/** How long to wait for the stream to end after a successful Abort before giving up on it (ms). */
export const ABORT_GRACE_MS = 5_000;

/** The options of `ledger prompt`. */
export interface PromptOptions extends ClientOptions {
  file: string[];
  /** `--resource SERVER:URI`: MCP resources to attach (see `resourceDraft`). */
  resource: string[];
  session?: string;
  dir?: string;
  agent?: string;
  model?: string;
  reply: boolean;
  json?: boolean;
  /** `--yes`: allow permission requests once without asking. */
  yes?: boolean;
}

/** The fields `Prompt` and `PromptStream` share, as sent by the CLI. */
interface Request {
  sessionId: string;
  agent?: string;
  model?: { providerId: string; modelId: string };
  noReply: boolean;
  parts: PartInput[];
}

/**
 * `ledger prompt`: sends the text, files and MCP resources (`--resource SERVER:URI`, looked up
 * with `ListMcpResources` first: see `resourceDraft`), and returns the exit code. With `--no-reply`, or
 * when no model is configured (a note on stderr says how to add one, naming the default model
 * when the config names one without its provider), it stores the message and
 * prints it (unary `Prompt`). Otherwise it streams the run with `PromptStream` and renders it
 * live (see `PromptRenderer`), or, with `--json`, waits for the final assistant message
 * (unary `Prompt`) and prints it as one line of JSON (JSON Lines, like every `--json`). While
 * a run is going, the first Ctrl-C aborts it (Abort RPC) and waits for the end; a second one exits at once with {@link EXIT_ABORTED}.
 * A `model` that is not "provider/model" (no slash, or a blank side) throws `InvalidArgumentError`
 * on `--model` before any request is sent; request failures reject with the `ConnectError`.
 * Output goes to `io.stdout`/`io.stderr`; `--file` and `--dir` resolve against `io.cwd`.
 */
export async function runPrompt(client: Ledger, text: string, opts: PromptOptions, io: CliIo): Promise<number> {
  const print = (line: string): void => void io.stdout.write(`${terminalSafe(line)}\n`);
  // Refuse a malformed --model before any request (and before a session is made for it).
  const model = opts.model ? parseModelRef(opts.model, "--model") : undefined;
  const files = await Promise.all(opts.file.map((file) => fileDraft(file, io.cwd)));
  // Looked up before a session is made: an unknown or failing server is refused first.
  for (const ref of opts.resource ?? []) files.push(await resourceDraft(client, parseResourceOption(ref)));
  let noReply = !opts.reply;
  const listing = !noReply && !opts.model ? await client.listModels({}) : undefined;
  // Written once the message is stored (a trial, 2026-12-04: it said "stored" before a refusal).
  let storedNote: string | undefined;
  if (listing && listing.models.length === 0) {
    noReply = true;
    // A default model whose provider is missing is named: the config's warning said it, and
    // "no model is configured" would contradict it.
    const named = listing.defaultModel;
    storedNote =
      (named
        ? `note: the default model ${named.providerId}/${named.modelId} has no provider (no provider.${named.providerId}.models.${named.modelId} in ledger.json), so the message is stored without a reply.\n`
        : "note: no model is configured, so the message is stored without a reply.\n") +
      '      To get answers, add a provider to ledger.json, e.g. {"model": "local/qwen", "provider": {"local": {"npm": "@ai-sdk/openai-compatible",\n' +
      '      "options": {"baseURL": "http://127.0.0.1:11434/v1"}, "models": {"qwen": {}}}}} (see README "Configuration").\n';
  }
  const sessionId = opts.session ?? (await client.createSession({ directory: path.resolve(io.cwd, opts.dir ?? ".") })).session!.id;
  const request: Request = {
    sessionId,
    agent: opts.agent,
    model,
    noReply,
    parts: [create(PartInputSchema, { kind: { case: "text", value: { text } } }), ...files],
  };
  // A session made for this prompt alone must not stay behind empty.
  const forget = async (error: unknown): Promise<never> => {
    if (!opts.session && !(error instanceof ConnectError && error.code === Code.FailedPrecondition)) {
      await client.deleteSession({ sessionId }).catch(() => undefined);
    }
    throw error;
  };

  if (noReply) {
    const res = await client.prompt(request).catch(forget);
    if (storedNote) io.stderr.write(storedNote);
    if (opts.json) print(toJsonString(MessageWithPartsSchema, res.message!));
    else print(`session ${sessionId}\n${formatMessage(res.message!)}`);
    return EXIT_OK;
  }
  const policy: PermissionPolicy = { yes: opts.yes === true, interactive: process.stdin.isTTY === true && io.stderr.isTTY === true };
  if (opts.json) {
    const interrupt = onInterrupt(io, () => void abort(client, sessionId, (text) => void io.stderr.write(terminalSafe(text))));
    const watching = new AbortController();
    const answering = answerWhileRunning(
      client,
      sessionId,
      { ...policy, onInterrupt: interrupt.interrupt },
      watching.signal,
      (text) => void io.stderr.write(terminalSafe(text)),
    );
    try {
      const res = await client.prompt(request).catch(forget);
      print(toJsonString(MessageWithPartsSchema, res.message!));
      return exitCodeOf(res.message, io);
    } finally {
      watching.abort();
      await answering;
      interrupt.dispose();
    }
  }
  return streamPrompt(client, request, forget, policy, io);
}

async function streamPrompt(
  client: Ledger,
  request: Request,
  forget: (error: unknown) => Promise<never>,
  policy: PermissionPolicy,
  io: CliIo,
): Promise<number> {
  const spinner = createSpinner(io.stderr, () => !renderer.midLine && !asker.busy);
  const renderer = new PromptRenderer({
    out: (s) => void io.stdout.write(s),
    err: (s) => void io.stderr.write(s),
    spinner,
    dim: io.stderr.isTTY === true,
  });
  // Ctrl-C at a permission question: the same as anywhere else in the run (Abort).
  const asker = permissionAsker(client, { ...policy, onInterrupt: () => interrupt.interrupt() }, (text) => renderer.notice(text));
  const stream = new AbortController();
  let received = false;
  let gaveUp = false;
  const interrupt = onInterrupt(io, () => {
    void abort(client, request.sessionId, (text) => renderer.notice(text)).then((aborted) => {
      // The loop is over; if the stream still has not ended, stop waiting for it.
      if (aborted) setTimeout(() => ((gaveUp = true), stream.abort()), ABORT_GRACE_MS).unref();
    });
  });
  spinner.set("sending");
  try {
    for await (const res of client.promptStream(request, { signal: stream.signal })) {
      received = true;
      const kind = res.event?.kind;
      if (kind?.case === "permissionAsked" && kind.value.permission) {
        // The spinner would draw over the question.
        spinner.clear();
        asker.asked(kind.value.permission);
        continue;
      }
      // Answered here or by another client: an open question for it is dropped.
      if (kind?.case === "permissionReplied") asker.replied(kind.value.permissionId);
      if (res.event) renderer.event(res.event);
    }
  } catch (error) {
    if (!gaveUp) {
      renderer.close();
      if (!received) await forget(error);
      throw error;
    }
  } finally {
    await asker.close();
    interrupt.dispose();
  }
  const outcome = renderer.finish();
  return gaveUp && outcome.exitCode === EXIT_FAILED ? EXIT_ABORTED : outcome.exitCode;
}

/**
 * Sends Abort for the session (`ledger prompt` and `ledger shell` at Ctrl-C), reporting through
 * `say` (stderr). Resolves whether a loop or command was aborted (false on failure, reported).
 */
export async function abort(client: Ledger, sessionId: string, say: (text: string) => void): Promise<boolean> {
  say("interrupted: aborting the run (press Ctrl-C again to quit now)\n");
  try {
    const res = await client.abort({ sessionId });
    if (!res.aborted) say("no loop was running\n");
    return res.aborted;
  } catch (error) {
    say(`warning: abort failed: ${error instanceof Error ? error.message : String(error)}\n`);
    return false;
  }
}

/**
 * Handles SIGINT while a run is going: the first calls `first`, the second exits with
 * {@link EXIT_ABORTED}. `interrupt()` does the same for a Ctrl-C that readline took while a
 * permission question was open (the terminal is in raw mode then: no signal is raised).
 * `dispose()` stops listening.
 */
export function onInterrupt(io: CliIo, first: () => void): { dispose(): void; interrupt(): void } {
  let count = 0;
  const interrupt = () => {
    if (++count > 1) return io.exit(EXIT_ABORTED);
    first();
  };
  const dispose = io.onSignal("SIGINT", interrupt);
  return { dispose, interrupt };
}

/** {@link EXIT_OK}, {@link EXIT_FAILED} or {@link EXIT_ABORTED} from a final assistant message's error (printed on stderr). */
function exitCodeOf(message: MessageWithParts | undefined, io: CliIo): number {
  const kind = message?.message?.kind;
  if (kind?.case !== "assistant" || !kind.value.error) return EXIT_OK;
  const error = kind.value.error;
  io.stderr.write(terminalSafe(finalErrorText(error, kind.value.model)));
  return error.kind.case === "aborted" ? EXIT_ABORTED : EXIT_FAILED;
}

/**
 * Checks that every `--file` path exists (as the CLI sees it), before anything is sent: the
 * server would store a missing file as a "File not found" text and the prompt would succeed.
 * Throws an `Error` naming the first path that cannot be used, as given and resolved, e.g.
 * `--file nope.txt: no such file or directory (/home/me/nope.txt)`. Relative paths resolve against `cwd`.
 * An empty (or blank) path is refused too: `path.resolve` would turn it into `cwd` and attach
 * the whole working directory (`--file .` says that on purpose).
 */
export async function checkFiles(files: string[], cwd = process.cwd()): Promise<void> {
  for (const file of files) {
    if (file.trim() === "") throw new Error(`--file ${JSON.stringify(file)}: an empty path (name a file, or . for the working directory)`);
    const absolute = path.resolve(cwd, file);
    const problem = await stat(absolute).then(
      () => undefined,
      (error: NodeJS.ErrnoException) => STAT_ERRORS[error.code ?? ""] ?? error.message,
    );
    if (problem) throw new Error(`--file ${file}: ${problem} (${absolute})`);
  }
}

const STAT_ERRORS: Readonly<Record<string, string>> = {
  ENOENT: "no such file or directory",
  ENOTDIR: "no such file or directory",
  EACCES: "permission denied",
  ELOOP: "too many symbolic links",
  ENAMETOOLONG: "name too long",
};

async function fileDraft(file: string, cwd: string): Promise<PartInput> {
  const absolute = path.resolve(cwd, file);
  const info = await stat(absolute).catch(() => undefined);
  const mime = info?.isDirectory() ? "application/x-directory" : "text/plain";
  const url = pathToFileURL(absolute).href + (info?.isDirectory() ? "/" : "");
  return create(PartInputSchema, { kind: { case: "file", value: { mime, filename: path.basename(absolute), url } } });
}
