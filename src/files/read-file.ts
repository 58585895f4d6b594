import { createReadStream } from "node:fs";
import { open, readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { fileTypeFromFile } from "file-type";
import { LimitExceededError } from "../errors.js";
import { BINARY_SAMPLE_BYTES, isBinary } from "./binary.js";
import { chunkDecoder, detectBom, FALLBACK_ENCODING, type ChunkDecoder } from "./text-decode.js";

/** Lines shown when no limit is given (lines). Follows OpenCode read.ts. */
export const READ_DEFAULT_LIMIT = 2000;
/** Longer lines are cut to this many UTF-16 code units (chars). Follows OpenCode read.ts. */
export const READ_MAX_LINE_LENGTH = 2000;
/** Cap on the UTF-8 size of the numbered lines (bytes of output). Follows OpenCode read.ts. */
export const READ_MAX_BYTES = 50 * 1024;
/** Default cap on an image/PDF attachment (bytes). */
export const READ_MAX_ATTACHMENT_BYTES = 20 * 1024 * 1024;

const LINE_SUFFIX = `... (line truncated to ${READ_MAX_LINE_LENGTH} chars)`;
const MAX_BYTES_LABEL = `${READ_MAX_BYTES / 1024} KB`;
/** Sniffed MIME → attachment MIME. APNG is a valid PNG, so it is sent as image/png. */
const ATTACHMENTS: ReadonlyMap<string, string> = new Map([
  ["image/png", "image/png"],
  ["image/apng", "image/png"],
  ["image/jpeg", "image/jpeg"],
  ["image/gif", "image/gif"],
  ["image/webp", "image/webp"],
  ["application/pdf", "application/pdf"],
]);

/**
 * What {@link readPath} produced.
 * - `text`: `output` is OpenCode's `<path>/<type>file</type>/<content>` block with numbered lines
 *   and a footer; `totalLines` counts every line of the file (at least, when the file goes on
 *   more than 16 MiB past the lines shown: the footer then says "of more than N"); `truncated`
 *   is true when lines remain after the ones shown (line limit or the 50 KB cap).
 * - `directory`: `output` is OpenCode's `<entries>` block; `entries` is the total entry count.
 * - `attachment`: an image (png, jpeg, gif, webp) or PDF, found by content; `mime` is the sniffed
 *   type, `data` the whole file, `output` `"Image read successfully"` / `"PDF read successfully"`.
 */
export type ReadResult =
  | { kind: "text"; output: string; totalLines: number; truncated: boolean }
  | { kind: "directory"; output: string; entries: number }
  | { kind: "attachment"; mime: string; data: Uint8Array; output: string };

/** The read failed for a reason to show the user or model; `message` is that reason (no stack). */
export class ReadFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ReadFailure";
  }
}

/** Options of {@link readPath}. */
export interface ReadOptions {
  /** First line (or directory entry) to show, 1-based; default 1. */
  offset?: number;
  /** Most lines (or entries) to show; default {@link READ_DEFAULT_LIMIT}. */
  limit?: number;
  /** Largest image/PDF returned as an attachment (bytes); default 20 MiB. */
  maxAttachmentBytes?: number;
  /** Request field named in a LimitExceededError; default `"path"`. */
  field?: string;
}

function failure(path: string, err: unknown): ReadFailure {
  if (err instanceof ReadFailure) return err;
  const code = typeof err === "object" && err !== null && "code" in err ? err.code : undefined;
  if (code === "ENOENT" || code === "ENOTDIR") return new ReadFailure(`File not found: ${path}`);
  return new ReadFailure(err instanceof Error ? err.message : String(err));
}

async function readHead(path: string): Promise<Uint8Array> {
  const handle = await open(path, "r");
  try {
    const buf = new Uint8Array(BINARY_SAMPLE_BYTES);
    const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
    return buf.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

async function listDirectory(path: string, offset: number, limit: number): Promise<ReadResult> {
  const dirents = await readdir(path, { withFileTypes: true });
  const names = await Promise.all(
    dirents.map(async (d) => {
      if (d.isDirectory()) return `${d.name}/`;
      if (!d.isSymbolicLink()) return d.name;
      const target = await stat(join(path, d.name)).catch(() => undefined);
      return target?.isDirectory() ? `${d.name}/` : d.name;
    }),
  );
  names.sort((a, b) => a.localeCompare(b, "en"));
  const start = offset - 1;
  const sliced = names.slice(start, start + limit);
  const truncated = start + sliced.length < names.length;
  const output = [
    `<path>${path}</path>`,
    `<type>directory</type>`,
    `<entries>`,
    sliced.join("\n"),
    truncated
      ? `\n(Showing ${sliced.length} of ${names.length} entries. Use 'offset' parameter to read beyond entry ${offset + sliced.length})`
      : `\n(${names.length} entries)`,
    `</entries>`,
  ].join("\n");
  return { kind: "directory", output, entries: names.length };
}

interface Scan {
  raw: string[];
  /** Lines counted: the file's line count, or a lower bound when `countCapped`. */
  count: number;
  cut: boolean;
  more: boolean;
  /** The count stopped {@link COUNT_MAX_BYTES} after the output was full: `count` is a lower bound. */
  countCapped: boolean;
  /** The count stopped inside the last line shown: whether any line follows it is not known. */
  lastUnended?: boolean;
}

/**
 * How far past the shown lines the scan goes on counting the file's lines, in bytes of the file
 * (16 MiB): the footer's "of N" costs a read of the whole file, which for a 4 GiB file took 70 s
 * (a probe, 2026-12-02). Beyond it the footer says "of more than N".
 */
const COUNT_MAX_BYTES = 16 * 1024 * 1024;

/**
 * Streams the file through `decoder`, splitting lines like Node's readline with crlfDelay
 * Infinity (`\n`, `\r\n` and a lone `\r` end a line; no empty line after a final newline).
 * Memory is bounded: a line keeps at most READ_MAX_LINE_LENGTH + 1 chars. Counts the lines after
 * the output is full too, for up to {@link COUNT_MAX_BYTES} of the file, so `count` is the file's
 * line count (a lower bound, `countCapped`, when the file goes on beyond that).
 * Returns undefined when the fatal UTF-8 decoder meets invalid bytes.
 */
async function scanLines(path: string, decode: ChunkDecoder, fatal: boolean, offset: number, limit: number): Promise<Scan | undefined> {
  const scan: Scan = { raw: [], count: 0, cut: false, more: false, countCapped: false };
  let bytes = 0;
  let line = "";
  let length = 0;
  let afterCR = false;
  const emit = (): void => {
    scan.count += 1;
    const text = line;
    const full = length;
    line = "";
    length = 0;
    if (scan.count < offset || scan.cut) return;
    if (scan.raw.length >= limit) {
      scan.more = true;
      return;
    }
    let shown = text;
    if (full > READ_MAX_LINE_LENGTH) {
      const end = /[\uD800-\uDBFF]/.test(text.charAt(READ_MAX_LINE_LENGTH - 1)) ? READ_MAX_LINE_LENGTH - 1 : READ_MAX_LINE_LENGTH;
      shown = text.substring(0, end) + LINE_SUFFIX;
    }
    const size = Buffer.byteLength(shown, "utf-8") + (scan.raw.length > 0 ? 1 : 0);
    if (bytes + size > READ_MAX_BYTES) {
      scan.cut = true;
      scan.more = true;
      return;
    }
    scan.raw.push(shown);
    bytes += size;
  };
  const append = (text: string): void => {
    length += text.length;
    if (line.length <= READ_MAX_LINE_LENGTH) line += text.slice(0, READ_MAX_LINE_LENGTH + 1 - line.length);
  };
  const push = (text: string): void => {
    if (text.length === 0) return;
    let i = 0;
    if (afterCR && text.charCodeAt(0) === 10) i = 1;
    afterCR = false;
    const breaks = /[\r\n]/g;
    breaks.lastIndex = i;
    for (let m = breaks.exec(text); m !== null; m = breaks.exec(text)) {
      append(text.slice(i, m.index));
      emit();
      i = m.index + 1;
      if (m[0] === "\r") {
        if (i === text.length) afterCR = true;
        else if (text.charCodeAt(i) === 10) i += 1;
        breaks.lastIndex = i;
      }
    }
    if (i < text.length) append(text.slice(i));
  };

  const stream = createReadStream(path);
  let read = 0;
  // Where the budget starts: when the output is full, or when the line being read is already
  // longer than any line is shown (its shown text is fixed; a huge line need not be read to its end).
  let fullAt: number | undefined;
  /** The line being read when `fullAt` was set (1-based). */
  let fullLine = 0;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      if (fullAt === undefined && (scan.more || (length > READ_MAX_LINE_LENGTH && scan.count + 1 >= offset))) {
        fullAt = read;
        fullLine = scan.count + 1;
      }
      if (fullAt !== undefined && read - fullAt > COUNT_MAX_BYTES) {
        // A line cut short is shown as far as it goes; what follows it is not known.
        if (length > 0 && !scan.more) {
          // The line the budget started in went on for all of it (not a later, shorter one).
          const unended = scan.count + 1 === fullLine;
          emit();
          scan.lastUnended = unended && !scan.more;
        }
        scan.more = true;
        scan.countCapped = true;
        return scan;
      }
      read += chunk.length;
      push(decode(chunk));
    }
    push(decode());
  } catch (err) {
    if (err instanceof TypeError && fatal) return undefined;
    throw err;
  } finally {
    stream.destroy();
  }
  if (length > 0) emit();
  return scan;
}

async function readText(path: string, head: Uint8Array, offset: number, limit: number): Promise<ReadResult> {
  const bom = detectBom(head);
  // The decoder drops the BOM of its own encoding, so output never shows U+FEFF.
  const fatal = bom === undefined;
  let file = await scanLines(path, chunkDecoder(bom ?? "utf-8", fatal), fatal, offset, limit);
  file ??= await scanLines(path, chunkDecoder(FALLBACK_ENCODING), false, offset, limit);
  if (file === undefined) throw new ReadFailure(`Cannot decode file: ${path}`);
  if (file.count < offset && !(file.count === 0 && offset === 1)) {
    throw new ReadFailure(`Offset ${offset} is out of range for this file (${file.count} lines)`);
  }
  let output = [`<path>${path}</path>`, `<type>file</type>`, "<content>\n"].join("\n");
  output += file.raw.map((line, i) => `${i + offset}: ${line}`).join("\n");
  const last = offset + file.raw.length - 1;
  if (file.cut) {
    output += `\n\n(Output capped at ${MAX_BYTES_LABEL}. Showing lines ${offset}-${last}. Use offset=${last + 1} to continue.)`;
  } else if (file.lastUnended) {
    // A trial, 2026-12-03: a 100 MB one-line file said "of more than 1. Use offset=2", with no line 2.
    output += `\n\n(Showing lines ${offset}-${last}; line ${last} goes on for more than ${COUNT_MAX_BYTES / 1024 / 1024} MiB, so the rest of the file is not read.)`;
  } else if (file.more) {
    const of = file.countCapped ? `more than ${file.count}` : `${file.count}`;
    output += `\n\n(Showing lines ${offset}-${last} of ${of}. Use offset=${last + 1} to continue.)`;
  } else {
    output += `\n\n(End of file - total ${file.count} lines)`;
  }
  output += "\n</content>";
  return { kind: "text", output, totalLines: file.count, truncated: file.more };
}

/**
 * Reads a file or directory the way OpenCode's read tool does, for `file:` attachments and the
 * model's `read` tool. The path is used as given: confine it first (`confinePath`).
 *
 * Follows OpenCode read.ts (output text, limits, footers, binary test, offset check), except:
 * images/PDF are found by content (`file-type`), not by extension; text is decoded by BOM, then
 * UTF-8, then windows-1252 (see `decodeText`), with the BOM dropped; anything but a regular file
 * or directory is refused without being opened; a missing file gets no "Did you mean" list.
 *
 * - Directory: entries sorted with `localeCompare(…, "en")`, subdirectories (and symlinks to
 *   directories) end with `/`; `offset`/`limit` page through entries.
 * - Text: lines numbered `N: text` from `offset`, cut at 2000 chars with
 *   `... (line truncated to 2000 chars)`, at most `limit` lines and 50 KB of lines; read as a
 *   stream, so memory stays bounded on huge files.
 *
 * @param path - absolute path of the file or directory.
 * @param options - offset (1-based line), limit (lines), maxAttachmentBytes (bytes), field.
 * @returns a text, directory or attachment {@link ReadResult}.
 * @throws ReadFailure `File not found: <path>`, `Cannot read binary file: <path>`,
 *   `Offset N is out of range for this file (M lines)`, `Not a regular file or directory: <path>`,
 *   `offset must be greater than or equal to 1`, `limit must be greater than or equal to 1`, or
 *   the fs error's message (e.g. `EACCES: permission denied, open '<path>'`).
 * @throws LimitExceededError(field, "attachment_bytes", max, size, "bytes") for a too-large image/PDF.
 */
export async function readPath(path: string, options: ReadOptions = {}): Promise<ReadResult> {
  const offset = options.offset ?? 1;
  const limit = options.limit ?? READ_DEFAULT_LIMIT;
  if (!Number.isSafeInteger(offset) || offset < 1) throw new ReadFailure("offset must be greater than or equal to 1");
  if (!Number.isSafeInteger(limit) || limit < 1) throw new ReadFailure("limit must be greater than or equal to 1");
  try {
    const info = await stat(path);
    if (info.isDirectory()) return await listDirectory(path, offset, limit);
    if (!info.isFile()) throw new ReadFailure(`Not a regular file or directory: ${path}`);

    const head = await readHead(path);
    const sniffed = head.length === 0 ? undefined : await fileTypeFromFile(path).catch(() => undefined);
    const mime = sniffed === undefined ? undefined : ATTACHMENTS.get(sniffed.mime);
    if (mime !== undefined) {
      const max = options.maxAttachmentBytes ?? READ_MAX_ATTACHMENT_BYTES;
      if (info.size > max) throw new LimitExceededError(options.field ?? "path", "attachment_bytes", max, info.size, "bytes");
      const buf = await readFile(path);
      const data = new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
      return { kind: "attachment", mime, data, output: `${mime === "application/pdf" ? "PDF" : "Image"} read successfully` };
    }
    if (isBinary(path, head)) throw new ReadFailure(`Cannot read binary file: ${path}`);
    return await readText(path, head, offset, limit);
  } catch (err) {
    if (err instanceof LimitExceededError) throw err;
    throw failure(path, err);
  }
}
