/**
 * Turning file bytes into text without mojibake (docs/design.md §4: "non-UTF-8 text is decoded (BOM,
 * then a fallback)"). OpenCode's read tool always decodes as UTF-8 and keeps a UTF-8 BOM; we
 * honour byte-order marks, strip them, and fall back to windows-1252 when the bytes are not UTF-8.
 */

/** An encoding named by a byte-order mark at the start of a file. */
export type BomEncoding = "utf-8" | "utf-16le" | "utf-16be";

/** Encoding used when bytes carry no BOM and are not valid UTF-8 (WHATWG label; `latin1` maps here too). */
export const FALLBACK_ENCODING = "windows-1252";

/** Encodings this module can decode. */
export type TextEncodingName = BomEncoding | typeof FALLBACK_ENCODING;

// WHATWG index-windows-1252 for bytes 0x80-0x9F (other bytes map to the same code point).
const CP1252_C1 =
  "\u20AC\u0081\u201A\u0192\u201E\u2026\u2020\u2021\u02C6\u2030\u0160\u2039\u0152\u008D\u017D\u008F" +
  "\u0090\u2018\u2019\u201C\u201D\u2022\u2013\u2014\u02DC\u2122\u0161\u203A\u0153\u009D\u017E\u0178";

/**
 * Decodes windows-1252 bytes per the WHATWG Encoding Standard (0x80 → €, 0x93 → “, ...).
 * Done by hand because Node 20.18.3+ `TextDecoder("windows-1252")` decodes 0x80–0x9F as
 * ISO-8859-1 (nodejs/node#60888, #56542). Every byte maps to one character; never throws.
 */
export function decodeWindows1252(bytes: Uint8Array): string {
  const latin1 = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("latin1");
  return latin1.replace(/[\x80-\x9f]/g, (c) => CP1252_C1.charAt(c.charCodeAt(0) - 0x80));
}

/**
 * An incremental decoder: call it with each chunk of bytes in order, then once with no argument
 * to flush; each call returns the text decoded so far. A leading BOM of a UTF-8/UTF-16 decoder's
 * own encoding is dropped. With `fatal`, invalid input throws a `TypeError`.
 */
export type ChunkDecoder = (chunk?: Uint8Array) => string;

/**
 * Makes a {@link ChunkDecoder} for `encoding`. Multi-byte sequences split across chunks are
 * handled. `fatal` applies to UTF-8/UTF-16 only (windows-1252 cannot fail).
 */
export function chunkDecoder(encoding: TextEncodingName, fatal = false): ChunkDecoder {
  if (encoding === FALLBACK_ENCODING) return (chunk) => (chunk === undefined ? "" : decodeWindows1252(chunk));
  const decoder = new TextDecoder(encoding, { fatal });
  return (chunk) => (chunk === undefined ? decoder.decode() : decoder.decode(chunk, { stream: true }));
}

/**
 * Names the encoding announced by a byte-order mark at the start of `bytes`.
 *
 * @param bytes - the first bytes of a file (3 are enough; fewer is fine).
 * @returns `"utf-8"` for `EF BB BF`, `"utf-16le"` for `FF FE`, `"utf-16be"` for `FE FF`,
 *   `undefined` when there is no BOM. Never throws.
 */
export function detectBom(bytes: Uint8Array): BomEncoding | undefined {
  if (bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) return "utf-8";
  if (bytes.length >= 2 && bytes[0] === 0xff && bytes[1] === 0xfe) return "utf-16le";
  if (bytes.length >= 2 && bytes[0] === 0xfe && bytes[1] === 0xff) return "utf-16be";
  return undefined;
}

/**
 * Decodes a whole file's bytes to a string.
 *
 * Order: a BOM decides the encoding (UTF-8, UTF-16LE or UTF-16BE; malformed sequences after a
 * BOM become U+FFFD); without a BOM the bytes are decoded as UTF-8 with `fatal: true`, and if
 * that fails the whole input is decoded as windows-1252 (every byte maps to a character, so this
 * never fails). The result never starts with a BOM (U+FEFF). `63 61 66 E9 0A` gives `"café\n"`.
 *
 * Streaming readers (see `src/files/read-file.ts`) make the same choice chunk by chunk.
 *
 * @param bytes - the complete content of a file or body, in bytes.
 * @returns the decoded text. Never throws.
 */
export function decodeText(bytes: Uint8Array): string {
  const bom = detectBom(bytes);
  let text: string;
  if (bom !== undefined) {
    // ignoreBOM: false (the default) makes TextDecoder drop the BOM of its own encoding.
    text = new TextDecoder(bom).decode(bytes);
  } else {
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch {
      text = decodeWindows1252(bytes);
    }
  }
  return stripBom(text);
}

/** Removes one leading U+FEFF from `text`, if present. */
export function stripBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}
