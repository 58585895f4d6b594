import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { timestampNow, ValueSchema } from "@bufbuild/protobuf/wkt";
import { MessageErrorSchema } from "../../gen/ledger/v1/error_pb.js";
import {
  AssistantTimeSchema,
  MessageSchema,
  type AssistantMessage,
  type Message,
  type UserMessage,
} from "../../gen/ledger/v1/message_pb.js";
import { TokensSchema } from "../../gen/ledger/v1/model_pb.js";
import { newId } from "../ids.js";
import type { SessionLedger } from "../ledger/session-ledger.js";
import { tokens, type StepUsage } from "./ai-sdk-events.js";
import type { MessageErrorInit } from "./message-error.js";

/** How an assistant message ended, as {@link finishAssistant} stores it. */
export interface AssistantOutcome {
  error?: MessageErrorInit;
  /** The finish reason; "error" when unset and `error` is set, else "". */
  finish?: string;
  usage?: StepUsage;
  /** USD. */
  cost?: number;
  structured?: unknown;
}

/**
 * Stores a new assistant message answering `user` (OpenCode `SessionProcessor`'s message):
 * `parent_id` = the user message, its agent, model, variant and system, `path` = `directory`,
 * `time.created` now; `summary` marks a compaction's summary (OpenCode `summary: true`).
 * Emits `message_updated`.
 */
export async function startAssistant(
  ledger: SessionLedger,
  directory: string,
  user: UserMessage,
  options: { summary?: boolean } = {},
): Promise<AssistantMessage> {
  const message = create(MessageSchema, {
    kind: {
      case: "assistant",
      value: {
        id: newId("msg"),
        sessionId: user.sessionId,
        parentId: user.id,
        agent: user.agent,
        model: user.model,
        variant: user.variant,
        system: user.system,
        path: { cwd: directory, root: directory },
        time: { created: timestampNow() },
        summary: options.summary ?? false,
      },
    },
  });
  await ledger.addMessage(message);
  return message.kind.value as AssistantMessage;
}

/**
 * Completes an assistant message: its error, finish reason, cost, tokens (from `usage`),
 * structured output and `time.completed` now. Emits `message_updated`.
 */
export async function finishAssistant(ledger: SessionLedger, assistant: AssistantMessage, outcome: AssistantOutcome): Promise<void> {
  const message: Message = create(MessageSchema, { kind: { case: "assistant", value: assistant } });
  const value = message.kind.value as AssistantMessage;
  if (outcome.error) value.error = create(MessageErrorSchema, outcome.error);
  value.finish = outcome.finish ?? (outcome.error ? "error" : "");
  value.cost = outcome.cost ?? 0;
  if (outcome.structured !== undefined) value.structured = fromJson(ValueSchema, outcome.structured as JsonValue);
  if (outcome.usage) value.tokens = create(TokensSchema, tokens(outcome.usage));
  value.time = create(AssistantTimeSchema, { created: assistant.time?.created, completed: timestampNow() });
  await ledger.saveMessage(message);
}
