import { basename, dirname } from "node:path";
import { RE2JS, RE2JSException } from "re2js";
import { z } from "zod";
import { findFiles, newestFirst, pathKind, SEARCH_IGNORE_GLOBS, type FoundFile } from "../files/find-files.js";
import { readSearchable, type Searchable } from "../files/read-searchable.js";
import { resolveToolPath, searchGlobs, ToolInputError, type ToolContext, type ToolDefinition, type ToolOutput } from "./tool-context.js";

/** Most matching lines shown (lines). Follows OpenCode grep.ts `limit`. */
export const GREP_LIMIT = 100;
/** Matching lines are cut to this many UTF-16 code units, then `...` (chars). Follows OpenCode grep.ts. */
export const GREP_MAX_LINE_LENGTH = 2000;
/** Files larger than this are not searched, and the output says how many were skipped (bytes). */
export const GREP_MAX_FILE_BYTES = 1024 * 1024;

/** Input of {@link grepTool}. Follows OpenCode grep.ts parameters. */
export interface GrepInput {
  /** Regular expression in RE2 syntax (as ripgrep's), tested against each line; inline flags such as `(?i)` work anywhere. */
  pattern: string;
  /** Directory (or single file) to search, absolute or relative to the session directory; default the session directory. */
  path?: string;
  /** File glob, ripgrep `--glob` style, e.g. `"*.js"` or `"*.{ts,tsx}"` (matches at any depth). */
  include?: string;
}

/** The `grep` tool as the model sees it (description, input schema) and {@link grepTool}. Follows OpenCode grep.ts. */
export const grepDefinition: ToolDefinition<GrepInput> = {
  id: "grep",
  description:
    "Search file contents with a regular expression (RE2/ripgrep syntax: no lookaround or backreferences); `include` filters files by glob.",
  inputSchema: z.object({ pattern: z.string(), path: z.string().optional(), include: z.string().optional() }),
  execute: grepTool,
};

interface Match {
  path: string;
  line: number;
  text: string;
}

/**
 * The model's `grep` tool: lines matching a regular expression, in files newest first.
 * Follows OpenCode grep.ts (the ripgrep `search` version: all matches sorted by file mtime).
 *
 * Output: `Found N matches` (N counts every matching line; ` (showing first 100)` is appended when
 * there are more), then per file a blank-line-separated group `<absolute path>:` followed by
 * `  Line <n>: <text>` (lines numbered from 1 like the read tool: `\n`, `\r\n` and a lone `\r`
 * end a line; text cut at {@link GREP_MAX_LINE_LENGTH} chars plus `...`). At most
 * {@link GREP_LIMIT} lines, then `(Results truncated: showing 100 of N matches (M hidden).
 * Consider using a more specific path or pattern.)`. `(Some paths were inaccessible and skipped)`
 * when a file could not be read. `No files found` when nothing matches.
 *
 * Files: hidden ones included, `SEARCH_IGNORE_PATTERNS` directories (files/find-files.ts) skipped,
 * binary files (`isBinary` on the first 4 KiB) skipped silently, files over
 * {@link GREP_MAX_FILE_BYTES} skipped with a `(N file(s) over 1 MiB not searched)` footer (our
 * addition). Text is decoded like the read tool (BOM, UTF-8, windows-1252).
 *
 * Matching: RE2 syntax through `re2js` (a pure-JavaScript RE2), which runs in time linear in the
 * line length, so a pattern written by the model such as `(a+)+$` cannot stall the event loop
 * the way a backtracking JavaScript `RegExp` would. RE2 is also what ripgrep's syntax is based
 * on: inline flags (`(?i)`, `(?s)`, `(?i:x)`), `\p{L}`, `[[:alpha:]]`, `\Q...\E` and escaped
 * punctuation (`\-`, `\:`, `\ `) work, and `\uXXXX` / `\u{X}` are read as `\x{X}`. Lookahead,
 * lookbehind and backreferences do not exist in RE2; such patterns are refused with a
 * ToolInputError that says so.
 *
 * Differences from OpenCode (ripgrep): no `.gitignore` files are read; symlinks are not followed;
 * a file path searches just that file; ties in mtime are ordered by path.
 *
 * @returns `{ title, output, metadata: { matches, truncated, skippedLarge, skippedUnreadable } }`;
 *   `title` is the pattern (as in OpenCode); `matches` is N.
 * @throws ToolInputError `pattern is required`, `Invalid regex pattern "<p>": <why>` (RE2's
 *   reason, or that lookaround / backreferences are not supported), `Search path not found:
 *   <path>`, or a bad `include` (see `searchGlobs`).
 * @throws PathNotAllowedError when `path` leaves the session directory and roots.
 * @throws the signal's reason (an `AbortError`) when `ctx.signal` is aborted (checked per file).
 */
export async function grepTool(input: GrepInput, ctx: ToolContext): Promise<ToolOutput> {
  if (!input.pattern) throw new ToolInputError("pattern is required");
  const regex = compilePattern(input.pattern);
  const include = input.include ? searchGlobs("include", input.include) : ["**/*"];
  const { path } = await resolveToolPath(ctx, "path", input.path);
  const kind = await pathKind(path);
  if (kind === undefined) throw new ToolInputError(`Search path not found: ${input.path ?? ctx.directory}`);
  const files: FoundFile[] =
    kind === "directory"
      ? await newestFirst(path, await findFiles(path, include, SEARCH_IGNORE_GLOBS, ctx.signal), ctx.signal)
      : await newestFirst(dirname(path), [basename(path)], ctx.signal);

  const shown: Match[] = [];
  let total = 0;
  let large = 0;
  let unreadable = 0;
  for (const file of files) {
    ctx.signal?.throwIfAborted();
    let content: Searchable;
    try {
      content = await readSearchable(file.path, GREP_MAX_FILE_BYTES);
    } catch (err) {
      if (!(err instanceof Error && "code" in err)) throw err;
      unreadable++;
      continue;
    }
    if (content.kind === "large") large++;
    if (content.kind !== "text") continue;
    const lines = content.text.split(/\r\n|\r|\n/);
    if (lines[lines.length - 1] === "") lines.pop();
    for (let i = 0; i < lines.length; i++) {
      if (!regex.test(lines[i])) continue;
      total++;
      if (shown.length < GREP_LIMIT) shown.push({ path: file.path, line: i + 1, text: lines[i] });
    }
  }
  ctx.signal?.throwIfAborted();

  const truncated = total > GREP_LIMIT;
  const output = total === 0 ? ["No files found"] : render(shown, total, truncated);
  if (unreadable > 0) output.push("", "(Some paths were inaccessible and skipped)");
  if (large > 0) output.push("", `(${large} file${large === 1 ? "" : "s"} over ${GREP_MAX_FILE_BYTES / 1024 / 1024} MiB not searched)`);
  return {
    title: input.pattern,
    output: output.join("\n"),
    metadata: { matches: total, truncated, skippedLarge: large, skippedUnreadable: unreadable },
  };
}

function render(shown: Match[], total: number, truncated: boolean): string[] {
  const output = [`Found ${total} matches${truncated ? ` (showing first ${GREP_LIMIT})` : ""}`];
  let current = "";
  for (const match of shown) {
    if (match.path !== current) {
      if (current !== "") output.push("");
      current = match.path;
      output.push(`${match.path}:`);
    }
    const text = match.text.length > GREP_MAX_LINE_LENGTH ? `${match.text.substring(0, GREP_MAX_LINE_LENGTH)}...` : match.text;
    output.push(`  Line ${match.line}: ${text}`);
  }
  if (truncated) {
    output.push(
      "",
      `(Results truncated: showing ${GREP_LIMIT} of ${total} matches (${total - GREP_LIMIT} hidden). Consider using a more specific path or pattern.)`,
    );
  }
  return output;
}

/** JavaScript-only syntax that RE2 refuses, with the reason shown to the model. */
const UNSUPPORTED: ReadonlyArray<[RegExp, string]> = [
  [/\(\?<[=!]/, "lookbehind (?<= or ?<!) is not supported"],
  [/\(\?[=!]/, "lookahead (?= or ?!) is not supported"],
  [/\\[1-9]|\\k</, "backreferences (\\1, \\k<name>) are not supported"],
];

/**
 * Rewrites JavaScript/ripgrep `\uXXXX` and `\u{X}` escapes as RE2's `\x{X}`, leaving `\\u` (an
 * escaped backslash, then `u`) and `\Q...\E` quoted text alone.
 */
function toRe2Syntax(pattern: string): string {
  let out = "";
  for (let i = 0; i < pattern.length; i++) {
    if (pattern[i] !== "\\") {
      out += pattern[i];
      continue;
    }
    const next = pattern[i + 1] ?? "";
    if (next === "Q") {
      const end = pattern.indexOf("\\E", i + 2);
      const stop = end === -1 ? pattern.length : end + 2;
      out += pattern.slice(i, stop);
      i = stop - 1;
      continue;
    }
    const unicode = next === "u" ? /^u(?:([0-9A-Fa-f]{4})|\{([0-9A-Fa-f]{1,6})\})/.exec(pattern.slice(i + 1)) : null;
    if (unicode !== null) {
      out += `\\x{${unicode[1] ?? unicode[2]}}`;
      i += unicode[0].length;
      continue;
    }
    out += `\\${next}`;
    i++;
  }
  return out;
}

/**
 * Compiles the model's pattern with RE2 (linear-time matching; see {@link grepTool}).
 *
 * @throws ToolInputError `Invalid regex pattern "<p>": <why>`.
 */
function compilePattern(pattern: string): RE2JS {
  try {
    return RE2JS.compile(toRe2Syntax(pattern));
  } catch (err) {
    if (!(err instanceof RE2JSException)) throw err;
    const known = UNSUPPORTED.find(([construct]) => construct.test(pattern));
    const why =
      known === undefined
        ? err.message.replace(/^error parsing regexp: /, "")
        : `${known[1]}; grep uses RE2 syntax (as ripgrep does), which has no lookaround or backreferences`;
    throw new ToolInputError(`Invalid regex pattern ${JSON.stringify(pattern)}: ${why}`);
  }
}
