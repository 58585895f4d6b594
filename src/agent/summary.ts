import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";

/** Characters of `UserMessageSummary.title`, "…" included when the line is cut. */
export const SUMMARY_TITLE_MAX = 80;

/** Characters of `UserMessageSummary.body`, "…" included when the text is cut. */
export const SUMMARY_BODY_MAX = 2000;

/** The text of a finished turn's `UserMessageSummary` (its `diffs` come from the snapshots). */
export interface TurnText {
  /** The first non-blank line of the prompt, trimmed; "" when the prompt has no text. */
  title: string;
  /** The turn's final assistant text; "" when its last step wrote none. */
  body: string;
}

/**
 * The `title` and `body` of the summary of the turn of user message `userId`, derived from the
 * stored messages without a model call. OpenCode (`SessionSummary.summarizeMessage`) asks a small
 * model for the title and, when the turn changed files, for the body; the ledger must not add
 * model calls (clients and tests count them), so:
 * - `title`: the first non-blank line of the user message's first non-synthetic text part,
 *   trimmed, cut to {@link SUMMARY_TITLE_MAX} characters (the last one "…" when cut);
 * - `body`: the last non-blank text part of the turn's last assistant message (the answer as the
 *   user read it, OpenCode's own body when the turn changed no file), cut to
 *   {@link SUMMARY_BODY_MAX} characters alike.
 *
 * `messages` are messages of the session with their parts: at least the user message and those
 * after it (the loop passes just the turn); a user message not among them gives two empty strings. Characters are Unicode code points (a cut never splits a surrogate pair).
 */
export function turnText(messages: readonly MessageWithParts[], userId: string): TurnText {
  const user = messages.find((m) => m.message?.kind.case === "user" && m.message.kind.value.id === userId);
  const prompt = user?.parts.find((p) => p.kind.case === "text" && !p.kind.value.synthetic);
  const line = (prompt?.kind.case === "text" ? prompt.kind.value.text : "").split(/\r?\n/).find((l) => l.trim() !== "") ?? "";
  const last = messages.filter((m) => m.message?.kind.case === "assistant" && m.message.kind.value.parentId === userId).at(-1);
  const answer = last?.parts.findLast((p) => p.kind.case === "text" && p.kind.value.text.trim() !== "");
  return {
    title: cut(line.trim(), SUMMARY_TITLE_MAX),
    body: cut(answer?.kind.case === "text" ? answer.kind.value.text : "", SUMMARY_BODY_MAX),
  };
}

/** `text` when it has at most `max` code points, else its first `max - 1` and "…". */
function cut(text: string, max: number): string {
  const chars = Array.from(text);
  return chars.length <= max ? text : `${chars.slice(0, max - 1).join("")}…`;
}
