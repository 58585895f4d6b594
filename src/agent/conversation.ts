import type { AssistantMessage, MessageWithParts, UserMessage } from "../../gen/ledger/v1/message_pb.js";
import { isCompaction } from "./compacted-history.js";

/** The user message the loop should answer next, with the conversation to send for it. */
export interface Work {
  user: UserMessage;
  /** Messages in conversation order up to and including `user`'s answers so far. */
  conversation: MessageWithParts[];
  /** Steps already taken for `user` (assistant messages answering it). */
  steps: number;
  /** Subtask parts of `user` not run yet, in order (each runs as a `task` tool call). */
  subtasks: Array<{ partId: string; prompt: string; description: string; agent: string; model?: { providerId: string; modelId: string } }>;
  /**
   * Agents `user` names in agent parts (`@explore`), in order: the `task` tool runs these without
   * weighing the `task` permission (OpenCode's `bypassAgentCheck`, narrowed to the named agents).
   */
  mentioned: string[];
}

/**
 * Orders stored messages as a conversation: each user message followed by the assistant
 * messages that answer it (`parent_id`), in position order. Messages are stored by position, and
 * a prompt that arrives while the loop answers an earlier one is stored before that answer's
 * later steps; the model must still see each answer right after its question.
 *
 * A compaction (a user message holding a `compaction` part, with its summary) is written by the
 * loop or Summarize, never queued: it stays where it was stored among the answers, right after
 * the last assistant message stored before it (else after the last message before it), so a
 * turn compacted half-way reads: its question, its first steps, the compaction, its later steps.
 */
export function conversationOrder(history: MessageWithParts[]): MessageWithParts[] {
  const answers = new Map<string, MessageWithParts[]>();
  for (const entry of history) {
    const m = entry.message?.kind;
    if (m?.case === "assistant") answers.set(m.value.parentId, [...(answers.get(m.value.parentId) ?? []), entry]);
  }
  const out: MessageWithParts[] = [];
  for (const entry of history) {
    const m = entry.message?.kind;
    if (m?.case !== "user" || isCompaction(entry)) continue;
    out.push(entry, ...(answers.get(m.value.id) ?? []));
  }
  for (let i = 0; i < history.length; i++) {
    const entry = history[i]!;
    if (!isCompaction(entry)) continue;
    const before = history.slice(0, i);
    const anchor = before.findLast((e) => e.message?.kind.case === "assistant") ?? before.at(-1);
    const at = anchor ? out.indexOf(anchor) + 1 : 0;
    out.splice(at, 0, entry, ...(answers.get(entry.message!.kind.value!.id) ?? []));
  }
  return out;
}

/**
 * Finds the earliest user message that is not answered yet (OpenCode `SessionPrompt.loop`
 * answers only the last one; we answer each in order). A user message is answered when its last
 * assistant message is completed and either failed or finished for a reason other than
 * `tool-calls`; an assistant message left incomplete by a crash also counts as an answer (so the
 * loop never repeats a half-done step on its own), and so does one that used `maxSteps` steps.
 * `resume` names a user message whose interrupted or aborted answer should be continued
 * (ResumeSession). `no_reply` messages are context only, and so are compactions (their summary
 * is written by the compaction, never by a step); a compaction made half-way through a turn is
 * part of that turn's answers in the conversation (`conversationOrder`), and the turn goes on.
 */
export function nextWork(
  history: MessageWithParts[],
  options: { maxSteps?: (user: UserMessage) => number; resume?: string } = {},
): Work | undefined {
  const ordered = conversationOrder(history);
  for (let i = 0; i < ordered.length; i++) {
    const m = ordered[i]!.message?.kind;
    if (m?.case !== "user" || m.value.noReply || isCompaction(ordered[i]!)) continue;
    const answers: AssistantMessage[] = [];
    let j = i + 1;
    for (; j < ordered.length && (ordered[j]!.message?.kind.case === "assistant" || isCompaction(ordered[j]!)); j++) {
      const answer = ordered[j]!.message!.kind;
      if (answer.case === "assistant" && answer.value.parentId === m.value.id) answers.push(answer.value);
    }
    const last = answers.at(-1);
    const resuming = options.resume === m.value.id && last !== undefined && (!last.time?.completed || isInterruption(last));
    if (!resuming && last && (last.error || !last.time?.completed || last.finish !== "tool-calls")) continue;
    if (!resuming && answers.length >= (options.maxSteps?.(m.value) ?? Infinity)) continue;
    // Later user messages wait their turn: the model sees only what came before this one.
    const done = new Set(
      ordered.slice(i + 1, j).flatMap((e) => e.parts.flatMap((p) => (p.kind.case === "tool" ? [p.kind.value.callId] : []))),
    );
    const subtasks = ordered[i]!.parts.flatMap((p) =>
      p.kind.case === "subtask" && !done.has(p.id)
        ? [
            {
              partId: p.id,
              prompt: p.kind.value.prompt,
              description: p.kind.value.description,
              agent: p.kind.value.agent,
              model: p.kind.value.model,
            },
          ]
        : [],
    );
    const mentioned = ordered[i]!.parts.flatMap((p) => (p.kind.case === "agent" ? [p.kind.value.name] : []));
    return { user: m.value, conversation: ordered.slice(0, j), steps: answers.length, subtasks, mentioned };
  }
  return undefined;
}

/** An answer cut short by a crash, a shutdown or an abort (ResumeSession may continue it). */
export function isInterruption(message: AssistantMessage): boolean {
  const kind = message.error?.kind.case;
  return kind === "interrupted" || kind === "aborted";
}
