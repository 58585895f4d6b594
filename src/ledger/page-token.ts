import { InvalidArgumentError } from "../errors.js";

/**
 * Encodes a keyset cursor as an opaque page token (base64url JSON). Tokens are stable across
 * replicas and restarts because they hold only positions/times/ids, never offsets.
 */
export function encodePageToken(cursor: Record<string, string | number>): string {
  return Buffer.from(JSON.stringify(cursor), "utf8").toString("base64url");
}

/**
 * Decodes a page token made by `encodePageToken` and checks that `keys` are present.
 * Throws `InvalidArgumentError` on `field` when the token is not one of ours.
 */
export function decodePageToken<K extends string>(field: string, token: string, keys: readonly K[]): Record<K, string | number> {
  try {
    const value: unknown = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
    if (value && typeof value === "object" && keys.every((k) => k in value)) return value as Record<K, string | number>;
  } catch {
    // fall through
  }
  throw new InvalidArgumentError(field, "is not a page token issued by this service");
}
