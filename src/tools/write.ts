import { createTwoFilesPatch } from "diff";
import { z } from "zod";
import { withFileLock } from "../files/file-lock.js";
import { readForDiff, writeConfined } from "../files/write-file.js";
import { resolveToolPath, type ToolContext, type ToolDefinition, type ToolOutput } from "./tool-context.js";

/** Input of {@link writeTool}. Follows OpenCode write.ts parameters. */
export interface WriteInput {
  /** File to write, absolute or relative to the session directory. */
  filePath: string;
  /** The whole new content. */
  content: string;
}

/** The `write` tool as the model sees it and {@link writeTool}. Follows OpenCode write.ts. */
export const writeDefinition: ToolDefinition<WriteInput> = {
  id: "write",
  asks: true,
  changesFiles: true,
  description:
    "Write a file with the given content, replacing it if it exists (parent directories are created). Prefer `edit` for changes to an existing file.",
  inputSchema: z.object({
    filePath: z.string().describe("Absolute path, or relative to the project directory"),
    content: z.string().describe("The content to write to the file"),
  }),
  execute: writeTool,
};

/**
 * The model's `write` tool (OpenCode write.ts): confines `filePath` (session directory, roots,
 * references; no symlink leading out), asks permission `write` with the relative path as the
 * pattern (and the path through its symlinks resolved, when that differs) and a unified diff in
 * `metadata.diff`, then writes the file (never through a symlink at the last component, see
 * `writeConfined`), holding the file's lock from the read to the write like `edit`.
 *
 * @returns `output` "Wrote file successfully.", `title` the relative path, `metadata`
 *   `{ filePath, exists, diff }` (`exists`: whether the file was there before).
 * @throws PathNotAllowedError (outside the roots, through an escaping symlink, a symlink or
 *   directory at the name), InvalidArgumentError (a NUL or over-long path), the denial or
 *   rejection from `ctx.ask`, the signal's reason when aborted before writing.
 */
export async function writeTool(input: WriteInput, ctx: ToolContext): Promise<ToolOutput> {
  ctx.signal?.throwIfAborted();
  const { path, title, canonical, patterns } = await resolveToolPath(ctx, "filePath", input.filePath);
  return withFileLock(
    canonical,
    async () => {
      const before = await readForDiff(path);
      const diff = createTwoFilesPatch(title, title, before ?? "", input.content);
      await ctx.ask?.({ permission: "write", patterns, metadata: { filePath: path, diff } });
      ctx.signal?.throwIfAborted();
      const { existed } = await writeConfined("filePath", path, input.content);
      return { title, output: "Wrote file successfully.", metadata: { filePath: path, exists: existed, diff } };
    },
    ctx.signal,
  );
}
