import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part, PartInputSchema } from "../../gen/ledger/v1/part_pb.js";
import type { SessionService } from "../../gen/ledger/v1/service_pb.js";

/** A draft init shape, as clients send it. */
export type Draft = MessageInitShape<typeof PartInputSchema>;

/** A text draft. */
export const text = (value: string): Draft => ({ kind: { case: "text", value: { text: value } } });

/** A file draft with a URL and a declared mime. */
export const file = (url: string, mime = "text/plain", filename = ""): Draft => ({
  kind: { case: "file", value: { url, mime, filename } },
});

/** A file draft read through MCP server `clientName`: its `url` is the resource's `uri`. */
export const mcpResource = (clientName: string, uri: string, filename = "", mime = "text/plain"): Draft => ({
  kind: { case: "file", value: { url: uri, mime, filename, source: { kind: { case: "resource", value: { clientName, uri } } } } },
});

/** A compact view of a part: kind, synthetic flag, and its text / file fields. */
export function shape(part: Part): Record<string, unknown> {
  switch (part.kind.case) {
    case "text":
      return { kind: "text", synthetic: part.kind.value.synthetic, text: part.kind.value.text };
    case "file":
      return { kind: "file", mime: part.kind.value.mime, filename: part.kind.value.filename, url: part.kind.value.url };
    case "agent":
      return { kind: "agent", name: part.kind.value.name };
    case "subtask":
      return { kind: "subtask", agent: part.kind.value.agent, prompt: part.kind.value.prompt };
    default:
      return { kind: part.kind.case };
  }
}

/** Creates a session in `directory` and sends one no_reply prompt; returns the stored message. */
export async function promptOnce(
  client: Client<typeof SessionService>,
  directory: string,
  parts: Draft[],
  extra: { agent?: string; messageId?: string; sessionId?: string } = {},
): Promise<{ sessionId: string; message: MessageWithParts }> {
  const sessionId = extra.sessionId ?? (await client.createSession({ directory })).session!.id;
  const res = await client.prompt({ sessionId, noReply: true, parts, agent: extra.agent, messageId: extra.messageId });
  return { sessionId, message: res.message! };
}

/** The part's text, or "" when it is not a text part. */
export function partText(part: Part | undefined): string {
  return part?.kind.case === "text" ? part.kind.value.text : "";
}
