import { stat } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { create, toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Command, Option } from "commander";
import { MessageWithPartsSchema } from "../../gen/ledger/v1/message_pb.js";
import { PartInputSchema, type PartInput } from "../../gen/ledger/v1/part_pb.js";
import { ListSessionsResponseSchema, SessionService } from "../../gen/ledger/v1/service_pb.js";
import { loadConfig, parseModelRef } from "../config/config.js";
import { startLocal } from "./local.js";
import { formatMessage, formatSession } from "./print.js";

type Ledger = Client<typeof SessionService>;
interface ClientOptions {
  url?: string;
  db?: string;
  config?: string;
}

const program = new Command("ledger")
  .description("session-ledger: a gRPC/Connect service that stores agent prompts as an ordered ledger of messages and parts")
  .showHelpAfterError();

program
  .command("serve")
  .description("run the service (Connect, gRPC and gRPC-Web on one port)")
  .option("--host <host>", "interface to bind", "127.0.0.1")
  .addOption(new Option("--port <port>", "port (0 = random)").default(7411).argParser(parsePort))
  .option("--db <dir>", "embedded database directory, or :memory: (ignored when DATABASE_URL is set)")
  .option("--config <path>", "config file (default ./ledger.json, or LEDGER_CONFIG)")
  .action(async (opts: { host: string; port: number; db?: string; config?: string }) => {
    const ledger = await startLocal({ config: loadConfig({ explicitPath: opts.config }), db: opts.db, host: opts.host, port: opts.port });
    process.stderr.write(`database: ${ledger.database.kind} ${ledger.database.location}\n`);
    process.stdout.write(`session-ledger listening on ${ledger.url}\n`);
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      process.stderr.write(`${signal}: finishing in-flight requests\n`);
      ledger.close().then(
        () => process.exit(0),
        (error: unknown) => fail(error),
      );
    };
    process.on("SIGINT", () => stop("SIGINT"));
    process.on("SIGTERM", () => stop("SIGTERM"));
  });

program
  .command("prompt")
  .description("send a prompt (text plus files) and print the stored message")
  .argument("<text>", "the prompt text")
  .option("--file <path>", "attach a file or directory (repeatable)", collect, [])
  .option("--session <id>", "prompt this session (default: a new session)")
  .option("--dir <dir>", "directory of the new session (default: the current directory)")
  .option("--agent <name>", "agent to answer (default: the configured default agent)")
  .option("--model <provider/model>", "model to answer")
  .option("--no-reply", "store the message without running the agent loop")
  .option("--url <url>", "talk to a running server instead of starting one")
  .option("--db <dir>", "embedded database directory when no --url (default ./.ledger/db)")
  .option("--config <path>", "config file")
  .option("--json", "print the stored message as JSON")
  .action(async (text: string, opts: PromptOptions) => withClient(opts, (client) => runPrompt(client, text, opts)));

program
  .command("sessions")
  .description("list sessions, most recently updated first")
  .option("--url <url>", "talk to a running server instead of starting one")
  .option("--db <dir>", "embedded database directory when no --url")
  .option("--config <path>", "config file")
  .option("--json", "print JSON")
  .action(async (opts: ClientOptions & { json?: boolean }) =>
    withClient(opts, async (client) => {
      const res = await client.listSessions({ pageSize: 1000 });
      if (opts.json) return print(toJsonString(ListSessionsResponseSchema, res, { prettySpaces: 2 }));
      if (res.sessions.length === 0) return print("no sessions");
      for (const s of res.sessions) print(formatSession(s));
    }),
  );

program
  .command("messages")
  .description("print every message of a session with its parts")
  .argument("<session>", "session id")
  .option("--url <url>", "talk to a running server instead of starting one")
  .option("--db <dir>", "embedded database directory when no --url")
  .option("--config <path>", "config file")
  .option("--json", "print JSON")
  .action(async (sessionId: string, opts: ClientOptions & { json?: boolean }) =>
    withClient(opts, async (client) => {
      let pageToken = "";
      do {
        const res = await client.listMessages({ sessionId, pageToken, pageSize: 200 });
        for (const m of res.messages) print(opts.json ? toJsonString(MessageWithPartsSchema, m, { prettySpaces: 2 }) : `${formatMessage(m)}\n`);
        pageToken = res.nextPageToken;
      } while (pageToken);
    }),
  );

interface PromptOptions extends ClientOptions {
  file: string[];
  session?: string;
  dir?: string;
  agent?: string;
  model?: string;
  reply: boolean;
  json?: boolean;
}

async function runPrompt(client: Ledger, text: string, opts: PromptOptions): Promise<void> {
  const files = await Promise.all(opts.file.map(fileDraft));
  let noReply = !opts.reply;
  if (!noReply && !opts.model && (await client.listModels({})).models.length === 0) {
    noReply = true;
    process.stderr.write(
      "note: no model is configured, so the message is stored without a reply.\n" +
        '      To get answers, add a provider to ledger.json, e.g. {"model": "local/qwen", "provider": {"local": {"npm": "@ai-sdk/openai-compatible",\n' +
        '      "options": {"baseURL": "http://127.0.0.1:11434/v1"}, "models": {"qwen": {}}}}} (see README "Configuration").\n',
    );
  }
  const sessionId = opts.session ?? (await client.createSession({ directory: path.resolve(opts.dir ?? ".") })).session!.id;
  const res = await client
    .prompt({
      sessionId,
      agent: opts.agent,
      model: opts.model ? parseModelRef(opts.model) : undefined,
      noReply,
      parts: [create(PartInputSchema, { kind: { case: "text", value: { text } } }), ...files],
    })
    .catch(async (error: unknown) => {
      // A session made for this prompt alone must not stay behind empty.
      if (!opts.session && !(error instanceof ConnectError && error.code === Code.FailedPrecondition)) {
        await client.deleteSession({ sessionId }).catch(() => undefined);
      }
      throw error;
    });
  if (opts.json) return print(toJsonString(MessageWithPartsSchema, res.message!, { prettySpaces: 2 }));
  print(`session ${sessionId}`);
  print(formatMessage(res.message!));
}

async function fileDraft(file: string): Promise<PartInput> {
  const absolute = path.resolve(file);
  const info = await stat(absolute).catch(() => undefined);
  const mime = info?.isDirectory() ? "application/x-directory" : "text/plain";
  const url = pathToFileURL(absolute).href + (info?.isDirectory() ? "/" : "");
  return create(PartInputSchema, { kind: { case: "file", value: { mime, filename: path.basename(absolute), url } } });
}

async function withClient(opts: ClientOptions, fn: (client: Ledger) => Promise<void>): Promise<void> {
  if (opts.url) return fn(createClient(SessionService, createConnectTransport({ baseUrl: opts.url, httpVersion: "1.1" })));
  const ledger = await startLocal({ config: loadConfig({ explicitPath: opts.config }), db: opts.db });
  try {
    await fn(createClient(SessionService, createConnectTransport({ baseUrl: ledger.url, httpVersion: "1.1" })));
  } finally {
    await ledger.close();
  }
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

function parsePort(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port: ${value} is not a port number (0-65535)`);
  return port;
}

function print(line: string): void {
  process.stdout.write(`${line}\n`);
}

function fail(error: unknown): never {
  if (error instanceof ConnectError) {
    process.stderr.write(`error: ${Code[error.code]}: ${error.rawMessage}\n`);
  } else {
    process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
  }
  process.exit(1);
}

// `ledger sessions | head` closes stdout early: stop quietly.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(0);
  throw error;
});

program.parseAsync(process.argv).catch(fail);
