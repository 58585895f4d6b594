/**
 * Rules on a request's well-known-type fields, checked on the decoded message before anything
 * else works on it: the `limits.metadata_bytes` rule (how much JSON, `google.protobuf.Struct`,
 * `Value` and `ListValue` fields, a request carries) and valid `google.protobuf.Timestamp`s.
 */
import type { DescMessage, JsonValue, MessageShape } from "@bufbuild/protobuf";
import { InvalidArgumentError, LimitExceededError } from "../errors.js";

const JSON_TYPES = new Set(["google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"]);

/** The JSON fields set in a message, in field order, with their sizes as {@link jsonBytes} counts them. */
export interface JsonFieldSizes {
  /** All of them together, in bytes. */
  total: number;
  /** Each field's path (proto names, e.g. `parts[3].text.metadata`) and size in bytes. */
  fields: Array<{ path: string; bytes: number }>;
}

/**
 * The sizes of `message`'s JSON fields (every `Struct`, `Value` and `ListValue` field at any
 * depth: part metadata, tool input, a format's schema). One pass over the message's fields and
 * the JSON values, no conversion.
 *
 * @param schema - the message's descriptor, e.g. `PromptRequestSchema`.
 * @param prefix - field path of `message` in the request (`part` for UpdatePart's), or "".
 */
export function jsonFieldSizes<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>, prefix = ""): JsonFieldSizes {
  const sizes: JsonFieldSizes = { total: 0, fields: [] };
  visitFields(JSON_TYPES, schema, message as unknown as Record<string, unknown>, prefix, (value, path) => {
    const bytes = jsonBytes(value as JsonValue);
    sizes.total += bytes;
    sizes.fields.push({ path, bytes });
  });
  return sizes;
}

/**
 * Refuses JSON fields of more than `max` bytes together (limit `metadata_bytes`).
 *
 * @param sizes - from {@link jsonFieldSizes}.
 * @param max - the bytes allowed (`limits.metadata_bytes`, or more where the request may carry more).
 * @throws LimitExceededError (`RESOURCE_EXHAUSTED`, limit `metadata_bytes`) naming the field at
 *   which the total passed `max` (e.g. `parts[3].text.metadata`), with the total in bytes.
 */
export function limitJsonFields(sizes: JsonFieldSizes, max: number): void {
  if (sizes.total <= max) return;
  let running = 0;
  const over = sizes.fields.find((f) => (running += f.bytes) > max)!;
  throw new LimitExceededError(over.path, "metadata_bytes", max, sizes.total, "bytes");
}

/**
 * {@link limitJsonFields} of {@link jsonFieldSizes}: refuses `message` when its JSON fields hold
 * more than `max` bytes together.
 *
 * @throws LimitExceededError (`RESOURCE_EXHAUSTED`, limit `metadata_bytes`), see {@link limitJsonFields}.
 */
export function checkJsonFields<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>, max: number, prefix = ""): void {
  limitJsonFields(jsonFieldSizes(schema, message, prefix), max);
}

/** Earliest and latest seconds of a valid `google.protobuf.Timestamp` (0001-01-01 to 9999-12-31, UTC). */
const TIMESTAMP_SECONDS = { min: -62_135_596_800n, max: 253_402_300_799n };

/**
 * Refuses a `google.protobuf.Timestamp` anywhere in `message` that no RFC 3339 time can write:
 * seconds outside 0001-01-01..9999-12-31 or nanos outside 0..999,999,999. A binary or gRPC client
 * can send one (JSON clients cannot: the parser refuses it), and it could not be stored as JSON
 * (it answered INTERNAL; a probe, 2026-12-02).
 *
 * @param prefix - field path of `message` in the request (`part` for UpdatePart's), or "".
 * @param name - how the error names a field path (e.g. a Command's drafts as the client sent them).
 * @throws InvalidArgumentError (INVALID_ARGUMENT) naming the field, e.g. `parts[0].text.time.start`.
 */
export function checkTimestamps<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
  prefix = "",
  name: (path: string) => string = (path) => path,
): void {
  visitFields(TIMESTAMP_TYPES, schema, message as unknown as Record<string, unknown>, prefix, (value, path) => {
    const { seconds, nanos } = value as { seconds: bigint; nanos: number };
    if (seconds < TIMESTAMP_SECONDS.min || seconds > TIMESTAMP_SECONDS.max || nanos < 0 || nanos > 999_999_999)
      throw new InvalidArgumentError(
        name(path),
        `is not a time between 0001-01-01 and 9999-12-31 UTC with nanos 0 to 999999999 (seconds ${seconds}, nanos ${nanos})`,
      );
  });
}

const TIMESTAMP_TYPES = new Set(["google.protobuf.Timestamp"]);

/**
 * Calls `visit` with each value set in `message` whose message type is in `types` and its field
 * path (proto names, `parts[2].text.metadata`), walking nested messages, lists, maps and oneofs.
 */
function visitFields(
  types: ReadonlySet<string>,
  desc: DescMessage,
  message: Record<string, unknown>,
  path: string,
  visit: (value: unknown, path: string) => void,
): void {
  for (const field of desc.fields) {
    let value: unknown;
    if (field.oneof) {
      const chosen = message[field.oneof.localName] as { case?: string; value?: unknown } | undefined;
      if (chosen?.case !== field.localName) continue;
      value = chosen.value;
    } else value = message[field.localName];
    if (value === undefined || value === null) continue;
    const at = path ? `${path}.${field.name}` : field.name;
    const item = (inner: DescMessage, v: unknown, p: string) => {
      if (types.has(inner.typeName)) visit(v, p);
      // JSON values are leaves (their keys are the client's, not fields).
      else if (!JSON_TYPES.has(inner.typeName)) visitFields(types, inner, v as Record<string, unknown>, p, visit);
    };
    if (field.fieldKind === "message") item(field.message, value, at);
    else if (field.fieldKind === "list" && field.listKind === "message")
      (value as unknown[]).forEach((v, i) => item(field.message, v, `${at}[${i}]`));
    else if (field.fieldKind === "map" && field.mapKind === "message")
      for (const [key, v] of Object.entries(value as Record<string, unknown>)) item(field.message, v, `${at}[${JSON.stringify(key)}]`);
  }
}

/**
 * Size of `value` written as compact JSON, in bytes: strings (and keys) by their UTF-8 bytes
 * plus two quotes (escapes are not expanded), numbers as `String(n)`, `true`/`false`/`null`,
 * and the brackets, colons and commas. Iterative (no recursion limit).
 */
export function jsonBytes(value: JsonValue): number {
  let bytes = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === "string") bytes += Buffer.byteLength(v, "utf8") + 2;
    else if (typeof v === "number") bytes += String(v).length;
    else if (typeof v === "boolean") bytes += v ? 4 : 5;
    else if (v === null || v === undefined) bytes += 4;
    else if (Array.isArray(v)) {
      bytes += 2 + Math.max(0, v.length - 1);
      for (let i = 0; i < v.length; i++) stack.push(v[i]);
    } else {
      const keys = Object.keys(v as object);
      bytes += 2 + Math.max(0, keys.length - 1);
      for (const key of keys) {
        bytes += Buffer.byteLength(key, "utf8") + 3;
        stack.push((v as Record<string, unknown>)[key]);
      }
    }
  }
  return bytes;
}
