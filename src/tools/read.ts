import { basename } from "node:path";
import { z } from "zod";
import { DEFAULT_LIMITS } from "../config/limits.js";
import { READ_DEFAULT_LIMIT, readPath, ReadFailure, type ReadResult } from "../files/read-file.js";
import { isImageMime, normalizeImage } from "../files/image.js";
import { resolveToolPath, type ToolContext, type ToolDefinition, type ToolOutput } from "./tool-context.js";

/** Input of {@link readTool}. Follows OpenCode read.ts parameters. */
export interface ReadInput {
  /** File or directory to read, absolute or relative to the session directory. */
  filePath: string;
  /** First line (or directory entry) to show, 1-based; default 1. */
  offset?: number;
  /** Most lines (or entries) to show; default 2000. */
  limit?: number;
}

/** A file handed to the model next to the tool output. Follows OpenCode read.ts `attachments`. */
export interface ToolAttachment {
  /** Sniffed MIME type: `image/png`, `image/jpeg`, `image/gif`, `image/webp` or `application/pdf`. */
  mime: string;
  /** The whole file as a `data:<mime>;base64,…` URL (an image as stored after `normalizeImage`). */
  url: string;
  /** The file's name (its last path segment). */
  filename: string;
}

/** What {@link readTool} returns: a {@link ToolOutput}, plus the attachment for images and PDFs. */
export type ReadToolOutput = ToolOutput & { attachments?: ToolAttachment[] };

/** The `read` tool as the model sees it (description, input schema) and {@link readTool}. Follows OpenCode read.ts. */
export const readDefinition: ToolDefinition<ReadInput> = {
  id: "read",
  description: "Read a file (numbered lines, 2000 lines from `offset`) or list a directory. Images and PDFs are returned as attachments.",
  inputSchema: z.object({
    filePath: z.string().describe("Absolute path, or relative to the project directory"),
    offset: z.number().int().min(1).optional().describe("First line to read, 1-based"),
    limit: z.number().int().min(1).optional().describe("Number of lines to read (default 2000)"),
  }),
  execute: readTool,
};

/**
 * The model's `read` tool: a thin, confined wrapper around `readPath` (files/read-file.ts), which
 * holds the OpenCode read.ts formats and limits. Follows OpenCode read.ts `execute`.
 *
 * - text: `output` is the numbered `<content>` block; `metadata: { truncated, totalLines }`.
 * - directory: `output` is the `<entries>` block; `metadata: { truncated, entries }`.
 * - image/PDF: `output` is `Image read successfully` / `PDF read successfully`, one attachment
 *   with a base64 `data:` URL and the file's name; `metadata: { truncated: false, mime, bytes }`
 *   of the attachment. An image is brought within 2000 px and 5 MiB by `normalizeImage`, as an
 *   image a prompt attaches (docs/design.md §3 step 6), so it can be stored and sent.
 *
 * Unlike OpenCode there is no `preview` or `loaded` metadata (no instruction files are attached)
 * and no "Did you mean" list for a missing file.
 *
 * @returns the output; `title` is `filePath` relative to the session directory.
 * @throws PathNotAllowedError when the path leaves the session directory and roots, lies in
 *   /proc, /sys or /dev, or names a FIFO, socket or device (see `confinePath`).
 * @throws InvalidArgumentError when `filePath` has a NUL or is over 4096 bytes.
 * @throws Error with the `ReadFailure` message (`File not found: <path>`, `Cannot read binary
 *   file: <path>`, offset/limit errors, ...), so the model sees just the reason.
 * @throws LimitExceededError for an image/PDF over 20 MiB, an image over `limits.image_pixels`
 *   or one that cannot be brought under 5 MiB.
 * @throws InvalidArgumentError (naming `filePath`) for an image that cannot be decoded.
 * @throws the signal's reason (an `AbortError`) when `ctx.signal` is aborted before or after the read.
 */
export async function readTool(input: ReadInput, ctx: ToolContext): Promise<ReadToolOutput> {
  ctx.signal?.throwIfAborted();
  const { path, title } = await resolveToolPath(ctx, "filePath", input.filePath);
  let result: ReadResult;
  try {
    result = await readPath(path, { offset: input.offset, limit: input.limit, field: "filePath" });
  } catch (err) {
    if (err instanceof ReadFailure) throw new Error(err.message);
    throw err;
  }
  ctx.signal?.throwIfAborted();

  switch (result.kind) {
    case "text":
      return { title, output: result.output, metadata: { truncated: result.truncated, totalLines: result.totalLines } };
    case "directory": {
      const truncated = (input.offset ?? 1) - 1 + (input.limit ?? READ_DEFAULT_LIMIT) < result.entries;
      return { title, output: result.output, metadata: { truncated, entries: result.entries } };
    }
    case "attachment": {
      const { mime, bytes } = isImageMime(result.mime)
        ? await normalizeImage("filePath", result.data, result.mime, ctx.limits ?? DEFAULT_LIMITS)
        : { mime: result.mime, bytes: result.data };
      ctx.signal?.throwIfAborted();
      const base64 = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
      return {
        title,
        output: result.output,
        metadata: { truncated: false, mime, bytes: bytes.byteLength },
        attachments: [{ mime, url: `data:${mime};base64,${base64}`, filename: basename(path) }],
      };
    }
  }
}
