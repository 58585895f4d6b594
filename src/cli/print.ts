import { Code, type ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { JsonObject } from "@bufbuild/protobuf";
import { createTwoFilesPatch } from "diff";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { MessageError } from "../../gen/ledger/v1/error_pb.js";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { PermissionReply } from "../../gen/ledger/v1/permission_pb.js";
import type { AssistantMessage, FileDiff, MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import type { ModelRef } from "../../gen/ledger/v1/model_pb.js";
import type { Session } from "../../gen/ledger/v1/session_pb.js";
import type { Todo } from "../../gen/ledger/v1/todo_pb.js";

/**
 * Control characters a terminal acts on: C0 but tab and newline, a carriage return not before a
 * newline, DEL and C1; and the bidirectional overrides and isolates (U+202A–U+202E,
 * U+2066–U+2069), which make a terminal show text in another order than it is ("Trojan Source").
 */
const TERMINAL_CONTROLS = /[\u0000-\u0008\u000b-\u000c\u000e-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]|\r(?!\n)/g;

/**
 * Text from a session (a model's answer, a tool's output, a title) made safe to print on a
 * terminal: control characters other than tab and newline are shown, not sent (C0 in caret
 * notation, `ESC` as `^[`, a lone carriage return as `^M`; DEL, C1 and the bidirectional controls
 * as JSON escapes, `\u007f`, `\u009b`, `\u202e`), so stored text cannot clear the screen, move the
 * cursor, set the window title, hide what precedes it or show it reordered. A JSON line passes through with the same value: `JSON.stringify`
 * escapes C0 itself, and leaves DEL and C1 raw, which this writes as the escapes JSON reads back.
 */
export function terminalSafe(text: string): string {
  return text.replace(TERMINAL_CONTROLS, (c) => {
    const code = c.charCodeAt(0);
    if (code < 0x20) return `^${String.fromCharCode(code + 64)}`;
    return `\\u${code.toString(16).padStart(4, "0")}`;
  });
}

/** Lines of a text part shown by `formatMessage` before eliding the rest. */
export const PREVIEW_LINES = 4;

/**
 * A readable view of a stored message: a header (id, role, agent, model; for an assistant
 * message its finish reason and error) and one entry per part: its kind, then what it holds —
 * text and reasoning (first lines, `[synthetic]` flag), files, tool calls (`read  completed
 * notes.txt`, an error with its first line), step finishes (`reason=stop  tokens in N, out N,
 * reasoning N, cache r/w N/N  cost $0.0000`), retries, agents, subtasks, snapshots, patches.
 */
export function formatMessage(entry: MessageWithParts): string {
  const message = entry.message?.kind;
  const lines: string[] = [];
  if (message?.case === "user") {
    const m = message.value;
    const model = m.model ? `${m.model.providerId}/${m.model.modelId}${m.variant ? ` (${m.variant})` : ""}` : "(none)";
    lines.push(`message ${m.id}  user  agent=${m.agent}  model=${model}`);
  } else if (message?.case === "assistant") {
    const m = message.value;
    const finish = m.finish ? `  finish=${m.finish}` : "";
    const error = m.error ? `  error=${errorKind(m.error)}: ${firstLine(m.error.message)}` : "";
    const model = m.model ? `${m.model.providerId}/${m.model.modelId}` : "(none)";
    lines.push(`message ${m.id}  assistant  agent=${m.agent}  model=${model}${finish}${error}`);
  }
  entry.parts.forEach((part, i) => lines.push(...formatPart(part, i + 1)));
  return lines.join("\n");
}

/**
 * One line per session: id, updated time, message count, directory and title. A line break or
 * tab in the title or directory is shown escaped (`\n`, `\t`), so each session stays one line.
 */
export function formatSession(session: Session): string {
  const updated = session.timeUpdated ? timestampDate(session.timeUpdated).toISOString() : "";
  return `${session.id}  ${updated}  ${String(session.messageCount).padStart(4)} msgs  ${oneLine(session.directory)}  ${oneLine(session.title)}`;
}

/** `text` with CR, LF and tab written as `\r`, `\n`, `\t`. */
function oneLine(text: string): string {
  return text.replace(/[\r\n\t]/g, (c) => ({ "\r": "\\r", "\n": "\\n", "\t": "\\t" })[c]!);
}

/**
 * What `ledger shell` prints for a completed bash part: the command's own output
 * (`metadata.output`; the part's output when that is missing) and the notes the part's output
 * carries for the model in its `<bash_metadata>` block, except a numeric exit code (the CLI
 * exits with it): e.g. "Output truncated: ...", a timeout, "exit code: killed by a signal".
 */
export function shellOutput(output: string, metadata: JsonObject | undefined): { output: string; notes: string[] } {
  const block = /\n\n<bash_metadata>\n([\s\S]*)\n<\/bash_metadata>$/.exec(output);
  const raw = typeof metadata?.output === "string" ? metadata.output : block ? output.slice(0, block.index) : output;
  const notes = block ? block[1]!.split("\n").filter((line) => line && !/^exit code: \d+$/.test(line)) : [];
  return { output: raw, notes };
}

/** Token counts as `Tokens` holds them; unset counts are 0. */
export type TokenCounts = { input?: bigint; output?: bigint; reasoning?: bigint; cache?: { read?: bigint; write?: bigint } };

/** `in N, out N, reasoning N, cache r/w N/N` for one step's or message's token counts (0 when unset). */
export function formatTokens(tokens: TokenCounts | undefined): string {
  return `in ${tokens?.input ?? 0n}, out ${tokens?.output ?? 0n}, reasoning ${tokens?.reasoning ?? 0n}, cache r/w ${tokens?.cache?.read ?? 0n}/${tokens?.cache?.write ?? 0n}`;
}

/** A cost in USD: `$0.0023`; six decimals below $0.0001 so a small non-zero cost never shows as 0. */
export function formatCost(cost: number): string {
  return `$${cost > 0 && cost < 0.0001 ? cost.toFixed(6) : cost.toFixed(4)}`;
}

/**
 * `tokens: in N, out N, reasoning N, cache r/w N/N · cost $0.0000 · steps N`, summed over the
 * run's assistant messages. `steps` counts the messages that reached a model: one that ended with
 * `model_not_found` (the model is not configured, so none was called, and
 * `ledger_loop_steps_total` counts nothing for it) is not a step.
 */
export function summary(messages: AssistantMessage[]): string {
  const steps = messages.filter((m) => m.error?.kind.case !== "modelNotFound").length;
  const sum = (pick: (m: AssistantMessage) => bigint | undefined) => messages.reduce((total, m) => total + (pick(m) ?? 0n), 0n);
  const cost = messages.reduce((total, m) => total + m.cost, 0);
  const tokens = {
    input: sum((m) => m.tokens?.input),
    output: sum((m) => m.tokens?.output),
    reasoning: sum((m) => m.tokens?.reasoning),
    cache: { read: sum((m) => m.tokens?.cache?.read), write: sum((m) => m.tokens?.cache?.write) },
  };
  return `tokens: ${formatTokens(tokens)} · cost ${formatCost(cost)} · steps ${steps}`;
}

/**
 * A line to print after a run's final error when the user can likely fix it in their setup, else
 * undefined: for an `api` error without an HTTP status whose message says the connection failed
 * (`ECONNREFUSED`, `ENOTFOUND`, `EAI_AGAIN`, `ETIMEDOUT`, the AI SDK's "Cannot connect to API"),
 * `hint: nothing answered for local/qwen: is its model server running and reachable
 * (provider.local.options.baseURL in ledger.json, if set)?` (the model's ref from `model`, the
 * assistant message's).
 */
export function errorHint(error: MessageError, model: ModelRef | undefined): string | undefined {
  if (error.kind.case !== "api" || error.kind.value.statusCode !== 0) return undefined;
  if (!/ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|Cannot connect to API/.test(error.message)) return undefined;
  const provider = model?.providerId || "<provider>";
  const name = model?.providerId ? `${model.providerId}/${model.modelId}` : "the model";
  return `hint: nothing answered for ${name}: is its model server running and reachable (provider.${provider}.options.baseURL in ledger.json, if set)?`;
}

/**
 * What `ledger prompt` prints on stderr for a run's final error: `error: <kind>: <message>\n`, and
 * the {@link errorHint} line after it when there is one.
 */
export function finalErrorText(error: MessageError, model: ModelRef | undefined): string {
  const hint = errorHint(error, model);
  return `error: ${errorKind(error)}: ${error.message}\n${hint ? `${hint}\n` : ""}`;
}

/** The error's kind as in the proto (`provider_auth`, `api`, `aborted`...). */
export function errorKind(error: MessageError): string {
  return (error.kind.case ?? "unknown").replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/**
 * The main argument of a tool call, for its line: a path, pattern or description, cut at 80
 * characters; `N items` for a todo list (`todowrite`: the list itself is printed on its own).
 */
export function describeInput(input: JsonObject | undefined): string {
  if (!input) return "";
  if (Array.isArray(input.todos)) return `${input.todos.length} items`;
  const key = ["filePath", "path", "pattern", "description", "url", "command"].find((k) => typeof input[k] === "string");
  const value = key ? String(input[key]) : Object.keys(input).length > 0 ? JSON.stringify(input) : "";
  return value.length > 80 ? `${value.slice(0, 79)}…` : value;
}

function formatPart(part: Part, n: number): string[] {
  return partLines(part, `${String(n).padStart(3)}. `);
}

/** A part's lines after `prefix`: its id, its kind (a column of 10), what it holds. */
function partLines(part: Part, prefix: string): string[] {
  // At least one space after the kind (`stepFinish` and `compaction` fill the column).
  const head = `${prefix}${part.id}  ${`${part.kind.case ?? "?"} `.padEnd(10)}`;
  switch (part.kind.case) {
    case "text": {
      const flag = part.kind.value.synthetic ? "[synthetic] " : "";
      return indent(head, preview(part.kind.value.text), flag);
    }
    case "file": {
      const f = part.kind.value;
      const url = f.url.startsWith("data:") ? `data:${f.mime};base64,… (${f.url.length} chars)` : f.url;
      return [`${head}${oneLine(f.mime)}  ${oneLine(f.filename)}  ${oneLine(url)}`];
    }
    case "reasoning":
      return indent(head, preview(part.kind.value.text));
    case "tool": {
      const tool = part.kind.value;
      const state = tool.state?.status;
      const input = describeInput(state?.value?.input);
      const error = state?.case === "error" ? `: ${firstLine(state.value.error)}` : "";
      return [`${head}${[tool.tool, state?.case ?? "pending", input].filter(Boolean).join("  ")}${error}`];
    }
    case "stepStart":
      return [`${head}${part.kind.value.snapshot ? `snapshot=${part.kind.value.snapshot}` : ""}`.trimEnd()];
    case "stepFinish": {
      const f = part.kind.value;
      return [`${head}reason=${f.reason || "?"}  tokens ${formatTokens(f.tokens)}  cost ${formatCost(f.cost)}`];
    }
    case "retry": {
      const r = part.kind.value;
      return [`${head}attempt ${r.attempt}${r.error ? `: ${errorKind(r.error)}: ${firstLine(r.error.message)}` : ""}`];
    }
    case "agent":
      return [`${head}@${part.kind.value.name}`];
    case "subtask":
      return [`${head}${part.kind.value.agent}: ${part.kind.value.description || part.kind.value.prompt}`];
    case "snapshot":
      return [`${head}${part.kind.value.snapshot}`];
    case "patch":
      return [`${head}${part.kind.value.hash}  ${part.kind.value.files.join(", ")}`];
    case "compaction":
      return [`${head}${part.kind.value.auto ? "auto" : "manual"}${part.kind.value.overflow ? ", context overflow" : ""}`];
    default:
      return [head.trimEnd()];
  }
}

/** `head`, `flag` and the first line, the other lines indented to start under the flag. */
function indent(head: string, lines: string[], flag = ""): string[] {
  return [head + flag + (lines[0] ?? ""), ...lines.slice(1).map((l) => `${" ".repeat(head.length)}${l}`)];
}

function firstLine(text: string): string {
  const line = text.split("\n", 1)[0] ?? "";
  return line.length > 160 ? `${line.slice(0, 159)}…` : line;
}

function preview(text: string): string[] {
  const lines = text.split("\n");
  const shown = lines.slice(0, PREVIEW_LINES).map((l) => (l.length > 160 ? `${l.slice(0, 160)}…` : l));
  if (lines.length > PREVIEW_LINES) shown.push(`… (${lines.length - PREVIEW_LINES} more lines)`);
  return shown;
}

/**
 * One changed file as a unified diff (`--- a/file`, `+++ b/file`, hunks), from its before and
 * after contents; a binary file (both empty, no line counts) prints as `Binary file <file> changed`.
 */
export function formatDiff(diff: FileDiff): string {
  if (!diff.before && !diff.after && diff.additions === 0 && diff.deletions === 0) return `Binary file ${diff.file} changed\n`;
  const patch = createTwoFilesPatch(`a/${diff.file}`, `b/${diff.file}`, diff.before, diff.after, "", "", { context: 3 });
  // Drop jsdiff's "Index:"/"====" header: the --- / +++ lines name the file.
  return patch.replace(/^(Index:.*\n)?=+\n/, "");
}

/** The box of a todo's status in {@link formatTodos}; an unknown status shows as `[?]`. */
export const TODO_MARKS: Readonly<Record<string, string>> = {
  pending: "[ ]",
  in_progress: "[~]",
  completed: "[x]",
  cancelled: "[-]",
};

/**
 * A todo list for a terminal: a header `todos (D/N done):` (D counts `completed`), then one line
 * per item in order, `  [ ] content  (priority)`, the box from {@link TODO_MARKS} (`[ ]` pending,
 * `[~]` in progress, `[x]` completed, `[-]` cancelled); `todos: none` for an empty list. The
 * content's first line only. Each line without its `\n`.
 */
export function formatTodos(todos: readonly Pick<Todo, "content" | "status" | "priority">[]): string[] {
  if (todos.length === 0) return ["todos: none"];
  const done = todos.filter((t) => t.status === "completed").length;
  return [
    `todos (${done}/${todos.length} done):`,
    ...todos.map((t) => `  ${TODO_MARKS[t.status] ?? "[?]"} ${firstLine(t.content)}${t.priority ? `  (${t.priority})` : ""}`),
  ];
}

/**
 * What `ledger watch` prints for one event, one line or more, or undefined for a `partDelta`
 * (the part's next `partUpdated` shows its text; deltas are one per token): `#<seq>  <kind>`,
 * then for a message its header as `ledger messages` prints it, for a part its line (`text`
 * first lines, `tool  read  completed  notes.txt`, ...), for a status `idle`, `busy` or
 * `retry attempt N: message`, for an error its kind and first line, for a switch the new agent
 * or model, for a permission ask its id, permission and patterns, for a reply `once`, `always` or
 * `reject`, for a todo update its items (indented lines below).
 */
export function formatEvent(event: SessionEvent): string | undefined {
  const head = `#${event.seq}  ${event.kind.case ?? "unknown"}`;
  const kind = event.kind;
  switch (kind.case) {
    case "partDelta":
      return undefined;
    case "messageUpdated":
      return kind.value.message
        ? `${head}  ${formatMessage({ message: kind.value.message, parts: [] } as unknown as MessageWithParts)}`
        : head;
    case "partUpdated":
      return kind.value.part ? partLines(kind.value.part, `${head}  `).join("\n") : head;
    case "messageRemoved":
      return `${head}  ${kind.value.messageId}`;
    case "partRemoved":
      return `${head}  ${kind.value.partId}`;
    case "sessionStatus": {
      const status = kind.value.status;
      if (status.case === "retry") return `${head}  retry attempt ${status.value.attempt}: ${firstLine(status.value.message)}`;
      return `${head}  ${status.case ?? "idle"}`;
    }
    case "sessionError":
      return `${head}  ${kind.value.error ? `${errorKind(kind.value.error)}: ${firstLine(kind.value.error.message)}` : "unknown error"}`;
    case "agentSwitched":
      return `${head}  ${kind.value.current}`;
    case "modelSwitched":
      return kind.value.current ? `${head}  ${kind.value.current.providerId}/${kind.value.current.modelId}` : head;
    case "prompted":
      return `${head}  ${kind.value.messageId}${kind.value.noReply ? "  noReply" : ""}`;
    case "synthetic":
      return `${head}  ${kind.value.messageId}  ${kind.value.partIds.join(", ")}`;
    case "command":
      return `${head}  /${kind.value.command}  ${kind.value.messageId}`;
    case "permissionAsked": {
      const ask = kind.value.permission;
      return ask ? `${head}  ${ask.id}  ${ask.permission}  ${ask.patterns.map(oneLine).join(", ")}` : head;
    }
    case "permissionReplied":
      return `${head}  ${kind.value.permissionId}  ${PermissionReply[kind.value.reply]?.toLowerCase() ?? kind.value.reply}`;
    case "todoUpdated":
      return [head, ...formatTodos(kind.value.todos).map((line) => `  ${line}`)].join("\n");
    case "sessionUpdated":
    case "sessionDeleted":
      return kind.value.session ? `${head}  ${formatSession(kind.value.session)}` : head;
    default:
      return head;
  }
}

/**
 * What to do next, in the CLI's terms, for an error whose message speaks the API's (a trial,
 * 2026-12-04): a token the server wants (`UNAUTHENTICATED` without `LEDGER_TOKEN` set), or a run
 * that goes on after the call ended (`RUN_CONTINUES`, `DRAINING`: `ledger watch --after`).
 * Undefined when there is nothing to add.
 */
export function callErrorHint(error: ConnectError, env: NodeJS.ProcessEnv): string | undefined {
  if (error.code === Code.Unauthenticated && !env.LEDGER_TOKEN)
    return "the server wants a token: set LEDGER_TOKEN to its auth.token (or to a JWT, e.g. from ledger token --sub NAME)";
  const info = error.findDetails(ErrorInfoSchema)[0];
  const session = info?.metadata.session_id;
  const after = info?.metadata.after_seq;
  if ((info?.reason === "RUN_CONTINUES" || info?.reason === "DRAINING") && session && after)
    return `follow the run with: ledger watch ${session} --after ${after} --url <the ledger serve that runs it>`;
  return undefined;
}
