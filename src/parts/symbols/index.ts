import { constants } from "node:fs";
import { open } from "node:fs/promises";
import { extname } from "node:path";
import { logger } from "../../observe/log.js";
import { BINARY_SAMPLE_BYTES, isBinary } from "../../files/binary.js";
import { decodeText } from "../../files/text-decode.js";
import { TREE_SITTER_EXTENSIONS, treeSitterSymbolAt } from "./tree-sitter.js";
import type { SourceSymbol } from "./types.js";
import { TYPESCRIPT_EXTENSIONS, typescriptSymbolAt } from "./typescript.js";

export type { SourceSymbol } from "./types.js";

/**
 * Finds the symbol that starts at a line of a source file, for a `file:` draft whose range is one
 * line (`?start=N&end=N`). Follows OpenCode's `resolvePart` (`session/prompt.ts`), which asks a
 * running language server for `textDocument/documentSymbol` and widens the range to the symbol
 * whose range starts at that line; here the file is parsed in-process (see
 * `typescriptSymbolAt` and `treeSitterSymbolAt`) and every line is 1-based.
 *
 * Parsing is synchronous, so lookups (read and parse) run one at a time per process, each after
 * the event loop had a turn: other requests and streams go on between two files, and at most
 * one source file is held for parsing. The declarations of the last 4 TypeScript/JavaScript
 * files are kept by path and text, so several ranges on one unchanged file parse it once.
 *
 * Best effort, never an error for the client: an unsupported extension, a file over `maxBytes`,
 * a binary file, a line with no declaration on it, or a parser that fails to load all give
 * `undefined`, and the caller reads the single line. A parser failure is logged as a warning.
 *
 * @param path - absolute path, already confined (see `confinePath`); must be a regular file.
 * @param line - the requested line, 1-based (lines).
 * @param maxBytes - largest file parsed, in bytes (limit `symbol_source_bytes`).
 * @returns the symbol's name, kind and 1-based inclusive line range, or undefined.
 */
export async function findSymbolAt(path: string, line: number, maxBytes: number): Promise<SourceSymbol | undefined> {
  const ext = extname(path).toLowerCase();
  const treeSitter = TREE_SITTER_EXTENSIONS.get(ext);
  if (!TYPESCRIPT_EXTENSIONS.has(ext) && treeSitter === undefined) return undefined;
  try {
    // Read inside the queue too: one source file in memory at a time, whatever the load.
    return await oneAtATime(async () => {
      const bytes = await readBounded(path, maxBytes);
      if (bytes === undefined || isBinary(path, bytes.subarray(0, BINARY_SAMPLE_BYTES))) return undefined;
      // A lone `\r` ends a line for the read tool (readline rules); make it a `\n` for the parsers,
      // which count `\n` only, so both agree on line numbers. The length, hence every offset, stays.
      const file = { path, text: decodeText(bytes).replace(/\r(?!\n)/g, "\n") };
      return treeSitter === undefined ? typescriptSymbolAt(file, line) : treeSitterSymbolAt(file, treeSitter, line);
    });
  } catch (error) {
    logger.warn("symbol lookup failed; reading the single line", {
      path,
      line,
      error: error instanceof Error ? error.message : String(error),
    });
    return undefined;
  }
}

let queue: Promise<unknown> = Promise.resolve();

/** Runs `parse` after every earlier one, and after the event loop has had a turn. */
function oneAtATime<T>(parse: () => Promise<T>): Promise<T> {
  const run = queue.then(() => new Promise<void>((resolve) => setImmediate(resolve))).then(parse);
  queue = run.catch(() => undefined);
  return run;
}

/** The whole file if it is a regular file of at most `maxBytes` bytes, else undefined. */
async function readBounded(path: string, maxBytes: number): Promise<Uint8Array | undefined> {
  let handle;
  try {
    // O_NONBLOCK: a FIFO swapped in after confinement opens at once instead of hanging.
    handle = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  try {
    const info = await handle.stat();
    if (!info.isFile() || info.size > maxBytes) return undefined;
    // Read one byte more than stat said: a file that changed size meanwhile is not parsed half-read.
    const buffer = Buffer.alloc(info.size + 1);
    let length = 0;
    while (length < buffer.length) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    return length !== info.size ? undefined : new Uint8Array(buffer.buffer, buffer.byteOffset, length);
  } finally {
    await handle.close();
  }
}
