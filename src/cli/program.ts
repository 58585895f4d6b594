import { readFileSync } from "node:fs";
import { toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { Argument, Command, CommanderError, InvalidArgumentError, Option } from "commander";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { FileDiffSchema, MessageWithPartsSchema } from "../../gen/ledger/v1/message_pb.js";
import { SessionSchema } from "../../gen/ledger/v1/session_pb.js";
import { AbortResponseSchema } from "../../gen/ledger/v1/service_pb.js";
import { TodoSchema } from "../../gen/ledger/v1/todo_pb.js";
import { parseModelRef } from "../config/config.js";
import { InvalidArgumentError as LedgerInvalidArgument } from "../errors.js";
import { withClient, type ClientOptions, type Ledger } from "./client.js";
import { processIo, type CliIo } from "./io.js";
import { listResources, listServers, parseResourceOption } from "./mcp.js";
import { answerWhileRunning } from "./permissions.js";
import { callErrorHint, formatDiff, formatMessage, formatSession, formatTodos, shellOutput, terminalSafe } from "./print.js";
import { abort, checkFiles, onInterrupt, runPrompt, type PromptOptions } from "./prompt.js";
import type { ServeOptions } from "./serve.js";
import {
  pendingPermissions,
  printPermissions,
  REPLY_LETTERS,
  REPLY_WORDS,
  replyToRequest,
  replyWord,
  revert,
  unrevert,
  type ReplyWord,
} from "./review.js";
import { EXIT_ABORTED, EXIT_FAILED, EXIT_OK } from "./render.js";

/**
 * Runs the `ledger` command line `argv` (the arguments after the program name) with `io` (default:
 * this process) and resolves with the exit code. A usage error (commander's message on stderr) or
 * a failure (`error: ...` on stderr, exit 1) also calls `io.exit`, as they end the process at once;
 * `serve` resolves once listening and ends on SIGINT/SIGTERM through `io.exit(0)`.
 */
export async function main(argv: string[], io: CliIo = processIo()): Promise<number> {
  let exitCode = EXIT_OK;
  // Stored text is shown, never acted on by the terminal (JSON lines hold no raw controls).
  const print = (line: string): void => void io.stdout.write(`${terminalSafe(line)}\n`);
  // A command that only reads: a missing embedded database is not made for it (withClient's `use.reads`).
  const reading = <T>(opts: ClientOptions, fn: (client: Ledger) => Promise<T>): Promise<T> => withClient(opts, io, fn, { reads: true });
  const fail = (error: unknown): number => {
    if (error instanceof ConnectError) {
      io.stderr.write(terminalSafe(`error: ${Code[error.code]}: ${cliMessage(error)}\n`));
      const hint = callErrorHint(error, io.env);
      if (hint) io.stderr.write(terminalSafe(`hint: ${hint}\n`));
    } else {
      io.stderr.write(terminalSafe(`error: ${error instanceof Error ? error.message : String(error)}\n`));
    }
    io.exit(1);
    return 1;
  };

  const program = new Command("ledger")
    // Set before the subcommands, which inherit both: commander's messages go to `io`, and its
    // exits come back here as a CommanderError.
    .configureOutput({ writeOut: (text) => void io.stdout.write(text), writeErr: (text) => void io.stderr.write(text) })
    .exitOverride()
    .description("session-ledger: a gRPC/Connect service that stores agent prompts as an ordered ledger of messages and parts")
    .version(packageVersion(), "-V, --version", "print the version")
    .showHelpAfterError("(ledger <command> --help shows the usage)");

  // --db and --config are the command's own server's; with --url there is none (a trial,
  // 2026-12-04: "mcp --url U --config F" listed the server's MCP servers, not F's, without a word).
  program.hook("preAction", (_program, command) => {
    const opts = command.opts<{ url?: string; db?: string; config?: string }>();
    if (opts.url !== undefined && opts.db !== undefined)
      command.error("error: --url and --db: with --url the server at that address uses its own database; pass one of them");
    if (opts.url !== undefined && opts.config !== undefined)
      command.error("error: --url and --config: with --url the server at that address uses its own configuration; pass one of them");
  });

  program
    .command("serve")
    .description("run the service (Connect, gRPC and gRPC-Web on one port) and the browser page at /")
    .option("--host <host>", "interface to bind", "127.0.0.1")
    .addOption(new Option("--port <port>", "port (0 = random)").default(7411).argParser(parsePort))
    .option("--db <dir>", "embedded database directory, or :memory: (ignored when DATABASE_URL is set)")
    .option("--config <path>", "config file (default LEDGER_CONFIG, else ./ledger.json, ledger.jsonc, opencode.json, opencode.jsonc)")
    .option("--lenient-config", LENIENT_HELP)
    .option("--no-web", "do not serve the browser page at /")
    .addOption(
      new Option(
        "--grace-ms <ms>",
        "on SIGTERM/SIGINT: how long in-flight requests and agent loops get to finish (default 10000)",
      ).argParser(parseGraceMs),
    )
    .addHelpText(
      "after",
      '\nPrints "session-ledger listening on URL" on stdout and "browser page: URL/" on stderr (the page is\nweb/dist, or LEDGER_WEB_DIR; without it a note on stderr says the RPCs are served alone).',
    )
    .action(async (opts: ServeOptions) => (await import("./serve.js")).runServe(opts, io, "serve"));

  program
    .command("web")
    .description("print the address of the browser page: of a running server (--url), or of one started here")
    .addOption(new Option("--url <url>", "a running server: check it serves the page and print its address").argParser(parseUrlOption))
    .option("--host <host>", "interface to bind (without --url)", "127.0.0.1")
    .addOption(new Option("--port <port>", "port (0 = random; without --url)").default(7411).argParser(parsePort))
    .option("--db <dir>", "embedded database directory when no --url, or :memory:")
    .option("--config <path>", "config file")
    .option("--lenient-config", LENIENT_HELP)
    .addHelpText(
      "after",
      '\nPrints the page\'s address ("http://127.0.0.1:7411/") on stdout. Without --url the server runs until\nCtrl-C, like "ledger serve"; with --url nothing is started.',
    )
    .action(async (opts: Omit<ServeOptions, "web"> & { url?: string }) => {
      const { pageAt, runServe } = await import("./serve.js");
      if (opts.url) return print(await pageAt(opts.url));
      await runServe({ ...opts, web: true }, io, "web");
    });

  program
    .command("token")
    .description("mint a JSON Web Token with the server's shared secret (LEDGER_JWT_SECRET), for development and tests")
    .addOption(new Option("--sub <subject>", "who the token is for (its sub claim)").makeOptionMandatory().argParser(parseSubject))
    .option("--tenant <tenant>", "the tenant (written to auth.jwt.tenant_claim)")
    .option("--scope <scopes>", "ledger:read, ledger:write, ledger:admin (default: read and write)")
    .option("--expires <duration>", 'lifetime, e.g. "30m", "1h", "7d"', "1h")
    .option("--config <path>", "config file")
    .option("--lenient-config", LENIENT_HELP)
    .action(async (opts: import("./token.js").TokenOptions) => print(await (await import("./token.js")).mintToken(opts, io)));

  program
    .command("prompt")
    .description("send a prompt (text plus files) and stream the reply, or print the stored message")
    .argument("<text>", "the prompt text")
    .option("--file <path>", "attach a file or directory (repeatable; must exist)", collect, [])
    .option(
      "--resource <server:uri>",
      "attach an MCP server's resource, e.g. everything:demo://... (repeatable; see ledger mcp)",
      collect,
      [],
    )
    .option("--session <id>", "prompt this session (default: a new session)")
    .addOption(new Option("--dir <dir>", "directory of the new session (default: the current directory)").conflicts("session"))
    .option("--agent <name>", "agent to answer (default: the configured default agent)")
    .addOption(new Option("--model <provider/model>", "model to answer").argParser(parseModelOption))
    .option("--no-reply", "store the message without running the agent loop")
    .addOption(new Option("--url <url>", "talk to a running server instead of starting one").argParser(parseUrlOption))
    .option("--db <dir>", "embedded database directory when no --url (default ./.ledger/db)")
    .option("--config <path>", "config file")
    .option("--lenient-config", LENIENT_HELP)
    .option("--json", "print the stored message, or the final assistant message, as one line of JSON (no live output)")
    .option("--yes", "allow every permission request once without asking (otherwise asked on a terminal, rejected elsewhere)")
    .addHelpText(
      "after",
      `
  Output (without --json): the first line is "session ses_...". With a model configured (or
  --model), the reply is streamed: text as it arrives, one line per tool call state
  ("→ read notes.txt … running", "✓ read notes.txt", "✗ read notes.txt: error"), then
  "tokens: in N, out N, reasoning N, cache r/w N/N · cost $0.0000 · steps N". Reasoning
  ("thinking: ..."), retry notices and errors go to stderr, with a spinner when it is a terminal.
  Without a model the message is stored with no reply (a note on stderr says how to add one).

  Permission requests (a tool call an "ask" rule matched, e.g. a write) are shown on stderr
  ("permission: write hello.txt" and the diff) and asked: "allow once (o), always (a), reject
  (r)?"; when another client answers first ("ledger reply", the browser page) the question is
  dropped. Without a terminal they are rejected (the model is told to pass --yes), unless --yes
  allows each once.

  Ctrl-C aborts the run (Abort RPC) and waits for it to end; a second Ctrl-C quits at once (with
  --url the server may then go on running it: stop it with "ledger abort SESSION_ID --url URL").

  Exit codes:
    ${EXIT_OK}    answered (or stored, with --no-reply / no model)
    ${EXIT_FAILED}    the request failed, or the answer ended with an error ("error: <kind>: message" on stderr)
    ${EXIT_ABORTED}  the run was aborted (Ctrl-C, or "ledger abort" from elsewhere)`,
    )
    .action(async (text: string, opts: PromptOptions, command: Command) => {
      // Usage mistakes, said in the CLI's words (the API's would say "draft") with the help hint,
      // before starting or calling a server.
      if (text.trim() === "" && opts.file.length === 0 && opts.resource.length === 0)
        command.error('error: the prompt text is empty: say what to ask, e.g. ledger prompt "summarize this" --file README.md');
      // A missing --file would be stored as a "File not found" text.
      await checkFiles(opts.file, io.cwd).catch((error: Error) => command.error(`error: ${error.message}`));
      opts.resource.forEach(parseResourceOption);
      exitCode = await withClient(opts, io, (client) => runPrompt(client, text, opts, io));
    });

  clientCommand(program, "abort", "the server running the loop (without it a fresh in-process server is asked, where nothing runs)")
    .description("abort the agent loop running for a session")
    .argument("<session>", "session id")
    .option("--json", 'print the answer as one line of JSON ({"aborted":true}, or {} when no loop was running)')
    .addHelpText(
      "after",
      '\nPrints "aborted" or "no loop was running". Abort only reaches loops of the server it talks to:\npass the --url of the "ledger serve" that runs the prompt.',
    )
    .action(async (sessionId: string, opts: ClientOptions & { json?: boolean }) =>
      withClient(opts, io, async (client) => {
        const answer = await client.abort({ sessionId });
        print(opts.json ? toJsonString(AbortResponseSchema, answer) : answer.aborted ? "aborted" : "no loop was running");
      }),
    );

  clientCommand(program, "diff")
    .description("print the files the agent changed in a session (or one turn of it) as a unified diff")
    .argument("<session>", "session id")
    .option("--message <id>", "only the turn of this user message")
    .option("--json", "print JSON Lines: one FileDiff per line")
    .action(async (sessionId: string, opts: ClientOptions & { json?: boolean; message?: string }) =>
      reading(opts, async (client) => {
        const { diffs } = await client.getDiff({ sessionId, messageId: opts.message });
        if (opts.json) {
          for (const d of diffs) print(toJsonString(FileDiffSchema, d));
          return;
        }
        if (diffs.length === 0) {
          // A reverted session's diff leaves out what the revert hid: say so, or "no changes" misleads.
          const revert = opts.message ? undefined : (await client.getSession({ sessionId })).session?.revert;
          return print(
            revert?.messageId
              ? `no changes (the session is reverted to ${revert.messageId}; "ledger unrevert ${sessionId}" brings its changes back)`
              : "no changes",
          );
        }
        for (const d of diffs) io.stdout.write(terminalSafe(formatDiff(d)));
      }),
    );

  clientCommand(program, "shell")
    .description("run a shell command in the session directory, recorded in the session as a bash tool call")
    .argument("<session>", "session id")
    .argument("<command>", "the command (run with /bin/sh -c)")
    .option("--agent <name>", "agent whose bash permission applies", "build")
    .option("--json", "print the assistant message as one line of JSON")
    .option("--yes", "allow a permission request once without asking (otherwise asked on a terminal, rejected elsewhere)")
    .addHelpText(
      "after",
      `\nPrints the command's output; the exit code is the command's (1 when the call failed). Ctrl-C aborts the command and waits for it to end (exit ${EXIT_ABORTED}); a second Ctrl-C quits at once.`,
    )
    .action(async (sessionId: string, command: string, opts: ClientOptions & { json?: boolean; agent: string; yes?: boolean }) => {
      exitCode = await withClient(opts, io, async (client) => {
        // The agent's bash rules may ask: answer like `ledger prompt` while the command runs.
        const watching = new AbortController();
        // Ctrl-C aborts the command (the Abort RPC kills its process group) and waits for its end,
        // as `ledger prompt` does; a second one exits at once.
        // Whether a Ctrl-C aborted the command (false when none was running yet: it then runs on).
        let aborting: Promise<boolean> | undefined;
        const say = (text: string) => void io.stderr.write(terminalSafe(text));
        const interrupt = onInterrupt(io, () => void (aborting ??= abort(client, sessionId, say)));
        const policy = {
          yes: opts.yes === true,
          interactive: process.stdin.isTTY === true && io.stderr.isTTY === true,
          command: "shell" as const,
          onInterrupt: interrupt.interrupt,
        };
        const answering = answerWhileRunning(client, sessionId, policy, watching.signal, say);
        const { message } = await client.shell({ sessionId, agent: opts.agent, command }).finally(() => {
          watching.abort();
          interrupt.dispose();
        });
        await answering;
        if (opts.json) {
          print(toJsonString(MessageWithPartsSchema, message!));
          return 0;
        }
        const state = message?.parts[0]?.kind.case === "tool" ? message.parts[0].kind.value.state?.status : undefined;
        if (state?.case === "completed") {
          // stdout gets the command's own output; the notes written for the model (cut output, a
          // timeout) go to stderr, and the exit code is the command's.
          const { output, notes } = shellOutput(state.value.output, state.value.metadata);
          if (output) io.stdout.write(terminalSafe(output.endsWith("\n") ? output : `${output}\n`));
          for (const note of notes) io.stderr.write(terminalSafe(`note: ${note}\n`));
          if (aborting && (await aborting)) return EXIT_ABORTED;
          const exit = state.value.metadata?.exit;
          return typeof exit === "number" ? exit : 1;
        }
        io.stderr.write(terminalSafe(`error: ${state?.case === "error" ? state.value.error : "the command did not run"}\n`));
        return aborting && (await aborting) ? EXIT_ABORTED : 1;
      });
    });

  clientCommand(program, "summarize")
    .description("compact a session: the model writes a summary that replaces the earlier history in what it is sent")
    .argument("<session>", "session id")
    .addOption(
      new Option("--model <provider/model>", "the model that writes the summary (default: the session's)").argParser(parseModelOption),
    )
    .option("--json", "print the summary message as one line of JSON")
    .action(async (sessionId: string, opts: ClientOptions & { json?: boolean; model?: string }) => {
      const model = opts.model ? parseModelRef(opts.model) : undefined;
      exitCode = await withClient(opts, io, async (client) => {
        const { message } = await client.summarize({ sessionId, model });
        if (opts.json) print(toJsonString(MessageWithPartsSchema, message!));
        else print(formatMessage(message!));
        return message?.message?.kind.case === "assistant" && message.message.kind.value.error ? EXIT_FAILED : EXIT_OK;
      });
    });

  clientCommand(program, "permissions", "the server running the loop")
    .description("list the pending permission requests (tool calls waiting for an answer) with their diffs")
    .argument("[session]", "session id (default: every session whose loop runs)")
    .option("--json", "print JSON Lines: one PermissionRequest per line (nothing when none is pending)")
    .addHelpText(
      "after",
      '\nPrints, per request, "per_...  ses_...  write hello.txt" and the diff of a file change; answer one\nwith "ledger reply SESSION_ID PERMISSION_ID once|always|reject".',
    )
    .action(async (sessionId: string | undefined, opts: ClientOptions & { json?: boolean }) =>
      reading(opts, async (client) => printPermissions(await pendingPermissions(client, sessionId), opts.json === true, print)),
    );

  clientCommand(program, "reply", "the server running the loop")
    .description("answer a pending permission request: run the call once, always (for the rest of the session), or reject it")
    .argument("<session>", "session id")
    .argument("<permission>", "permission request id (per_...)")
    .addArgument(
      new Argument("<reply>", "the answer (o, a, r also work)").choices([...Object.keys(REPLY_WORDS), ...Object.keys(REPLY_LETTERS)]),
    )
    .option("--message <text>", "with reject: feedback the model sees in the tool error")
    .option("--json", "print the ReplyPermission request sent as one line of JSON")
    .addHelpText(
      "after",
      '\nPrints "allowed once", "allowed always" or "rejected". An unknown request (or one of another\nsession) is NOT_FOUND, one answered already FAILED_PRECONDITION: exit 1.',
    )
    .action(async (sessionId: string, permissionId: string, typed: string, opts: ClientOptions & { json?: boolean; message?: string }) => {
      const word: ReplyWord = replyWord(typed)!;
      // Checked before anything is sent: the server would ignore the feedback of an allowed call.
      if (opts.message !== undefined && word !== "reject")
        throw new Error(`--message is the feedback of a rejection: use it with reject, not ${word}`);
      await withClient(opts, io, (client) =>
        replyToRequest(client, { sessionId, permissionId, word, message: opts.message }, opts.json === true, print),
      );
    });

  clientCommand(program, "revert")
    .description("hide a message and everything after it, and restore the files they changed")
    .argument("<session>", "session id")
    .argument("<message>", "the first message to hide (msg_...)")
    .option("--part <id>", "keep the message's parts before this one (prt_...)")
    .option("--json", "print the session (with its revert point) as one line of JSON")
    .addHelpText("after", '\nThe next prompt removes the hidden messages; "ledger unrevert SESSION_ID" undoes the revert.')
    .action(async (sessionId: string, messageId: string, opts: ClientOptions & { json?: boolean; part?: string }) =>
      withClient(opts, io, (client) => revert(client, { sessionId, messageId, partId: opts.part }, opts.json === true, print)),
    );

  clientCommand(program, "unrevert")
    .description("undo a revert: show the hidden messages again and put their file changes back")
    .argument("<session>", "session id")
    .option("--json", "print the session as one line of JSON")
    .action(async (sessionId: string, opts: ClientOptions & { json?: boolean }) =>
      withClient(opts, io, (client) => unrevert(client, sessionId, opts.json === true, print)),
    );

  clientCommand(program, "todo")
    .description("print a session's todo list, as the model last wrote it (todowrite)")
    .argument("<session>", "session id")
    .option("--json", "print JSON Lines: one Todo per line, in order (nothing when the list is empty)")
    .addHelpText(
      "after",
      '\nPrints "todos (D/N done):" and a line per item: "[ ] pending", "[~] in progress", "[x] completed", "[-] cancelled".',
    )
    .action(async (sessionId: string, opts: ClientOptions & { json?: boolean }) =>
      reading(opts, async (client) => {
        const { todos } = await client.getTodo({ sessionId });
        for (const line of opts.json ? todos.map((t) => toJsonString(TodoSchema, t)) : formatTodos(todos)) print(line);
      }),
    );

  clientCommand(program, "mcp")
    .description("list the MCP servers (starting them) with their status, or one server's resources")
    .argument("[server]", "list this server's resources and resource templates")
    .option("--json", "print JSON Lines: one McpServer per line, or one McpResource then one McpResourceTemplate per line")
    .addHelpText("after", '\nAttach a listed resource to a prompt with: ledger prompt "..." --resource SERVER:URI')
    .action(async (server: string | undefined, opts: ClientOptions & { json?: boolean }) =>
      withClient(opts, io, (client) =>
        server ? listResources(client, server, opts.json === true, print) : listServers(client, opts.json === true, print),
      ),
    );

  clientCommand(program, "watch", "the server where the session's prompts run (without it: the stored events only)")
    .description("print a session's events as they happen: the stored ones first, then live ones, until Ctrl-C")
    .argument("<session>", "session id")
    .addOption(new Option("--after <seq>", "start after this event (default 0: the whole log)").argParser(parseSeq))
    .option("--json", "print JSON Lines: one event per line (text deltas included)")
    .addHelpText(
      "after",
      `
One line per event: "#SEQ  KIND  what it holds" (a message's header, a part's line as "ledger
messages" prints it, a status, an error, ...); text deltas are not shown (the part's next
snapshot is). Ends when the session is deleted, or at Ctrl-C. Without --url a server of the
command's own replays the stored events, and on the embedded database the command ends after
the last one (nothing new can happen there): pass the --url of the "ledger serve" that runs the
session's prompts to follow them live.`,
    )
    .action(async (sessionId: string, opts: ClientOptions & { after?: bigint; json?: boolean }) => {
      const { runWatch } = await import("./watch.js");
      exitCode = await reading(opts, (client) =>
        runWatch(client, sessionId, { ...opts, storedOnly: !opts.url && !io.env.DATABASE_URL }, io, print),
      );
    });

  clientCommand(program, "fork")
    .description("copy a session (up to a message, or all of it) into a new session")
    .argument("<session>", "session id")
    .option("--message <id>", "copy the messages before this one (default: all)")
    .option("--json", "print the new session as one line of JSON")
    .addHelpText("after", '\nPrints "session ses_..." (the new session: prompt it with --session).')
    .action(async (sessionId: string, opts: ClientOptions & { message?: string; json?: boolean }) =>
      withClient(opts, io, async (client) => {
        const { session } = await client.forkSession({ sessionId, messageId: opts.message ?? "" });
        print(opts.json ? toJsonString(SessionSchema, session!) : `session ${session!.id}`);
      }),
    );

  clientCommand(program, "sessions")
    .description("list sessions, most recently updated first")
    .option("--json", "print JSON Lines: one session per line (nothing when there is none)")
    .action(async (opts: ClientOptions & { json?: boolean }) =>
      reading(opts, async (client) => {
        const res = await client.listSessions({ pageSize: 1000 });
        if (opts.json) {
          for (const s of res.sessions) print(toJsonString(SessionSchema, s));
          return;
        }
        if (res.sessions.length === 0) return print("no sessions");
        for (const s of res.sessions) print(formatSession(s));
      }),
    );

  clientCommand(program, "messages")
    .description("print every message of a session with its parts")
    .argument("<session>", "session id")
    .option("--json", "print JSON Lines: one message with its parts per line, oldest first")
    .action(async (sessionId: string, opts: ClientOptions & { json?: boolean }) =>
      reading(opts, async (client) => {
        let pageToken = "";
        let count = 0;
        do {
          const res = await client.listMessages({ sessionId, pageToken, pageSize: 200 });
          for (const m of res.messages) print(opts.json ? toJsonString(MessageWithPartsSchema, m) : `${formatMessage(m)}\n`);
          count += res.messages.length;
          pageToken = res.nextPageToken;
        } while (pageToken);
        if (opts.json) return;
        const revert = (await client.getSession({ sessionId })).session?.revert;
        // A revert that hides every message says so itself.
        if (count === 0 && !revert?.messageId) print("no messages");
        if (revert?.messageId) {
          print(
            `reverted to ${revert.messageId}: it${revert.partId ? ` (from part ${revert.partId})` : ""} and the messages after it are hidden; "ledger unrevert ${sessionId}" shows them again`,
          );
        }
      }),
    );

  // commander answers "help <unknown>" with the general help alone (exit 1): say what was wrong.
  const [first, asked] = argv;
  const known = (name: string) => name === "help" || program.commands.some((c) => c.name() === name || c.aliases().includes(name));
  if (first === "help" && asked !== undefined && !known(asked)) {
    io.stderr.write(terminalSafe(`error: unknown command '${asked}'\n(ledger --help lists the commands)\n`));
    io.exit(1);
    return 1;
  }
  try {
    await program.parseAsync(argv, { from: "user" });
    return exitCode;
  } catch (error) {
    if (!(error instanceof CommanderError)) return fail(error);
    io.exit(error.exitCode);
    return error.exitCode;
  }
}

/**
 * The `version` of the ledger's package.json: two folders up from src/cli/program.ts and from the
 * bundled dist/cli/main.js (or three, checked too; the first that names this package).
 */
function packageVersion(): string {
  for (const up of ["../../package.json", "../../../package.json"]) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(up, import.meta.url), "utf8")) as { name?: string; version: string };
      if (pkg.name === "session-ledger") return pkg.version;
    } catch {
      // not this one
    }
  }
  throw new Error("package.json of session-ledger not found above src/cli");
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

/** `--sub`: a subject the server accepts (a non-blank string: the server refuses an empty `sub` claim). */
function parseSubject(value: string): string {
  if (value.trim() === "") throw new InvalidArgumentError("expected who the token is for, e.g. alice; got an empty subject");
  return value;
}

/** `--after`: an event seq, a whole number from 0. */
function parseSeq(value: string): bigint {
  if (!/^\d{1,19}$/.test(value.trim())) throw new InvalidArgumentError("expected an event seq: a whole number from 0");
  return BigInt(value.trim());
}

/** Checks `--model` is "provider/model" (both parts non-blank) before anything is sent; keeps the string. */
function parseModelOption(value: string): string {
  try {
    parseModelRef(value, "--model");
  } catch (error) {
    if (error instanceof LedgerInvalidArgument) throw new InvalidArgumentError(error.message.replace(/^--model: /, ""));
    throw error;
  }
  return value;
}

/**
 * The text `ledger` prints for a server's error: its message, except where the message speaks in
 * API terms a CLI user does not type (`NO_MODEL_PROVIDER` says "send no_reply": here it is the
 * `--no-reply` flag, and `resume` has none).
 */
function cliMessage(error: ConnectError): string {
  const info = error.findDetails(ErrorInfoSchema)[0];
  // Only where a message was stored (Prompt, Command): Summarize stores nothing and says so itself.
  if (info?.reason === "NO_MODEL_PROVIDER" && info.metadata.message_id)
    return (
      `the message ${info.metadata.message_id ?? ""} is stored, but the server has no model provider to answer it: ` +
      `add one to its ledger.json (README "Configuration"), or store prompts without an answer with ledger prompt --no-reply`
    );
  return error.rawMessage;
}

/**
 * `--url`: the server's base URL, `http://host:port` (or `https://` behind a TLS proxy; `ledger
 * serve` itself speaks plaintext). Refused as a usage error when it does not parse or has another
 * scheme (a trial: `127.0.0.1:7411` failed later as "Unknown: Invalid URL").
 */
function parseUrlOption(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError(`not a URL; expected http://host:port, e.g. http://127.0.0.1:7411 (the line "ledger serve" prints)`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new InvalidArgumentError(
      `the scheme is ${url.protocol.slice(0, -1)}; expected http://host:port (or https:// behind a TLS proxy)`,
    );
  return value;
}

function parseGraceMs(value: string): number {
  const ms = Number(value);
  if (!Number.isInteger(ms) || ms < 0) throw new Error(`--grace-ms: ${value} is not a whole number of milliseconds (0 or more)`);
  return ms;
}

function parsePort(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port: ${value} is not a port number (0-65535)`);
  return port;
}

/**
 * `program.command(name)` with the options of every command that talks to a ledger: `--url` (a
 * running server; `urlHelp` says what it is for), `--db` (the embedded database when no `--url`),
 * `--config` and `--lenient-config`, as `ClientOptions` reads them (`withClient`).
 */
function clientCommand(program: Command, name: string, urlHelp = "talk to a running server instead of starting one"): Command {
  return program
    .command(name)
    .addOption(new Option("--url <url>", urlHelp).argParser(parseUrlOption))
    .option("--db <dir>", "embedded database directory when no --url")
    .option("--config <path>", "config file")
    .option("--lenient-config", LENIENT_HELP);
}

/** The help of `--lenient-config`, on every command that may read the config file. */
const LENIENT_HELP = "unknown config keys are warnings, not errors (also LEDGER_LENIENT_CONFIG=1)";
