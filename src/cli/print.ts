import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
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
