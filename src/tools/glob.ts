import { z } from "zod";
import { findFiles, newestFirst, pathKind, SEARCH_IGNORE_GLOBS } from "../files/find-files.js";
import { resolveToolPath, searchGlobs, ToolInputError, type ToolContext, type ToolDefinition, type ToolOutput } from "./tool-context.js";

/** Most paths returned by one glob call (files). Follows OpenCode glob.ts `limit`. */
export const GLOB_LIMIT = 100;

/** Input of {@link globTool}. Follows OpenCode glob.ts parameters. */
export interface GlobInput {
  /** Glob to match, ripgrep `--glob` style: `"*.ts"` matches at any depth, `"src/**\/*.ts"` from `path`. */
  pattern: string;
  /** Directory to search, absolute or relative to the session directory; default the session directory. */
  path?: string;
}

/** The `glob` tool as the model sees it (description, input schema) and {@link globTool}. Follows OpenCode glob.ts. */
export const globDefinition: ToolDefinition<GlobInput> = {
  id: "glob",
  description: "Find files by glob pattern (e.g. **/*.ts), newest first.",
  inputSchema: z.object({ pattern: z.string(), path: z.string().optional() }),
  execute: globTool,
};

/**
 * The model's `glob` tool: files whose path matches a pattern, newest modification time first.
 * Follows OpenCode glob.ts.
 *
 * Output: one absolute (real) path per line; `No files found` when nothing matches; when more
 * than {@link GLOB_LIMIT} match, the newest 100 then a blank line and
 * `(Results are truncated: showing first 100 results. Consider using a more specific path or pattern.)`.
 * Hidden files are included; the `SEARCH_IGNORE_PATTERNS` directories (files/find-files.ts) are skipped.
 *
 * Differences from OpenCode (ripgrep): no `.gitignore` files are read (the fixed ignore list
 * stands in); symlinks are neither listed nor followed (they could lead outside the roots); all
 * matches are `stat`ed and the newest 100 kept (OpenCode sorts the first 100 ripgrep finds); ties
 * are ordered by path; absolute patterns and `..` segments are refused.
 *
 * @returns `{ title, output, metadata: { count, truncated } }`; `title` is the search directory
 *   relative to the session directory; `count` is the number of paths shown.
 * @throws PathNotAllowedError when `path` leaves the session directory and roots.
 * @throws ToolInputError for an empty, absolute or `..` pattern, `Directory not found: <path>`
 *   or `Not a directory: <path>`.
 * @throws the signal's reason (an `AbortError`) when `ctx.signal` is aborted.
 */
export async function globTool(input: GlobInput, ctx: ToolContext): Promise<ToolOutput> {
  const patterns = searchGlobs("pattern", input.pattern);
  const { path, title } = await resolveToolPath(ctx, "path", input.path);
  const kind = await pathKind(path);
  if (kind === undefined) throw new ToolInputError(`Directory not found: ${path}`);
  if (kind !== "directory") throw new ToolInputError(`Not a directory: ${path}`);

  const found = await newestFirst(path, await findFiles(path, patterns, SEARCH_IGNORE_GLOBS, ctx.signal), ctx.signal);
  const files = found.slice(0, GLOB_LIMIT);
  const truncated = found.length > GLOB_LIMIT;
  const output = files.length === 0 ? ["No files found"] : files.map((f) => f.path);
  if (truncated) {
    output.push("", `(Results are truncated: showing first ${GLOB_LIMIT} results. Consider using a more specific path or pattern.)`);
  }
  return { title, output: output.join("\n"), metadata: { count: files.length, truncated } };
}
