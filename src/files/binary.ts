import { extname } from "node:path";
import { detectBom } from "./text-decode.js";

/**
 * Extensions treated as binary without looking at the content (lower-case, with the dot).
 * Follows OpenCode read.ts `isBinaryFile` (same 28 extensions, same order).
 */
export const BINARY_EXTENSIONS: ReadonlySet<string> = new Set([
  ".zip",
  ".tar",
  ".gz",
  ".exe",
  ".dll",
  ".so",
  ".class",
  ".jar",
  ".war",
  ".7z",
  ".doc",
  ".docx",
  ".xls",
  ".xlsx",
  ".ppt",
  ".pptx",
  ".odt",
  ".ods",
  ".odp",
  ".bin",
  ".dat",
  ".obj",
  ".o",
  ".a",
  ".lib",
  ".wasm",
  ".pyc",
  ".pyo",
]);

/** How many leading bytes the content heuristic looks at (bytes). Follows OpenCode read.ts. */
export const BINARY_SAMPLE_BYTES = 4096;

/** Share of control bytes above which a sample is binary. Follows OpenCode read.ts. */
export const BINARY_CONTROL_RATIO = 0.3;

/**
 * Decides whether a file is binary (and so must not be shown as text).
 *
 * Follows OpenCode read.ts `isBinaryFile`: true for an extension in {@link BINARY_EXTENSIONS}
 * (case-insensitive); otherwise looks at the first {@link BINARY_SAMPLE_BYTES} bytes of `head`:
 * an empty sample is text, any NUL byte means binary, and so does a share of control bytes
 * (0x00–0x08 and 0x0E–0x1F; tab, LF, VT, FF and CR are fine) above 30%.
 * Unlike OpenCode, a UTF-16 byte-order mark (`FF FE` / `FE FF`) at the start means text; it is
 * checked before the NUL test because UTF-16 text is full of NUL bytes.
 *
 * @param path - the file's path; only its extension is used.
 * @param head - the first bytes of the file (any length; bytes past 4096 are ignored).
 * @returns true when the file is binary. Never throws.
 */
export function isBinary(path: string, head: Uint8Array): boolean {
  return BINARY_EXTENSIONS.has(extname(path).toLowerCase()) || isBinaryContent(head);
}

/**
 * The content half of {@link isBinary}, for a file whose bytes alone decide (the edit tool: a
 * text file named `model.obj` is text): a NUL byte, or more than 30% control bytes, in the first
 * 4096 bytes; a UTF-16 byte-order mark means text.
 *
 * @param head - the first bytes of the file (any length; bytes past 4096 are ignored).
 * @returns true when the bytes are binary. Never throws.
 */
export function isBinaryContent(head: Uint8Array): boolean {
  const sample = head.subarray(0, BINARY_SAMPLE_BYTES);
  if (sample.length === 0) return false;
  const bom = detectBom(sample);
  if (bom === "utf-16le" || bom === "utf-16be") return false;
  let control = 0;
  for (const byte of sample) {
    if (byte === 0) return true;
    if (byte < 9 || (byte > 13 && byte < 32)) control++;
  }
  return control / sample.length > BINARY_CONTROL_RATIO;
}
