import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { InvalidArgumentError, PathNotAllowedError } from "../errors.js";
import { checkPathShape } from "../files/confine.js";

/** What a `file:` URL asks to read. */
export interface FileUrlTarget {
  /** Absolute POSIX path, percent-decoded and normalized, without a trailing slash (except `/`). */
  path: string;
  /** First line to read, 1-based (lines); absent when the URL has no range. */
  offset?: number;
  /** How many lines to read (lines); absent when the range has no end. */
  limit?: number;
  /**
   * The line of a one-line range (`?start=N&end=N`, both given and equal, 1-based): the client
   * asks for the symbol starting there (see `findSymbolAt`). Absent otherwise.
   */
  symbolLine?: number;
  /** True when the URL path ended with `/` (the client means a directory). */
  hasTrailingSlash: boolean;
}

/** A line bound from the query: a decimal whole number (no sign, no fraction). */
function bound(field: string, params: URLSearchParams, name: "start" | "end"): number | undefined {
  const all = params.getAll(name);
  if (all.length === 0) return undefined;
  if (all.length > 1) throw new InvalidArgumentError(field, `query parameter ${name} is given ${all.length} times`);
  const raw = all[0];
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(value)) {
    throw new InvalidArgumentError(field, `query parameter ${name}=${JSON.stringify(raw)} must be a whole line number (0 or more)`);
  }
  return value;
}

/**
 * Parses a `file:` URL from a file part draft into a path and an optional line range.
 *
 * Uses WHATWG `URL` and `fileURLToPath`, so percent-escapes are decoded (`%20` → space,
 * UTF-8 escapes such as `%E6%97%A5` → `日`, `%28`/`%29` → parens, `%23` → `#` inside a name),
 * `.`/`..` segments are resolved, and a literal `#` starts the fragment, which is ignored.
 * `file://localhost/x` is the local `/x`. POSIX only: a raw `\` is a `/` (WHATWG URL rules for
 * `file:`), so `..\..\x` climbs like `../../x`; an escaped `%5C` decodes to a backslash that
 * is part of the file name (POSIX names may contain one); `%2e%2e` is a `..` segment, while a
 * double-encoded `%252e%252e` decodes once, to the literal name `%2e%2e`.
 *
 * Range (docs/design.md §4, OpenCode `resolvePart`): `?start=a&end=b` gives offset = max(a, 1) and
 * limit = b − offset + 1 (end is inclusive); `?start=a` gives offset = max(a, 1) and no limit
 * (`start=0` means from line 1); `?end=b` alone gives offset 1, limit b. Other query parameters
 * are ignored. When both bounds are given and equal (`?start=12&end=12`), `symbolLine` is that
 * line: the caller widens the range to the symbol starting there (OpenCode's `start === end`).
 *
 * @param field - request field named in errors, e.g. `parts[0].file.url`.
 * @param url - the URL string.
 * @returns the path, offset/limit (lines) and whether the path ended with `/`.
 * @throws InvalidArgumentError when the URL is malformed, is not `file:`, is relative
 *   (`file:x`), has an encoded `/`, a NUL or a percent-escape that is not UTF-8, decodes to a
 *   path over `MAX_PATH_BYTES` (4096) bytes, or has a bound that is not a whole number ≥ 0, an
 *   `end` below 1 or below `start`, or a bound given twice.
 * @throws PathNotAllowedError(field, url, "names a remote host") for `file://host/...`, and
 *   PathNotAllowedError(field, url, "names a Windows drive path...") for `file:///C:/...`,
 *   `file:///c|/...` and `file:///C:%5C...`.
 */
export function parseFileUrl(field: string, url: string): FileUrlTarget {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidArgumentError(field, `${JSON.stringify(url)} is not a valid URL`);
  }
  if (parsed.protocol !== "file:") {
    throw new InvalidArgumentError(field, `${JSON.stringify(url)} is not a file: URL`);
  }
  if (parsed.hostname !== "" && parsed.hostname !== "localhost") throw new PathNotAllowedError(field, url, "names a remote host");
  // `file:package.json` parses as /package.json; say what is wrong instead of reading the root.
  if (!/^file:\//i.test(url.trim())) {
    throw new InvalidArgumentError(
      field,
      `${JSON.stringify(url)} is a relative file: URL; use an absolute one such as file:///abs/path/package.json`,
    );
  }

  let decoded: string;
  try {
    decoded = fileURLToPath(parsed);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new InvalidArgumentError(field, `${JSON.stringify(url)} cannot be turned into a path: ${why}`);
  }
  if (/^\/[A-Za-z][:|]([/\\]|$)/.test(decoded)) {
    throw new PathNotAllowedError(field, url, "names a Windows drive path, which this server cannot read");
  }
  if (decoded.includes("\0")) throw new InvalidArgumentError(field, `${JSON.stringify(url)} contains a NUL character`);
  checkPathShape(field, decoded);

  const target: FileUrlTarget = { path: resolve(decoded), hasTrailingSlash: parsed.pathname.endsWith("/") };
  const start = bound(field, parsed.searchParams, "start");
  const end = bound(field, parsed.searchParams, "end");
  if (end !== undefined) {
    if (end < 1) throw new InvalidArgumentError(field, `query parameter end=${end} must be 1 or more (lines are 1-based)`);
    if (start !== undefined && end < start) {
      throw new InvalidArgumentError(field, `query parameter end=${end} is before start=${start} (end is inclusive)`);
    }
  }
  if (start !== undefined || end !== undefined) {
    target.offset = Math.max(start ?? 1, 1);
    if (end !== undefined) target.limit = end - target.offset + 1;
    if (start !== undefined && start === end) target.symbolLine = end;
  }
  return target;
}
