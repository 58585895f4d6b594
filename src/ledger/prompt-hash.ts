import { createHash } from "node:crypto";
import { create, toJson, type JsonValue } from "@bufbuild/protobuf";
import { PromptRequestSchema, type PromptRequest } from "../../gen/ledger/v1/service_pb.js";

/**
 * The idempotency fingerprint of a prompt: sha256 (hex) of the request's canonical JSON (keys
 * sorted, `message_id` left out). Two requests with the same `message_id` are "the same
 * prompt" exactly when their fingerprints match.
 */
export function promptFingerprint(request: PromptRequest): string {
  const json = toJson(PromptRequestSchema, create(PromptRequestSchema, { ...request, messageId: "" }));
  return createHash("sha256").update(canonical(json)).digest("hex");
}

function canonical(value: JsonValue): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k]!)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}
