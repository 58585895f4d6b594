import { constants } from "node:fs";
import { open } from "node:fs/promises";
import { BINARY_SAMPLE_BYTES, isBinary } from "./binary.js";
import { decodeText } from "./text-decode.js";

/**
 * A file's content for a text search, or why it has none: `binary` (by {@link isBinary}, or no
 * longer a regular file when opened) or `large` (over the caller's size cap).
 */
export type Searchable = { kind: "text"; text: string } | { kind: "binary" } | { kind: "large" };

/**
 * Reads a file for a content search (the model's `grep` tool). Opens it without blocking
 * (`O_NONBLOCK`, so a FIFO swapped in after the file was found cannot hang the call), checks it
 * is still a regular file, sniffs the first {@link BINARY_SAMPLE_BYTES} bytes with
 * {@link isBinary}, then reads and decodes the whole file (`decodeText`: BOM, UTF-8,
 * windows-1252) if it is within `maxBytes`. The path is used as given: confine it first
 * (`confinePath`).
 *
 * @param path - absolute path of the file.
 * @param maxBytes - largest file read (bytes); a larger one is `large` (binary is checked first).
 * @returns the decoded text, or `binary` / `large`.
 * @throws the fs error (with a `code`, e.g. ENOENT, EACCES) when the file cannot be opened or read.
 */
export async function readSearchable(path: string, maxBytes: number): Promise<Searchable> {
  const handle = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const info = await handle.stat();
    if (!info.isFile()) return { kind: "binary" };
    const head = new Uint8Array(Math.min(info.size, BINARY_SAMPLE_BYTES));
    const { bytesRead } = await handle.read(head, 0, head.length, 0);
    if (isBinary(path, head.subarray(0, bytesRead))) return { kind: "binary" };
    if (info.size > maxBytes) return { kind: "large" };
    const buf = new Uint8Array(info.size);
    let n = 0;
    while (n < buf.length) {
      const { bytesRead: got } = await handle.read(buf, n, buf.length - n, n);
      if (got === 0) break;
      n += got;
    }
    return { kind: "text", text: decodeText(buf.subarray(0, n)) };
  } finally {
    await handle.close();
  }
}
