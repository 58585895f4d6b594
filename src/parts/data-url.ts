import parseDataURL from "data-urls";
import { TextDecoder } from "node:util";
import { percentDecodeString } from "whatwg-url";
import { InvalidArgumentError } from "../errors.js";
import { decodeText, decodeWindows1252, detectBom, FALLBACK_ENCODING, stripBom } from "../files/text-decode.js";

/** A parsed `data:` URL. */
export interface DataUrl {
  /** MIME essence (`type/subtype`), lower-cased, without parameters, e.g. `text/plain`. */
  mime: string;
  /** The `charset` parameter as written (labels are case-insensitive), when present. */
  charset?: string;
  /** The decoded body (base64 or percent-decoded), in bytes. */
  bytes: Uint8Array;
}

/**
 * Parses a `data:` URL with the WHATWG "data: URL processor" (package `data-urls`): base64 is
 * decoded forgivingly (ASCII whitespace, including base64 wrapped every 76 chars with `\n` or
 * `\r\n`, is ignored), percent-encoded bodies are decoded, and an unparsable MIME type becomes
 * `text/plain;charset=US-ASCII` as the standard says. `data:text/plain;charset=utf-8;base64,aGk=`
 * gives `{ mime: "text/plain", charset: "utf-8", bytes: "hi" }`.
 *
 * The result is the library's for every input, but the body of a URL in the usual shape
 * (`data:` then anything but `/`, a part before the first comma under 64 KiB) is not given to the
 * WHATWG URL parser, which takes about 2.5 s of CPU per MiB (the event loop stalls meanwhile):
 * see {@link processDataUrl}. A URL in another shape is parsed whole by the library up to 64 KiB
 * and refused beyond.
 *
 * @param field - request field named in errors, e.g. `parts[0].file.url`.
 * @param url - the URL string.
 * @returns the MIME essence, charset and body bytes.
 * @throws InvalidArgumentError when `url` is not a `data:` URL, has no `,`, has invalid base64,
 *   or is over 64 KiB (UTF-16 code units) and not in the usual shape.
 */
export function parseDataUrl(field: string, url: string): DataUrl {
  if (!/^\s*data:/i.test(url)) throw new InvalidArgumentError(field, "is not a data: URL");
  const parsed = processDataUrl(url);
  if (parsed === "unusual") {
    throw new InvalidArgumentError(
      field,
      `is a data: URL of ${url.length} characters that is not in the form data:<mime>[;base64],<data> with a MIME part under 64 KiB (a URL in another shape may have at most ${WHOLE_PARSE_MAX} characters)`,
    );
  }
  if (parsed === null) {
    throw new InvalidArgumentError(
      field,
      "is not a valid data: URL (expected data:[<mime>][;base64],<data> with a comma and valid base64)",
    );
  }
  const charset = parsed.mimeType.parameters.get("charset");
  const out: DataUrl = { mime: parsed.mimeType.essence.toLowerCase(), bytes: parsed.body };
  if (charset !== undefined) out.charset = charset;
  return out;
}

/** Most UTF-16 code units of a data: URL (or of its part before the first comma) the WHATWG URL parser is given whole. */
const WHOLE_PARSE_MAX = 64 * 1024;

/**
 * The `data-urls` result for `url`, computed without running the WHATWG URL parser over the body.
 *
 * For a URL that starts (after leading C0 controls and spaces) with `data:` and a character other
 * than `/`, the URL parser only trims C0 controls and spaces at both ends, drops tabs and
 * newlines, keeps an opaque path and a query whose percent-encoding the data: URL processor
 * undoes (so the body's bytes are the percent-decoded UTF-8 of what follows the first comma),
 * and drops the fragment. So the part before the first comma (the MIME type) goes through the
 * library as `data:<mime>,QQ==`, which also says whether the body is base64 (its body is then
 * 1 byte, else 4), and the body is percent-decoded (`whatwg-url`) and, for base64, decoded by
 * `atob`, the platform's forgiving-base64 decode the library uses too.
 *
 * @returns the library's `{ mimeType, body }`, null where it returns null (no comma, invalid
 *   base64, not a URL), or "unusual" for a URL over {@link WHOLE_PARSE_MAX} not in that shape.
 */
function processDataUrl(url: string): ReturnType<typeof parseDataURL> | "unusual" {
  let start = 0;
  let end = url.length;
  while (start < end && url.charCodeAt(start) <= 0x20) start++;
  while (end > start && url.charCodeAt(end - 1) <= 0x20) end--;
  const s = url.slice(start, end).replace(/[\t\n\r]/g, "");
  const hash = s.indexOf("#");
  const rest = s.slice(5, hash < 0 ? undefined : hash);
  const comma = rest.indexOf(",");
  if (!/^data:[^/]/i.test(s) || comma > WHOLE_PARSE_MAX) return url.length > WHOLE_PARSE_MAX ? "unusual" : parseDataURL(url);
  if (comma < 0) return null;
  const head = parseDataURL(`data:${rest.slice(0, comma)},QQ==`);
  if (head === null) return null;
  const body = rest.slice(comma + 1);
  const ascii = !body.includes("%") && Buffer.byteLength(body, "utf8") === body.length;
  const bytes = (): Uint8Array => (ascii ? Buffer.from(body, "latin1") : percentDecodeString(body));
  if (head.body.byteLength === 4) return { mimeType: head.mimeType, body: bytes() };
  // The isomorphic decode of the percent-decoded bytes: the body itself when it is ASCII without escapes.
  const text = ascii ? body : Buffer.from(percentDecodeString(body)).toString("latin1");
  let decoded: string;
  try {
    decoded = atob(text);
  } catch {
    return null;
  }
  return { mimeType: head.mimeType, body: Buffer.from(decoded, "latin1") };
}

/** Subtypes of `application/` (and structured-syntax suffixes) whose body is text. */
const TEXT_SUBTYPE =
  /(?:^|[+.-])(?:json|jsonc|json5|ndjson|xml|yaml|yml|toml|javascript|ecmascript|typescript|sql|graphql|csv|x-sh|x-shellscript)$/;

/**
 * Whether a MIME type names text a model can read as it is: any `text/*`, and `application/`
 * JSON, XML, YAML, TOML, JavaScript, TypeScript, SQL, GraphQL, CSV and shell scripts (with
 * their `+json`/`+xml` suffix forms, e.g. `application/ld+json`). Parameters are ignored.
 *
 * @param mime - e.g. `text/markdown`, `application/json; charset=utf-8`.
 * @returns true for the types above, false otherwise (images, PDFs, `application/octet-stream`).
 */
export function isTextMime(mime: string): boolean {
  const [type, subtype = ""] = mime.split(";")[0]!.trim().toLowerCase().split("/");
  return type === "text" || (type === "application" && TEXT_SUBTYPE.test(subtype));
}

/**
 * Decodes a data URL's body as text.
 *
 * A byte-order mark wins (as in the WHATWG "decode" algorithm); otherwise the `charset` parameter
 * is used (any WHATWG encoding label; an unknown label falls back to UTF-8; malformed sequences
 * become U+FFFD). Without a charset the body goes through {@link decodeText}: UTF-8 when valid,
 * else windows-1252. The result never starts with a BOM.
 *
 * @param d - a parsed data URL.
 * @returns the text. Never throws.
 */
export function dataUrlText(d: DataUrl): string {
  if (d.charset === undefined || detectBom(d.bytes) !== undefined) return decodeText(d.bytes);
  let decoder: TextDecoder;
  try {
    decoder = new TextDecoder(d.charset.trim());
  } catch {
    decoder = new TextDecoder("utf-8");
  }
  // latin1, iso-8859-1, us-ascii, ... are windows-1252 labels; Node decodes those wrongly.
  if (decoder.encoding === FALLBACK_ENCODING) return decodeWindows1252(d.bytes);
  return stripBom(decoder.decode(d.bytes));
}

/**
 * Builds a base64 `data:` URL: `data:${mime};base64,${base64(bytes)}` (no line wrapping).
 *
 * @param mime - MIME type to put in the URL, e.g. `image/png`; not validated.
 * @param bytes - the body, in bytes.
 * @returns the URL string. Never throws.
 */
export function toDataUrl(mime: string, bytes: Uint8Array): string {
  return `data:${mime};base64,${Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64")}`;
}
