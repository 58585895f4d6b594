import { InvalidArgumentError } from "../errors.js";
import { isStorableText } from "../storage/jsonb.js";

/**
 * Encodes a keyset cursor as an opaque page token (base64url JSON). Tokens are stable across
 * replicas and restarts because they hold only positions/times/ids, never offsets.
 */
export function encodePageToken(cursor: Record<string, string | number>): string {
  return Buffer.from(JSON.stringify(cursor), "utf8").toString("base64url");
}

/** What each cursor field must hold: a string, a non-negative integer, or an ISO date (`toISOString`, years 0001-9999). */
export type CursorField = "string" | "int" | "date";

/**
 * Decodes a page token made by `encodePageToken` and checks every field of `shape` (present,
 * of its kind). Throws `InvalidArgumentError` on `field` when the token is not one of ours, so
 * a forged token is a client error, never a failed query.
 */
export function decodePageToken<K extends string>(field: string, token: string, shape: Record<K, CursorField>): Record<K, string | number> {
  try {
    const value: unknown = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
    if (value && typeof value === "object") {
      const record = value as Record<string, unknown>;
      const ok = (Object.entries(shape) as Array<[K, CursorField]>).every(([key, kind]) => valid(record[key], kind));
      if (ok) return record as Record<K, string | number>;
    }
  } catch {
    // fall through
  }
  throw new InvalidArgumentError(field, "is not a page token issued by this service");
}

function valid(value: unknown, kind: CursorField): boolean {
  if (kind === "int") return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
  // A string that Postgres cannot take (NUL, lone surrogate) is no cursor of ours.
  if (typeof value !== "string" || !isStorableText(value)) return false;
  // A date as `toISOString` writes it, years 0001-9999: Date.parse takes years Postgres refuses.
  return kind === "string" || (ISO_DATE.test(value) && !Number.isNaN(Date.parse(value)));
}

/** `Date.prototype.toISOString`'s form for years 0001 to 9999. */
const ISO_DATE = /^(?!0000)\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
