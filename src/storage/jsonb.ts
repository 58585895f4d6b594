import { toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";

/** What a NUL (U+0000) or a lone UTF-16 surrogate becomes when stored: U+FFFD, the replacement character. */
export const REPLACEMENT = "\uFFFD";

/** True when `text` can be stored as it is: no NUL and no lone UTF-16 surrogate. */
export function isStorableText(text: string): boolean {
  return text.isWellFormed() && !text.includes("\0");
}

/**
 * `text` as Postgres can store it and a provider can be sent it: every NUL (U+0000; Postgres
 * `text` and JSONB refuse it) and every lone UTF-16 surrogate (JSONB refuses `\ud800` without
 * its pair) becomes U+FFFD. One code point stays one code point, so offsets counted in code
 * points (`part_delta.offset`) agree before and after. Returns `text` itself when it is clean.
 */
export function storableText(text: string): string {
  return isStorableText(text) ? text : text.toWellFormed().replaceAll("\0", REPLACEMENT);
}

/**
 * The text hygiene rule of the whole service, applied to every value the stores write: every
 * string in `value` — message fields, `google.protobuf.Struct` keys and values (`metadata`,
 * tool `input`, `format.json_schema.schema`) at any depth, map keys (`tools`) and list items —
 * becomes `storableText`. Changes `value` IN PLACE (an object with a key to clean is rebuilt
 * with its keys in the same order), so the object a caller stored is the one it answers and
 * publishes with: the response equals what a later read returns. Two keys that clean to the same
 * key keep the later value. Inside Struct/Value JSON (anything not a field of a message), a
 * number JSON cannot hold (NaN, ±Infinity: a binary client can send them) becomes `null`, and
 * -0 becomes 0, as `JSON.stringify` makes them; a message's own `double` fields keep theirs (proto JSON writes
 * `"NaN"`). Bytes fields (`Uint8Array`) are left alone. `value` must be a message (its own keys
 * are field names). Returns `value` (the same object).
 */
export function makeStorable<T extends object>(value: T): T {
  clean(value, false);
  return value;
}

/** Cleans `value`; `inJson` is false for a direct field of a message, true inside JSON values and lists. */
function clean(value: unknown, inJson: boolean): unknown {
  if (typeof value === "string") return storableText(value);
  if (typeof value === "number") {
    if (!inJson) return value;
    // JSON has no -0 (JSON.stringify writes 0): store and answer 0.
    return !Number.isFinite(value) ? null : Object.is(value, -0) ? 0 : value;
  }
  if (value === null || typeof value !== "object" || ArrayBuffer.isView(value)) return value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item = clean(value[i], true);
      if (!Object.is(item, value[i])) value[i] = item;
    }
    return value;
  }
  const record = value as Record<string, unknown>;
  const inner = !("$typeName" in record);
  const keys = Object.keys(record);
  if (keys.every(isStorableText)) {
    for (const key of keys) {
      const item = clean(record[key], inner);
      if (!Object.is(item, record[key])) record[key] = item;
    }
    return record;
  }
  // Only JSON objects and maps have client-chosen keys; rebuilding them keeps their key order.
  // Defined, not assigned: a "__proto__" key assigned would set the prototype and be lost.
  const rebuilt: Record<string, unknown> = {};
  for (const key of keys) {
    Object.defineProperty(rebuilt, storableText(key), {
      value: clean(record[key], inner),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return rebuilt;
}

/**
 * A message's proto JSON form as the text of a JSONB value, after `makeStorable` has made every
 * string in `message` storable in place (so Postgres never refuses it, and the caller's object
 * equals what is stored).
 */
export function toJsonb<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): string {
  return JSON.stringify(toJson(schema, makeStorable(message)));
}
