import { z } from "zod";
import { findFiles, ignoreGlobs, pathKind } from "../files/find-files.js";
import { resolveToolPath, ToolInputError, type ToolContext, type ToolDefinition, type ToolOutput } from "./tool-context.js";

/**
 * Names the list tool never shows, in gitignore form (trailing `/` = directory). Same entries
 * and order as OpenCode ls.ts `IGNORE_PATTERNS`; entries without `/` match any name starting
 * with them (OpenCode appends `*`). Unlike OpenCode (ripgrep globs anchored at the listed
 * directory), they apply at any depth.
 */
export const LIST_IGNORE_PATTERNS: readonly string[] = [
  "node_modules/",
  "__pycache__/",
  ".git/",
  "dist/",
  "build/",
  "target/",
  "vendor/",
  "bin/",
  "obj/",
  ".idea/",
  ".vscode/",
  ".zig-cache/",
  "zig-out",
  ".coverage",
  "coverage/",
  "tmp/",
  "temp/",
  ".cache/",
  "cache/",
  "logs/",
  ".venv/",
  "venv/",
  "env/",
];

/** Most files shown in one listing (files). Follows OpenCode ls.ts `LIMIT`. */
export const LIST_LIMIT = 100;

const DEFAULT_IGNORE_GLOBS = LIST_IGNORE_PATTERNS.flatMap((p) => ignoreGlobs(p.endsWith("/") ? p : `${p}*`));

/** Input of {@link listTool}. Follows OpenCode ls.ts parameters. */
export interface ListInput {
  /** Directory to list, absolute or relative to the session directory; default the session directory. */
  path?: string;
  /** Extra gitignore-style patterns to leave out (e.g. `"*.log"`, `"fixtures/"`). */
  ignore?: string[];
}

/**
 * The `list` tool as the model sees it (description, input schema) and {@link listTool}; a missing
 * `path` is passed on as `"."`. Follows OpenCode ls.ts.
 */
export const listDefinition: ToolDefinition<ListInput> = {
  id: "list",
  description: "List a directory as a tree (common build and VCS folders are ignored).",
  inputSchema: z.object({
    path: z.string().optional().describe("Directory; default the project directory"),
    ignore: z.array(z.string()).optional(),
  }),
  execute: (input, ctx) => listTool({ path: input.path ?? ".", ignore: input.ignore }, ctx),
};

/**
 * The model's `list` tool: a tree of the files under a directory. Follows OpenCode ls.ts.
 *
 * Output: the directory's absolute (real) path with a trailing `/`, then one line per entry,
 * each ending in `\n`: subdirectories first (`name/`), then files, each group sorted by UTF-16
 * code units, indented two spaces per level (top-level entries by two). Empty directories do not
 * appear. At most {@link LIST_LIMIT} files: the first ones in path order. Like OpenCode, the text
 * says nothing about truncation; `metadata` does.
 *
 * Differences from OpenCode (ripgrep): no `.gitignore` files are read; the ignore patterns apply
 * at any depth; symlinks are neither listed nor followed (they could lead outside the roots);
 * the files kept are the first 100 in path order rather than ripgrep's traversal order; and
 * `truncated` is true only when files were left out (OpenCode: when exactly 100 were found too).
 *
 * @returns `{ title, output, metadata: { count, truncated } }`; `title` is the path relative to
 *   the session directory; `count` is the number of files shown.
 * @throws PathNotAllowedError when the path leaves the session directory and roots.
 * @throws ToolInputError `Directory not found: <path>` or `Not a directory: <path>`.
 * @throws the signal's reason (an `AbortError`) when `ctx.signal` is aborted.
 */
export async function listTool(input: ListInput, ctx: ToolContext): Promise<ToolOutput> {
  const { path, title } = await resolveToolPath(ctx, "path", input.path);
  const kind = await pathKind(path);
  if (kind === undefined) throw new ToolInputError(`Directory not found: ${path}`);
  if (kind !== "directory") throw new ToolInputError(`Not a directory: ${path}`);

  const ignore = [...DEFAULT_IGNORE_GLOBS, ...(input.ignore ?? []).flatMap(ignoreGlobs)];
  const all = await findFiles(path, ["**/*"], ignore, ctx.signal);
  const files = all.slice(0, LIST_LIMIT);
  return {
    title,
    output: `${path}/\n${renderTree(files)}`,
    metadata: { count: files.length, truncated: all.length > LIST_LIMIT },
  };
}

interface DirNode {
  dirs: Map<string, DirNode>;
  files: string[];
}

/** Renders relative `/`-separated file paths as OpenCode ls.ts `renderDir` does. */
function renderTree(files: string[]): string {
  const root: DirNode = { dirs: new Map(), files: [] };
  for (const file of files) {
    const parts = file.split("/");
    const name = parts[parts.length - 1];
    let node = root;
    for (const part of parts.slice(0, -1)) {
      let next = node.dirs.get(part);
      if (next === undefined) {
        next = { dirs: new Map(), files: [] };
        node.dirs.set(part, next);
      }
      node = next;
    }
    node.files.push(name);
  }
  let out = "";
  const render = (node: DirNode, depth: number): void => {
    const indent = "  ".repeat(depth + 1);
    for (const [name, child] of [...node.dirs].sort(([a], [b]) => (a < b ? -1 : 1))) {
      out += `${indent}${name}/\n`;
      render(child, depth + 1);
    }
    for (const name of node.files.sort()) out += `${indent}${name}\n`;
  };
  render(root, 0);
  return out;
}
