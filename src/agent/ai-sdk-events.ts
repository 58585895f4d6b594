import type { TextStreamPart, ToolSet } from "ai";

/** Token counts of one model step. */
export interface StepUsage {
  input: number;
  output: number;
  reasoning: number;
  cacheRead: number;
  cacheWrite: number;
}

/**
 * What the loop consumes from a model step: our own event union, so the loop and the ledger
 * never see AI SDK types. Mirrors OpenCode's `toLLMEvents`.
 */
export type LoopEvent =
  | { type: "step-start" }
  | { type: "text-start" | "reasoning-start"; id: string; metadata?: Record<string, unknown> }
  /** `metadata`: provider state carried by this delta (Anthropic sends a thinking block's signature as an empty reasoning delta). */
  | { type: "text-delta" | "reasoning-delta"; id: string; text: string; metadata?: Record<string, unknown> }
  | { type: "text-end" | "reasoning-end"; id: string; metadata?: Record<string, unknown> }
  | { type: "tool-input-start"; callId: string; tool: string }
  | { type: "tool-call"; callId: string; tool: string; input: unknown; metadata?: Record<string, unknown> }
  | { type: "tool-result"; callId: string; tool: string; input: unknown; output: unknown }
  | { type: "tool-error"; callId: string; tool: string; input: unknown; error: unknown }
  | { type: "step-finish"; finishReason: string; usage: StepUsage; metadata?: Record<string, unknown> }
  | { type: "error"; error: unknown }
  | { type: "abort" }
  /** After a step asked for JSON output: the parsed value, or why there is none. */
  | { type: "structured"; value?: unknown; error?: unknown };

/**
 * Converts one AI SDK `fullStream` part into loop events (zero or one). Parts the loop does not
 * use are listed explicitly and dropped; a new part type fails the exhaustive check at compile time.
 */
export function toLoopEvents<T extends ToolSet>(part: TextStreamPart<T>): LoopEvent[] {
  switch (part.type) {
    case "text-start":
    case "reasoning-start":
      return [{ type: part.type, id: part.id, metadata: part.providerMetadata }];
    case "text-delta":
    case "reasoning-delta":
      return [{ type: part.type, id: part.id, text: part.text, metadata: part.providerMetadata }];
    case "text-end":
    case "reasoning-end":
      return [{ type: part.type, id: part.id, metadata: part.providerMetadata }];
    case "tool-input-start":
      return [{ type: "tool-input-start", callId: part.id, tool: part.toolName }];
    case "tool-call":
      return [{ type: "tool-call", callId: part.toolCallId, tool: part.toolName, input: part.input, metadata: part.providerMetadata }];
    case "tool-result":
      return part.preliminary
        ? []
        : [{ type: "tool-result", callId: part.toolCallId, tool: part.toolName, input: part.input, output: part.output }];
    case "tool-error":
      return [{ type: "tool-error", callId: part.toolCallId, tool: part.toolName, input: part.input, error: part.error }];
    case "finish-step":
      return [{ type: "step-finish", finishReason: part.finishReason, usage: stepUsage(part.usage), metadata: part.providerMetadata }];
    case "error":
      return [{ type: "error", error: part.error }];
    case "abort":
      return [{ type: "abort" }];
    case "start-step":
      return [{ type: "step-start" }];
    case "tool-input-delta":
    case "tool-input-end":
    case "tool-output-denied":
    case "tool-approval-request":
    case "source":
    case "file":
    case "start":
    case "finish":
    case "raw":
      return [];
    default: {
      const exhaustive: never = part;
      return exhaustive;
    }
  }
}

/** Our token counts from AI SDK usage; non-cached input excludes cache reads and writes. */
export function stepUsage(usage: {
  inputTokens: number | undefined;
  outputTokens: number | undefined;
  inputTokenDetails?: { noCacheTokens?: number; cacheReadTokens?: number; cacheWriteTokens?: number };
  outputTokenDetails?: { reasoningTokens?: number };
}): StepUsage {
  const cacheRead = usage.inputTokenDetails?.cacheReadTokens ?? 0;
  const cacheWrite = usage.inputTokenDetails?.cacheWriteTokens ?? 0;
  return {
    input: usage.inputTokenDetails?.noCacheTokens ?? Math.max(0, (usage.inputTokens ?? 0) - cacheRead - cacheWrite),
    output: usage.outputTokens ?? 0,
    reasoning: usage.outputTokenDetails?.reasoningTokens ?? 0,
    cacheRead,
    cacheWrite,
  };
}

/** Our `ledger.v1.Tokens` fields from step usage (total = input + output + cache read + cache write). */
export function tokens(u: StepUsage) {
  return {
    input: BigInt(u.input),
    output: BigInt(u.output),
    reasoning: BigInt(u.reasoning),
    cache: { read: BigInt(u.cacheRead), write: BigInt(u.cacheWrite) },
    total: BigInt(u.input + u.output + u.cacheRead + u.cacheWrite),
  };
}
