import path from "node:path";
import { parse as parseJsonc, printParseErrorCode, type ParseError } from "jsonc-parser";
import { ConfigError } from "./config-error.js";
import { ignoredKeysWarning, stripIgnoredKeys, type IgnoredKey } from "./opencode-keys.js";
import { wildcardLastWarnings } from "./permission-config.js";
import { configFileSchema, type ConfigFile } from "./schema.js";
import { unknownKeys, withoutKeys } from "./unknown-keys.js";
import { substituteVariables } from "./variables.js";

// A config file's text to a checked `ConfigFile`: JSONC, OpenCode keys set aside, unknown keys
// checked, variables replaced, the schema checked (docs/configuration.md "The file").

/**
 * Parses JSONC text into a validated `ConfigFile` (see {@link readConfigText}; warnings dropped,
 * unknown keys are errors). Throws `ConfigError` as `readConfigText` does.
 */
export function parseConfigText(text: string, file: string, env: NodeJS.ProcessEnv = process.env): ConfigFile {
  return readConfigText(text, file, { env }).config;
}

/**
 * Reads a config file's JSONC text (`file` names it in messages; `{file:}` paths are relative to
 * its directory): the OpenCode keys this service ignores are set aside (`stripIgnoredKeys`),
 * unknown keys looked for (before substitution: a `{file:}` under an unknown key is not read),
 * `{env:}`/`{file:}` replaced, then the schema applied. Returns the
 * parsed file and the warnings: `ignoredKeysWarning`'s, and with `lenient` one
 * `<file>: unknown keys ignored (--lenient-config): a.b, c` (those keys dropped). Throws
 * `ConfigError`: `<file>: invalid JSONC at line L, column C: value expected` (1-based) for a
 * syntax error; `<file>: unknown key agent.review.colour (not a ledger.json or opencode.json key;
 * --lenient-config ignores unknown keys)` (every unknown key named, comma-separated);
 * `<file>: <key path>: <why>` for a `{file:}` that cannot be read or a schema failure.
 */
export function readConfigText(
  text: string,
  file: string,
  options: { env?: NodeJS.ProcessEnv; lenient?: boolean } = {},
): { config: ConfigFile; warnings: string[]; ignored: IgnoredKey[] } {
  const env = options.env ?? process.env;
  const errors: ParseError[] = [];
  const raw: unknown = parseJsonc(text, errors, { allowTrailingComma: true });
  if (errors.length > 0) {
    const first = errors[0]!;
    const { line, column } = lineAndColumn(text, first.offset);
    const what = printParseErrorCode(first.error)
      .replace(/(?<=[a-z])([A-Z])/g, " $1")
      .toLowerCase();
    throw new ConfigError(`${file}: invalid JSONC at line ${line}, column ${column}: ${what}`);
  }
  const { value, ignored } = stripIgnoredKeys(raw);
  const warnings: string[] = [];
  const ignoredWarning = ignoredKeysWarning(file, ignored);
  if (ignoredWarning) warnings.push(ignoredWarning);
  // Unknown keys first: substitution changes values only, and a {file:} under a misspelled key
  // must be neither read nor the error reported.
  let known = value;
  const unknown = unknownKeys(configFileSchema, value);
  if (unknown.length > 0) {
    const names = unknown.map((k) => k.join(".")).join(", ");
    if (!options.lenient)
      throw new ConfigError(
        `${file}: unknown key${unknown.length > 1 ? "s" : ""} ${names} (not a ledger.json or opencode.json key; --lenient-config ignores unknown keys)`,
      );
    warnings.push(`${file}: unknown keys ignored (--lenient-config): ${names}`);
    known = withoutKeys(value, unknown);
  }
  const substituted = substituteVariables(known, { env, baseDir: path.dirname(path.resolve(file)), source: file });
  const parsed = configFileSchema.safeParse(substituted);
  if (!parsed.success) {
    const issue = deepestIssue(parsed.error.issues[0]!);
    throw new ConfigError(`${file}: ${issue.path.join(".") || "(root)"}: ${issue.message}`);
  }
  const maps = [
    ["tools", parsed.data.tools] as const,
    ["permission", parsed.data.permission] as const,
    ...Object.entries(parsed.data.agent).flatMap(([name, a]) => [
      [`agent.${name}.tools`, a.tools] as const,
      [`agent.${name}.permission`, a.permission] as const,
    ]),
  ];
  warnings.push(...wildcardLastWarnings(maps).map((w) => `${file}: ${w}`));
  return { config: parsed.data, warnings, ignored };
}

/** The 1-based line and column (in UTF-16 code units, as editors count) of `offset` in `text`. */
export function lineAndColumn(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, offset);
  const lineStart = before.lastIndexOf("\n") + 1;
  return { line: before.split("\n").length, column: offset - lineStart + 1 };
}

/** A zod issue as reported: its own path, message and, for a failed union, each option's issues. */
interface Issue {
  path: PropertyKey[];
  message: string;
  code?: string;
  errors?: Issue[][];
}

/**
 * The issue to report for `issue`: for a value no option of a union accepts, the option's issue
 * that reaches deepest into the value (`permission.bash.rm *: Invalid option: ...` rather than
 * `permission: Invalid input`), its path made absolute; any other issue as it is.
 */
function deepestIssue(issue: Issue): Issue {
  if (issue.code !== "invalid_union" || !issue.errors || issue.errors.length === 0) return issue;
  const inner = issue.errors.flat().map((i) => deepestIssue({ ...i, path: [...issue.path, ...i.path] }));
  return inner.reduce((best, next) => (next.path.length > best.path.length ? next : best), issue);
}
