import { createTwoFilesPatch, structuredPatch } from "diff";
import { distance } from "fastest-levenshtein";
import { z } from "zod";
import { withFileLock } from "../files/file-lock.js";
import { readForEdit, writeConfined } from "../files/write-file.js";
import { resolveToolPath, ToolInputError, type ToolContext, type ToolDefinition, type ToolOutput, type ToolPath } from "./tool-context.js";

/** Input of {@link editTool}. Follows OpenCode edit.ts parameters. */
export interface EditInput {
  /** File to change, absolute or relative to the session directory. */
  filePath: string;
  /** The exact text to replace; "" creates the file with `newString` (it must not exist). */
  oldString: string;
  /** The text to put in its place (must differ from `oldString`). */
  newString: string;
  /** Replace every occurrence instead of exactly one. */
  replaceAll?: boolean;
}

/** Files longer than this (lines) are not searched for a closest match. */
const CLOSEST_MAX_LINES = 5000;

/** The `edit` tool as the model sees it and {@link editTool}. Follows OpenCode edit.ts. */
export const editDefinition: ToolDefinition<EditInput> = {
  id: "edit",
  asks: true,
  changesFiles: true,
  description:
    "Replace `oldString` with `newString` in a file. `oldString` must match the file exactly (whitespace and indentation included) and only once, unless `replaceAll` is set; an empty `oldString` creates a new file.",
  inputSchema: z.object({
    filePath: z.string().describe("Absolute path, or relative to the project directory"),
    oldString: z.string().describe("The exact text to replace"),
    newString: z.string().describe("The text to replace it with (must be different from oldString)"),
    replaceAll: z.boolean().optional().describe("Replace all occurrences of oldString (default false)"),
  }),
  execute: editTool,
};

/**
 * The model's `edit` tool (OpenCode edit.ts, exact matching only: none of its fuzzy replacers):
 * replaces the one occurrence of `oldString` (or every one with `replaceAll`), asks permission
 * `edit` with the relative path as the pattern (and the path through its symlinks resolved, when
 * that differs) and the diff in `metadata.diff`, then writes. From the read to the write,
 * permission ask included, it holds the file's lock (`withFileLock`), so edits of one file in a
 * step apply one after the other, each to the file the previous one wrote.
 *
 * @returns `output` "Edit applied successfully.", `title` the relative path, `metadata`
 *   `{ filePath, diff, additions, deletions, replacements }`.
 * @throws ToolInputError "No changes to apply: oldString and newString are identical.";
 *   "File not found: <path>"; "Could not find oldString in the file. It must match exactly,
 *   including whitespace, indentation, and line endings." plus the closest match (its line and
 *   text); "Found N matches for oldString (lines a, b, ...). Provide more surrounding context to
 *   make the match unique, or set replaceAll."; "File already exists: <path>" for an empty
 *   `oldString` on an existing file; "Cannot edit binary file: <path>" and "Cannot edit <path>:
 *   it is not UTF-8 text ..." from `readForEdit`. Also PathNotAllowedError / InvalidArgumentError from
 *   confinement and the denial or rejection from `ctx.ask`.
 */
export async function editTool(input: EditInput, ctx: ToolContext): Promise<ToolOutput> {
  ctx.signal?.throwIfAborted();
  if (input.oldString === input.newString) throw new ToolInputError("No changes to apply: oldString and newString are identical.");
  const target = await resolveToolPath(ctx, "filePath", input.filePath);
  return withFileLock(target.canonical, () => applyEdit(input, ctx, target), ctx.signal);
}

/** The edit itself, under the file's lock: read, replace, ask, write. */
async function applyEdit(input: EditInput, ctx: ToolContext, { path, title, patterns }: ToolPath): Promise<ToolOutput> {
  const before = await readForEdit("filePath", path);
  let after: string;
  let replacements = 1;
  if (input.oldString === "") {
    if (before !== undefined) throw new ToolInputError(`File already exists: ${path}. Use a non-empty oldString to change it.`);
    after = input.newString;
  } else {
    if (before === undefined) throw new ToolInputError(`File not found: ${path}`);
    const starts = occurrences(before, input.oldString);
    if (starts.length === 0) {
      throw new ToolInputError(
        "Could not find oldString in the file. It must match exactly, including whitespace, indentation, and line endings." +
          closestMatch(before, input.oldString),
      );
    }
    if (starts.length > 1 && !input.replaceAll) {
      const lines = starts.map((i) => lineOf(before, i));
      throw new ToolInputError(
        `Found ${starts.length} matches for oldString (lines ${lines.join(", ")}). Provide more surrounding context to make the match unique, or set replaceAll.`,
      );
    }
    replacements = starts.length;
    after = input.replaceAll ? before.split(input.oldString).join(input.newString) : before.replace(input.oldString, () => input.newString);
  }
  const diff = createTwoFilesPatch(title, title, before ?? "", after);
  let additions = 0;
  let deletions = 0;
  for (const hunk of structuredPatch(title, title, before ?? "", after).hunks)
    for (const line of hunk.lines) {
      if (line.startsWith("+")) additions++;
      else if (line.startsWith("-")) deletions++;
    }
  await ctx.ask?.({ permission: "edit", patterns, metadata: { filePath: path, diff } });
  ctx.signal?.throwIfAborted();
  await writeConfined("filePath", path, after);
  return { title, output: "Edit applied successfully.", metadata: { filePath: path, diff, additions, deletions, replacements } };
}

/** Start offsets of every non-overlapping occurrence of `needle` in `text`. */
function occurrences(text: string, needle: string): number[] {
  const out: number[] = [];
  for (let i = text.indexOf(needle); i >= 0; i = text.indexOf(needle, i + needle.length)) out.push(i);
  return out;
}

/** 1-based line number of offset `index` in `text`. */
function lineOf(text: string, index: number): number {
  let line = 1;
  for (let i = 0; i < index; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

/**
 * " The closest match (line N):\n<text>" — the run of lines, as many as `oldString` has, with the
 * smallest Levenshtein distance to it; "" for an empty file or one over {@link CLOSEST_MAX_LINES}.
 */
function closestMatch(text: string, oldString: string): string {
  const lines = text.split("\n");
  if (text === "" || lines.length > CLOSEST_MAX_LINES) return "";
  const width = Math.min(oldString.split("\n").length, lines.length);
  let best = { at: 0, cost: Number.POSITIVE_INFINITY };
  for (let at = 0; at + width <= lines.length; at++) {
    const cost = distance(lines.slice(at, at + width).join("\n"), oldString);
    if (cost < best.cost) best = { at, cost };
  }
  return `\nThe closest match (line ${best.at + 1}):\n${lines.slice(best.at, best.at + width).join("\n")}`;
}
