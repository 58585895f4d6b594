import type { JsonObject } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import type { AssistantMessage, MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import type { SessionService } from "../../gen/ledger/v1/service_pb.js";

/**
 * A compact view of a stored assistant-side part: its kind, and for text/reasoning the text and
 * provider metadata, for tools the call id, tool, state and metadata. Other kinds: the kind only.
 */
export type PartView =
  | { kind: "text" | "reasoning"; text: string; metadata?: JsonObject }
  | { kind: "tool"; callId: string; tool: string; status?: string; metadata?: JsonObject }
  | { kind: string };

/** See {@link PartView}. */
export function partView(part: Part): PartView {
  switch (part.kind.case) {
    case "text":
    case "reasoning":
      return { kind: part.kind.case, text: part.kind.value.text, metadata: part.kind.value.metadata };
    case "tool":
      return {
        kind: "tool",
        callId: part.kind.value.callId,
        tool: part.kind.value.tool,
        status: part.kind.value.state?.status.case,
        metadata: part.kind.value.metadata,
      };
    default:
      return { kind: part.kind.case ?? "" };
  }
}

/** The assistant message of an entry, or undefined for a user message. */
export function assistantOf(entry: MessageWithParts | undefined): AssistantMessage | undefined {
  return entry?.message?.kind.case === "assistant" ? entry.message.kind.value : undefined;
}

/** Every message of a session (oldest first), with ids checked to ascend in stored order. */
export async function storedMessages(client: Client<typeof SessionService>, sessionId: string): Promise<MessageWithParts[]> {
  const { messages } = await client.listMessages({ sessionId });
  const ids = messages.map((m) => m.message!.kind.value!.id);
  const parts = messages.flatMap((m) => m.parts.map((p) => p.id));
  if (ids.join() !== [...ids].sort().join() || parts.join() !== [...parts].sort().join())
    throw new Error(`ids do not ascend in stored order: ${ids.join()} / ${parts.join()}`);
  return messages;
}
