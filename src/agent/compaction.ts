import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import {
  MessageSchema,
  MessageWithPartsSchema,
  type AssistantMessage,
  type MessageWithParts,
  type UserMessage,
} from "../../gen/ledger/v1/message_pb.js";
import type { ModelRef } from "../../gen/ledger/v1/model_pb.js";
import { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { newId } from "../ids.js";
import { finalAnswer } from "../ledger/answer.js";
import { withParts } from "../ledger/messages.js";
import type { SessionLedger } from "../ledger/session-ledger.js";
import { getSession } from "../ledger/sessions.js";
import { listMessageRows } from "../storage/message-store.js";
import { finishAssistant, startAssistant } from "./assistant-message.js";
import { modelHistory, toPrune } from "./compacted-history.js";
import { conversationOrder } from "./conversation.js";
import { historyTarget, toModelMessages } from "./history.js";
import type { LoopDeps } from "./loop-deps.js";
import { toMessageError, type MessageErrorInit } from "./message-error.js";
import type { ResolvedModel } from "./providers.js";
import { runStep } from "./step.js";
import { stepCost } from "./usage.js";

/** The system prompt of a compaction's step (our own words; OpenCode has its `compaction` agent's prompt). */
export const SUMMARY_SYSTEM = [
  "You write the hand-over notes of a coding session between a user and an AI coding agent.",
  "Another agent will continue the work from your notes alone: the conversation before them will no longer be available to it.",
  "Write plain Markdown. Be specific: name files, functions, commands, decisions and open questions; leave out pleasantries.",
].join("\n");

/** The request that ends the messages of a compaction's step. */
export const SUMMARY_REQUEST = [
  "Write the hand-over notes for the conversation above, under these headings:",
  "## Task: what the user wants, in their terms, with every constraint or instruction they gave;",
  "## Done: what has been done so far and what it showed;",
  "## Files: the files and directories read, created or changed, one line each saying why they matter;",
  "## Next: what remains to do, starting with what was under way.",
].join("\n");

/** What a compaction is made for. */
export interface CompactionRequest {
  /** The model that writes the summary (and that the messages name). */
  model: ModelRef;
  /** The agent the messages name. */
  agent: string;
  /** The model option set of the step, when one applies (the turn's). */
  variant?: string;
  /** Started by the loop (an overflow) rather than by Summarize: the `compaction` part's `auto` and `overflow`. */
  auto: boolean;
  /** Aborts the summary's step (the summary then gets an aborted error). */
  signal: AbortSignal;
}

/**
 * Compacts a session (OpenCode `SessionCompaction.create` + `process`): stores a user message
 * (agent, model, variant of `request`) with one `compaction` part (`auto`, `overflow` = `auto`),
 * then an assistant message answering it with `summary` set, written by one model step without
 * tools: system {@link SUMMARY_SYSTEM}, the messages the model would be sent now
 * (`sinceCompaction`: an earlier summary and what followed it) and {@link SUMMARY_REQUEST} as the
 * last user message. A model that cannot be resolved or a failed step leaves the error on the
 * summary message (a failed summary is not used: `sinceCompaction` skips it). A turn under way
 * goes on after it (its next steps are sent the summary and `CONTINUE_TEXT`, see
 * `modelHistory`). Every write is an event on the session, as for any reply.
 *
 * @returns the summary message with its parts.
 */
export async function compactSession(
  deps: LoopDeps,
  ledger: SessionLedger,
  sessionId: string,
  request: CompactionRequest,
): Promise<MessageWithParts> {
  const session = await getSession(deps, sessionId);
  const history = modelHistory(conversationOrder(await withParts(deps.db, await listMessageRows(deps.db, sessionId, {}))), {
    continuing: false,
  });
  const user = await addUser(ledger, sessionId, request, { case: "compaction", value: { auto: request.auto, overflow: request.auto } });
  const assistant = await startAssistant(ledger, session.directory, user, { summary: true });
  await writeSummary(deps, ledger, sessionId, assistant, history, request);
  return (
    (await finalAnswer(deps, sessionId, user.id)) ??
    create(MessageWithPartsSchema, { message: { kind: { case: "assistant", value: assistant } } })
  );
}

/**
 * Prunes old tool outputs (OpenCode `SessionCompaction.prune`, run when a turn ends): sets
 * `time_compacted` on the completed tool parts `toPrune` picks from the session's history, with
 * the limits of `compaction` in config; does nothing when `compaction.prune` is off. Each part is
 * saved again (a `part_updated` event); its output stays stored.
 *
 * @returns how many parts were pruned.
 */
export async function pruneSession(deps: LoopDeps, ledger: SessionLedger, sessionId: string): Promise<number> {
  const config = deps.config.compaction;
  if (!config.prune) return 0;
  const history = conversationOrder(await withParts(deps.db, await listMessageRows(deps.db, sessionId, {})));
  const parts = toPrune(history, { protectTokens: config.protectTokens, minimumTokens: config.minimumTokens });
  const now = timestampNow();
  for (const part of parts) {
    if (part.kind.case !== "tool" || part.kind.value.state?.status.case !== "completed") continue;
    part.kind.value.state.status.value.timeCompacted = now;
    await ledger.savePart(part, { existing: true });
  }
  return parts.length;
}

async function addUser(
  ledger: SessionLedger,
  sessionId: string,
  request: CompactionRequest,
  kind: MessageInitShape<typeof PartSchema>["kind"],
): Promise<UserMessage> {
  const message = create(MessageSchema, {
    kind: {
      case: "user",
      value: {
        id: newId("msg"),
        sessionId,
        agent: request.agent,
        model: request.model,
        variant: request.variant,
        timeCreated: timestampNow(),
      },
    },
  });
  await ledger.addMessage(message);
  await ledger.savePart(create(PartSchema, { id: newId("prt"), sessionId, messageId: message.kind.value!.id, kind }));
  return message.kind.value as UserMessage;
}

/** Runs the summary's step into `assistant` and completes it; returns its error, if any. */
async function writeSummary(
  deps: LoopDeps,
  ledger: SessionLedger,
  sessionId: string,
  assistant: AssistantMessage,
  history: MessageWithParts[],
  request: CompactionRequest,
): Promise<MessageErrorInit | undefined> {
  let model: ResolvedModel;
  try {
    model = await deps.models.resolve(request.model);
  } catch (error) {
    const messageError = toMessageError(error, request.model.providerId, false);
    await finishAssistant(ledger, assistant, { error: messageError });
    return messageError;
  }
  const messages = toModelMessages(history, historyTarget(model));
  const result = await runStep({
    ledger,
    sessionId,
    messageId: assistant.id,
    model,
    variant: request.variant,
    system: SUMMARY_SYSTEM,
    recordContent: deps.config.telemetry.recordContent,
    messages: [...messages, { role: "user", content: [{ type: "text", text: SUMMARY_REQUEST }] }],
    signal: request.signal,
    retry: deps.config.retry,
  });
  deps.metrics?.observeStep(model, result);
  const aborted = result.aborted || request.signal.aborted;
  let error: MessageErrorInit | undefined =
    result.error || aborted ? toMessageError(result.error, model.providerId, aborted, request.signal.reason) : undefined;
  if (!error && result.finishReason === "length")
    error = { message: "The model stopped at its output token limit", kind: { case: "outputLength", value: {} } };
  await finishAssistant(ledger, assistant, {
    error,
    finish: result.finishReason,
    usage: result.usage,
    cost: result.usage ? stepCost(model.config, result.usage) : 0,
  });
  return error;
}
