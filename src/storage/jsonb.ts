import { toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";

/**
 * A message's proto JSON form as the text of a JSONB value. Postgres JSONB cannot hold U+0000,
 * so any NUL character in a string becomes U+FFFD here, the last line of defence (drafts are
 * cleaned earlier so the stored and the returned text agree).
 */
export function toJsonb<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): string {
  return JSON.stringify(toJson(schema, message), (_key, value: unknown) => (typeof value === "string" ? value.replaceAll("\0", "\uFFFD") : value));
}
