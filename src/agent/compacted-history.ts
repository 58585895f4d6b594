import { create } from "@bufbuild/protobuf";
import { MessageWithPartsSchema, type MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import type { StepUsage } from "./ai-sdk-events.js";
import { OUTPUT_TOKEN_MAX } from "./providers.js";

/** Characters per token of the estimates below (OpenCode `Token.estimate`). */
export const CHARS_PER_TOKEN = 4;

/** What the model is sent instead of a pruned tool output (`time_compacted` set). */
export const PRUNED_OUTPUT = "[old tool output cleared]";

/** The user text the model is sent for a `compaction` part (OpenCode sends its own question). */
export const COMPACTION_QUESTION = "Summarize the conversation so far.";

/**
 * The user text the model is sent after a summary that cut a turn half-way (OpenCode stores a
 * synthetic user message with its own such text; we only send it).
 */
export const CONTINUE_TEXT =
  "The conversation was summarized to fit the model's context. Carry on with the task if there are next steps; if it is unclear how to go on, stop and ask.";

/** Estimated tokens of `text`: its length in UTF-16 code units / {@link CHARS_PER_TOKEN}, rounded (OpenCode `Token.estimate`). */
export function estimateTokens(text: string): number {
  return Math.round(text.length / CHARS_PER_TOKEN);
}

/**
 * The part of a conversation the model is sent (OpenCode `MessageV2.filterCompacted`): from the
 * user message of the latest finished compaction (one holding a `compaction` part, answered by a
 * completed assistant message with `summary` and no error) to the end. The model thus sees the
 * compaction's question, the summary and what came after, and nothing before. `conversation` is in
 * conversation order (`conversationOrder`); without a finished compaction it is returned whole.
 * A compaction whose messages were reverted away is gone from the stored history, so the
 * conversation before it comes back.
 */
export function sinceCompaction(conversation: MessageWithParts[]): MessageWithParts[] {
  const summarized = new Set<string>();
  for (let i = conversation.length - 1; i >= 0; i--) {
    const kind = conversation[i]!.message?.kind;
    if (kind?.case === "assistant" && kind.value.summary && kind.value.time?.completed && !kind.value.error)
      summarized.add(kind.value.parentId);
    if (kind?.case === "user" && summarized.has(kind.value.id) && isCompaction(conversation[i]!)) return conversation.slice(i);
  }
  return conversation;
}

/**
 * What the model is sent of a conversation: `sinceCompaction`, plus, right after the summary, a
 * user message with the text {@link CONTINUE_TEXT} when the summary cut a turn half-way: when an
 * assistant message follows it, or when it ends the history and `continuing` (the history is
 * sent to go on with a turn whose question is before the compaction). That message is not
 * stored (OpenCode stores one). A compaction whose summary failed (completed with an error) is
 * left out with its summary: its question would otherwise reach the model unanswered, right
 * before the next prompt.
 */
export function modelHistory(conversation: MessageWithParts[], options: { continuing: boolean }): MessageWithParts[] {
  const failed = new Set<string>();
  for (const entry of conversation) {
    const kind = entry.message?.kind;
    if (kind?.case === "assistant" && kind.value.summary && kind.value.time?.completed && kind.value.error) failed.add(kind.value.parentId);
  }
  const kept =
    failed.size === 0
      ? conversation
      : conversation.filter((entry) => {
          const kind = entry.message?.kind;
          if (kind?.case === "assistant") return !(kind.value.summary && failed.has(kind.value.parentId));
          return !(kind?.case === "user" && failed.has(kind.value.id) && isCompaction(entry));
        });
  const sent = sinceCompaction(kept);
  if (sent === kept) return sent;
  const next = sent[2]?.message?.kind.case;
  if (next === "user" || (next === undefined && !options.continuing)) return sent;
  const sessionId = sent[0]?.message?.kind.value?.sessionId ?? "";
  const continuation = create(MessageWithPartsSchema, {
    message: { kind: { case: "user", value: { sessionId } } },
    parts: [{ sessionId, kind: { case: "text", value: { text: CONTINUE_TEXT, synthetic: true } } }],
  });
  return [...sent.slice(0, 2), continuation, ...sent.slice(2)];
}

/** True for a user message holding a `compaction` part. */
export function isCompaction(entry: MessageWithParts): boolean {
  return entry.message?.kind.case === "user" && entry.parts.some((p) => p.kind.case === "compaction");
}

/** A model's token limits (`limit` of the model in ledger.json, as in opencode.json). */
export interface ModelLimit {
  /** The context window (input and output), tokens; 0 or unset: unknown. */
  context?: number;
  /** The most tokens the model writes in one step; reserved for the next step's answer. */
  output?: number;
}

/**
 * Whether a finished step left the conversation too long for the next one (OpenCode
 * `SessionCompaction.isOverflow`): its input tokens (uncached, cache reads and cache writes) plus
 * the model's output reserve (`limit.output`, at most `OUTPUT_TOKEN_MAX` as each step asks for
 * no more; 0 when unknown) exceed `limit.context`. A model without a known context limit never
 * overflows. OpenCode also counts the step's output tokens (and reserves 32,000 when the output
 * limit is unknown); we count only what the next step will be sent again as input.
 */
export function isOverflow(usage: StepUsage | undefined, limit: ModelLimit | undefined): boolean {
  if (!usage || !limit?.context) return false;
  const input = usage.input + usage.cacheRead + usage.cacheWrite;
  return input + Math.min(limit.output ?? 0, OUTPUT_TOKEN_MAX) > limit.context;
}

/** The thresholds of {@link toPrune}, in estimated tokens. */
export interface PruneLimits {
  /** The newest tool outputs, up to this many tokens, are kept. */
  protectTokens: number;
  /** Nothing is pruned unless the outputs to clear pass this many tokens. */
  minimumTokens: number;
}

/**
 * The completed tool parts whose output should no longer be sent to the model (OpenCode
 * `SessionCompaction.prune`): going back from the newest message, skipping the last two user
 * turns, stopping at a compaction's summary or at an output already pruned, outputs are counted
 * ({@link estimateTokens}); those past the newest `protectTokens` are cleared, but only when they
 * add up to more than `minimumTokens` (else none). `history` is in conversation order. OpenCode
 * also never prunes its `skill` tool, which the ledger does not have.
 */
export function toPrune(history: MessageWithParts[], limits: PruneLimits): Part[] {
  let total = 0;
  let pruned = 0;
  let turns = 0;
  const parts: Part[] = [];
  for (let i = history.length - 1; i >= 0; i--) {
    const kind = history[i]!.message?.kind;
    if (kind?.case === "user") turns++;
    if (turns < 2) continue;
    if (kind?.case === "assistant" && kind.value.summary) break;
    const entryParts = history[i]!.parts;
    for (let j = entryParts.length - 1; j >= 0; j--) {
      const part = entryParts[j]!;
      const state = part.kind.case === "tool" ? part.kind.value.state?.status : undefined;
      if (state?.case !== "completed") continue;
      if (state.value.timeCompacted) return pruned > limits.minimumTokens ? parts : [];
      const estimate = estimateTokens(state.value.output);
      total += estimate;
      if (total <= limits.protectTokens) continue;
      pruned += estimate;
      parts.push(part);
    }
  }
  return pruned > limits.minimumTokens ? parts : [];
}
