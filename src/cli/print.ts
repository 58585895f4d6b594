import type { JsonObject } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { MessageError } from "../../gen/ledger/v1/error_pb.js";
import type { AssistantMessage, MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import type { Session } from "../../gen/ledger/v1/session_pb.js";

/** Lines of a text part shown by `formatMessage` before eliding the rest. */
export const PREVIEW_LINES = 4;

/**
 * A readable view of a stored message: a header (id, role, agent, model) and one entry per
 * part with its kind, `[synthetic]` flag and the first lines of its text.
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
    lines.push(`message ${m.id}  assistant  agent=${m.agent}  model=${m.model?.providerId}/${m.model?.modelId}`);
  }
  entry.parts.forEach((part, i) => lines.push(...formatPart(part, i + 1)));
  return lines.join("\n");
}

/** One line per session: id, updated time, message count, directory and title. */
export function formatSession(session: Session): string {
  const updated = session.timeUpdated ? timestampDate(session.timeUpdated).toISOString() : "";
  return `${session.id}  ${updated}  ${String(session.messageCount).padStart(4)} msgs  ${session.directory}  ${session.title}`;
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
  const shown = cost > 0 && cost < 0.0001 ? cost.toFixed(6) : cost.toFixed(4);
  return (
    `tokens: in ${sum((m) => m.tokens?.input)}, out ${sum((m) => m.tokens?.output)}, reasoning ${sum((m) => m.tokens?.reasoning)}, ` +
    `cache r/w ${sum((m) => m.tokens?.cache?.read)}/${sum((m) => m.tokens?.cache?.write)} · cost $${shown} · steps ${steps}`
  );
}

/** The error's kind as in the proto (`provider_auth`, `api`, `aborted`...). */
export function errorKind(error: MessageError): string {
  return (error.kind.case ?? "unknown").replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** The main argument of a tool call, for its line: a path, pattern or description, cut at 80 characters. */
export function describeInput(input: JsonObject | undefined): string {
  if (!input) return "";
  const key = ["filePath", "path", "pattern", "description", "url", "command"].find((k) => typeof input[k] === "string");
  const value = key ? String(input[key]) : Object.keys(input).length > 0 ? JSON.stringify(input) : "";
  return value.length > 80 ? `${value.slice(0, 79)}…` : value;
}

function formatPart(part: Part, n: number): string[] {
  const head = `${String(n).padStart(3)}. ${part.id}  ${(part.kind.case ?? "?").padEnd(10)}`;
  switch (part.kind.case) {
    case "text": {
      const flag = part.kind.value.synthetic ? "[synthetic] " : "";
      return [head + flag + preview(part.kind.value.text)[0], ...preview(part.kind.value.text).slice(1).map((l) => `${" ".repeat(head.length)}${l}`)];
    }
    case "file": {
      const f = part.kind.value;
      const url = f.url.startsWith("data:") ? `data:${f.mime};base64,… (${f.url.length} chars)` : f.url;
      return [`${head}${f.mime}  ${f.filename}  ${url}`];
    }
    case "agent":
      return [`${head}@${part.kind.value.name}`];
    case "subtask":
      return [`${head}${part.kind.value.agent}: ${part.kind.value.description || part.kind.value.prompt}`];
    default:
      return [head];
  }
}

function preview(text: string): string[] {
  const lines = text.split("\n");
  const shown = lines.slice(0, PREVIEW_LINES).map((l) => (l.length > 160 ? `${l.slice(0, 160)}…` : l));
  if (lines.length > PREVIEW_LINES) shown.push(`… (${lines.length - PREVIEW_LINES} more lines)`);
  return shown;
}
