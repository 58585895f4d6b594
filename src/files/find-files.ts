import { stat } from "node:fs/promises";
import { join, relative } from "node:path";
import { glob } from "tinyglobby";
import { isInside, isSpecialPath, SPECIAL_DIRS } from "./confine.js";

/**
 * Directories that glob and grep never enter, in gitignore form (trailing `/` = directory, at any
 * depth). Follows OpenCode glob.ts `DEFAULT_IGNORE` (the version before it relied on ripgrep's
 * `.gitignore` handling) plus `.git/`, which OpenCode's ripgrep calls always skip. We read no
 * `.gitignore` files, so this list stands in for them.
 */
export const SEARCH_IGNORE_PATTERNS: readonly string[] = [
  ".git/",
  "node_modules/",
  ".venv/",
  ".direnv/",
  ".cache/",
  "dist/",
  "build/",
  "out/",
  ".next/",
  "target/",
  "coverage/",
  "tmp/",
  "temp/",
  "__pycache__/",
];

/** How many files are `stat`ed at once. */
const STAT_BATCH = 64;

/** A regular file found by {@link newestFirst}. */
export interface FoundFile {
  /** Absolute path. */
  path: string;
  /** Modification time (ms since the epoch); 0 when it could not be read. */
  mtimeMs: number;
}

/**
 * Turns one gitignore-style pattern into tinyglobby ignore globs: a leading `/` or a `/` in the
 * middle anchors it to the search directory, otherwise it matches a name at any depth; a trailing
 * `/` matches directories only. `"*.log"` → `["**\/*.log", "**\/*.log/**"]`,
 * `"vendor/"` → `["**\/vendor/**"]`, `"/a/b"` → `["a/b", "a/b/**"]`.
 *
 * @param pattern - a pattern as in `.gitignore` or ripgrep's `--glob=!…` (negation not supported).
 * @returns globs for tinyglobby's `ignore` option; `[]` for an empty pattern. Never throws.
 */
export function ignoreGlobs(pattern: string): string[] {
  let p = pattern.trim().replace(/^\.\//, "");
  const dirOnly = p.endsWith("/");
  p = p.replace(/\/+$/, "");
  if (p === "") return [];
  const anchored = p.startsWith("/") || p.includes("/");
  const base = anchored ? p.replace(/^\/+/, "") : `**/${p}`;
  return dirOnly ? [`${base}/**`] : [base, `${base}/**`];
}

/** Ignore globs for {@link SEARCH_IGNORE_PATTERNS}. */
export const SEARCH_IGNORE_GLOBS: readonly string[] = SEARCH_IGNORE_PATTERNS.flatMap(ignoreGlobs);

/**
 * What a path names: `"directory"`, `"file"` (anything else that exists) or undefined when it
 * does not exist.
 *
 * @throws the fs error for failures other than ENOENT/ENOTDIR (e.g. EACCES).
 */
export async function pathKind(path: string): Promise<"directory" | "file" | undefined> {
  try {
    return (await stat(path)).isDirectory() ? "directory" : "file";
  } catch (err) {
    const code = typeof err === "object" && err !== null && "code" in err ? err.code : undefined;
    if (code === "ENOENT" || code === "ENOTDIR") return undefined;
    throw err;
  }
}

/**
 * Lists files under `cwd` (hidden files included, symlinks neither listed nor followed) with
 * tinyglobby. `/proc`, `/sys` and `/dev` (`SPECIAL_DIRS`, confine.ts) are never entered, even
 * when `cwd` contains them (a session directory or root of `/`).
 *
 * @param cwd - absolute directory to search.
 * @param patterns - tinyglobby patterns relative to `cwd`.
 * @param ignore - tinyglobby ignore globs (see {@link ignoreGlobs}).
 * @param signal - stops the crawl; the call then throws its reason.
 * @returns paths relative to `cwd` with `/` separators, sorted by UTF-16 code units.
 * @throws the signal's reason (an `AbortError`) when aborted.
 */
export async function findFiles(cwd: string, patterns: string[], ignore: readonly string[], signal?: AbortSignal): Promise<string[]> {
  signal?.throwIfAborted();
  const special = SPECIAL_DIRS.filter((dir) => dir !== cwd && isInside(cwd, dir)).map((dir) => `${relative(cwd, dir)}/**`);
  const files = await glob(patterns, {
    cwd,
    ignore: [...ignore, ...special],
    dot: true,
    followSymbolicLinks: false,
    expandDirectories: false,
    onlyFiles: true,
    signal,
  });
  signal?.throwIfAborted();
  return (special.length === 0 ? files : files.filter((file) => !isSpecialPath(join(cwd, file)))).sort();
}

/**
 * `stat`s files (64 at a time) and orders them newest first, ties by path. Entries that are no
 * longer regular files (removed, replaced by a FIFO, ...) are dropped; a file whose `stat` fails
 * otherwise is kept with mtime 0 so a later read reports the failure.
 *
 * @param cwd - absolute directory the relative paths start from.
 * @param files - paths relative to `cwd`.
 * @param signal - checked between batches; the call then throws its reason.
 * @returns absolute paths with their mtimes, newest first.
 */
export async function newestFirst(cwd: string, files: string[], signal?: AbortSignal): Promise<FoundFile[]> {
  const found: FoundFile[] = [];
  for (let i = 0; i < files.length; i += STAT_BATCH) {
    signal?.throwIfAborted();
    const batch = await Promise.all(
      files.slice(i, i + STAT_BATCH).map(async (file): Promise<FoundFile | undefined> => {
        const path = join(cwd, file);
        try {
          const info = await stat(path);
          return info.isFile() ? { path, mtimeMs: info.mtimeMs } : undefined;
        } catch (err) {
          const code = typeof err === "object" && err !== null && "code" in err ? err.code : undefined;
          return code === "ENOENT" || code === "ENOTDIR" ? undefined : { path, mtimeMs: 0 };
        }
      }),
    );
    for (const entry of batch) if (entry !== undefined) found.push(entry);
  }
  return found.sort((a, b) => b.mtimeMs - a.mtimeMs || (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
