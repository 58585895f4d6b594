import type { z } from "zod";

/** The parts of a zod 4 schema's definition the walk reads (`schema._zod.def`). */
interface SchemaDef {
  type: string;
  innerType?: z.ZodType;
  shape?: Record<string, z.ZodType>;
  catchall?: z.ZodType;
  valueType?: z.ZodType;
  element?: z.ZodType;
  options?: z.ZodType[];
  in?: z.ZodType;
  out?: z.ZodType;
  getter?: () => z.ZodType;
  discriminator?: string;
  values?: unknown[];
}

const defOf = (schema: z.ZodType): SchemaDef => (schema as unknown as { _zod: { def: SchemaDef } })._zod.def;

/**
 * The keys of `value` that `schema` does not know, as key paths (`["agent", "review", "colour"]`),
 * in the order written: an object schema's keys outside its shape (unless it has a catchall),
 * looked for through optional/default/nullable wrappers, records, arrays, preprocess pipes and
 * unions (the option a discriminator names, else the one with the fewest unknown keys). Values of the wrong shape are
 * left to the schema's own parse. Zod strips (or, for strict objects, refuses) unknown keys
 * without a way to collect them all at once; this walk lets the loader name each of them (an error,
 * or a warning with `--lenient-config`) before parsing.
 */
export function unknownKeys(schema: z.ZodType, value: unknown, path: (string | number)[] = []): (string | number)[][] {
  const def = defOf(schema);
  switch (def.type) {
    case "optional":
    case "default":
    case "prefault":
    case "nullable":
    case "readonly":
    case "catch":
      return def.innerType ? unknownKeys(def.innerType, value, path) : [];
    case "lazy":
      return def.getter ? unknownKeys(def.getter(), value, path) : [];
    case "pipe":
      // A preprocess (`in` a transform) or a transform after a schema (`out` a transform).
      if (def.in && defOf(def.in).type !== "transform") return unknownKeys(def.in, value, path);
      return def.out ? unknownKeys(def.out, value, path) : [];
    case "union": {
      if (!isPlainObject(value) || !def.options) return [];
      // A discriminated union: the option the discriminator names, when it names one.
      const named = def.discriminator
        ? def.options.filter((o) => literalOf(o, def.discriminator!)?.includes(value[def.discriminator!]))
        : [];
      const candidates = (named.length > 0 ? named : def.options).map((option) => unknownKeys(option, value, path));
      return candidates.reduce((best, next) => (next.length < best.length ? next : best));
    }
    case "record":
      if (!isPlainObject(value) || !def.valueType) return [];
      return Object.entries(value).flatMap(([key, v]) => unknownKeys(def.valueType!, v, [...path, key]));
    case "array":
      if (!Array.isArray(value) || !def.element) return [];
      return value.flatMap((v, i) => unknownKeys(def.element!, v, [...path, i]));
    case "object": {
      if (!isPlainObject(value) || !def.shape) return [];
      const shape = def.shape;
      const open = def.catchall && defOf(def.catchall).type !== "never";
      return Object.entries(value).flatMap(([key, v]) =>
        Object.hasOwn(shape, key)
          ? unknownKeys(shape[key]!, v, [...path, key])
          : open
            ? unknownKeys(def.catchall!, v, [...path, key])
            : [[...path, key]],
      );
    }
    default:
      return [];
  }
}

/** A copy of `value` without the keys at `paths` (key paths as {@link unknownKeys} returns them). */
export function withoutKeys(value: unknown, paths: readonly (readonly (string | number)[])[]): unknown {
  const copy = structuredClone(value);
  for (const keyPath of paths) {
    let node: unknown = copy;
    for (const key of keyPath.slice(0, -1)) node = node && typeof node === "object" ? (node as Record<string, unknown>)[key] : undefined;
    if (node && typeof node === "object") delete (node as Record<string, unknown>)[keyPath[keyPath.length - 1]!];
  }
  return copy;
}

/** The values of an object option's literal `key` (`type: z.literal("local")` → `["local"]`). */
function literalOf(option: z.ZodType, key: string): unknown[] | undefined {
  const def = defOf(option);
  if (def.type === "pipe" && def.in) return literalOf(def.in, key);
  const field = def.type === "object" ? def.shape?.[key] : undefined;
  return field ? defOf(field).values : undefined;
}

/** Whether `value` is a JSON object (not null, not an array). */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
