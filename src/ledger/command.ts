import { stat } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { PartInputSchema } from "../../gen/ledger/v1/part_pb.js";
import { PromptRequestSchema, type CommandRequest } from "../../gen/ledger/v1/service_pb.js";
import { requireSubagent } from "../config/agents.js";
import { CommandNotFoundError, SessionNotFoundError } from "../errors.js";
import { getMessageRow } from "../storage/message-store.js";
import { getSessionRow } from "../storage/session-store.js";
import type { LedgerDeps } from "./deps.js";
import { confinePath } from "../files/confine.js";
import { checkSessionStillAllowed, rootsForSession } from "./access.js";
import { prompt } from "./prompt.js";
import type { PartField } from "../parts/resolve.js";

type Draft = MessageInitShape<typeof PartInputSchema>;

/**
 * The `Command` RPC (OpenCode `SessionPrompt.command`): runs the configured prompt template
 * `command.<name>` as a prompt. The template gets its arguments (`expandTemplate`), its `@path`
 * references become `file:` drafts (`fileReferences`), and the request's `parts` are appended;
 * with `subtask: true` the expanded template is one subtask draft for the command's agent
 * instead. Agent and model: the request's, else the command's, else the usual defaults. The
 * prompt is then stored and answered exactly like `Prompt`, with a `command` event in the same
 * transaction (before `prompted`).
 *
 * Throws `CommandNotFoundError` (NOT_FOUND, listing the configured commands),
 * `SessionNotFoundError`, `AgentNotFoundError` for an unknown subtask agent and
 * `InvalidArgumentError` on `command.agent` for a primary-only one (`requireSubagent`), and whatever
 * `prompt` throws (e.g. PERMISSION_DENIED for a client's `file:` draft outside the allowed
 * directories; a template's `@path` outside them is left as text, `fileReferences`), naming the
 * drafts as `commandPartField` says; `PathNotAllowedError` on `session_id` for a session outside
 * `session_directories` and `PreconditionError` SESSION_DIRECTORY_MISSING (FAILED_PRECONDITION) when
 * its directory no longer exists (`checkSessionStillAllowed`), except for a retry of a stored
 * command (same `message_id`) whose template names no file: `prompt` answers it when it starts
 * no run.
 */
export async function runCommand(deps: LedgerDeps, request: CommandRequest, signal?: AbortSignal): Promise<MessageWithParts> {
  const command = Object.hasOwn(deps.config.commands, request.command) ? deps.config.commands[request.command] : undefined;
  if (!command) throw new CommandNotFoundError(request.command, Object.keys(deps.config.commands));
  const row = await getSessionRow(deps.db, request.sessionId);
  if (!row) throw new SessionNotFoundError(request.sessionId);

  const text = expandTemplate(command.template, request.arguments);
  const model = request.model ?? command.model;
  let agent = request.agent || command.agent || "";
  let drafts: Draft[];
  if (command.subtask) {
    // The user message runs under the request's (or default) agent; the subtask under the command's.
    const subagent = command.agent || request.agent || deps.config.defaultAgent;
    requireSubagent(deps.config.agents, subagent, "command.agent");
    drafts = [
      {
        kind: {
          case: "subtask",
          value: { prompt: text, description: command.description ?? "", agent: subagent, model, command: request.command },
        },
      },
    ];
    agent = request.agent;
  } else {
    // A session its directories no longer allow is refused before its references are looked up.
    // A retry of a stored command (its message_id) is left to `prompt`, which answers it, unless
    // its template names files: they cannot be looked up again as they were, and the retry would
    // look like other content (ALREADY_EXISTS) instead of getting the directory's refusal.
    const retry =
      request.messageId !== "" &&
      text.search(FILE_REFERENCE) < 0 &&
      (await getMessageRow(deps.db, row.id, request.messageId)) !== undefined;
    if (!retry) await checkSessionStillAllowed(deps, { id: row.id, directory: row.directory });
    const roots = [row.directory, ...(await rootsForSession(deps, row.id))];
    const references = await fileReferences(text, row.directory, roots, deps.config.limits.parts_per_prompt);
    drafts = [{ kind: { case: "text", value: { text } } }, ...references];
  }
  const promptRequest = create(PromptRequestSchema, {
    sessionId: request.sessionId,
    messageId: request.messageId,
    agent,
    model: command.subtask ? request.model : model,
    variant: request.variant,
    noReply: request.noReply,
    parts: [...drafts, ...request.parts],
  });
  return prompt(deps, promptRequest, signal, {
    extraEvents: (messageId) => [{ case: "command", value: { command: request.command, arguments: request.arguments, messageId } }],
    partField: commandPartField(drafts.length),
  });
}

/**
 * How a Command's errors name its drafts: the `template` drafts the template brings (its text,
 * then one `file:` draft per `@path` reference, or the subtask) are `command.template.parts[k]`,
 * and the request's own come after them but keep their index in its `parts`: an error on the
 * client's first draft names `parts[0]`, not `parts[3]`.
 *
 * @param fromTemplate - how many drafts the template brought (they come first in the prompt).
 */
export function commandPartField(fromTemplate: number): PartField {
  return (index) => (index < fromTemplate ? `command.template.parts[${index}]` : `parts[${index - fromTemplate}]`);
}

/** `"quoted words"`, `'quoted words'` or a run of non-blanks (OpenCode's argument split). */
const ARGUMENT = /"[^"]*"|'[^']*'|[^\s"']+/g;
const PLACEHOLDER = /\$(\d+)/g;
/** `$N` or `$ARGUMENTS`, replaced in one pass so that what the arguments bring is never expanded again. */
const ANY_PLACEHOLDER = /\$(\d+)|\$ARGUMENTS/g;

/**
 * Fills a command template: `$1`, `$2`... become the whitespace-split arguments (quotes keep
 * words together and are dropped; the highest placeholder takes the remaining arguments; a
 * missing one becomes empty), `$ARGUMENTS` the whole argument string. A template with neither
 * gets the arguments appended after a blank line. Placeholders are replaced in one pass: a `$1`
 * or `$ARGUMENTS` the user typed in the arguments stays as typed (OpenCode replaces `$N` first,
 * then `$ARGUMENTS` in the result, so an argument holding `$ARGUMENTS` was expanded again).
 */
export function expandTemplate(template: string, args: string): string {
  const words = (args.match(ARGUMENT) ?? []).map((w) => w.replace(/^["']|["']$/g, ""));
  const positions = [...template.matchAll(PLACEHOLDER)].map((m) => Number(m[1]));
  const last = Math.max(0, ...positions);
  const result = template.replace(ANY_PLACEHOLDER, (_, index: string | undefined) => {
    if (index === undefined) return args;
    const position = Number(index);
    if (position < 1 || position > words.length) return "";
    return position === last ? words.slice(position - 1).join(" ") : words[position - 1]!;
  });
  const usesArguments = template.includes("$ARGUMENTS");
  if (positions.length === 0 && !usesArguments && args.trim()) return `${result}\n\n${args}`;
  return result;
}

/** `@path` not preceded by a word character or backtick (OpenCode `ConfigMarkdown.files`). */
const FILE_REFERENCE = /(?<![\w`])@(\.?[^\s`,.]*(?:\.[^\s`,.]+)*)/g;

/**
 * The `file:` drafts for the `@path` references in `text` that name an existing file or
 * directory inside `roots` (the session directory and its allowed roots), relative to
 * `directory`; each path once, in order of appearance, at most `max` of them (more would pass
 * `parts_per_prompt` anyway). A path outside `roots` (or under /proc, /sys, /dev, or malformed)
 * is left as text like one that names nothing, without asking whether it exists: a probe,
 * 2026-12-02, found `@/etc/shadow` refused while `@/etc/nope` was stored as text, which told a
 * caller which files exist on the server; and an `@` word such as `@/api/v1` is not a path.
 */
export async function fileReferences(text: string, directory: string, roots: string[], max: number): Promise<Draft[]> {
  const seen = new Set<string>();
  const drafts: Draft[] = [];
  for (const match of text.matchAll(FILE_REFERENCE)) {
    const name = match[1];
    if (!name || seen.has(name)) continue;
    seen.add(name);
    if (drafts.length >= max) break;
    const absolute = path.resolve(directory, name);
    const inside = await confinePath("reference", absolute, roots).then(
      () => true,
      () => false,
    );
    if (!inside) continue;
    const info = await stat(absolute).catch(() => undefined);
    if (!info) continue;
    const start = match.index;
    drafts.push({
      kind: {
        case: "file",
        value: {
          url: pathToFileURL(absolute).href,
          filename: name,
          mime: info.isDirectory() ? "application/x-directory" : "text/plain",
          source: { kind: { case: "file", value: { path: absolute, text: { value: match[0], start, end: start + match[0].length } } } },
        },
      },
    });
  }
  return drafts;
}
