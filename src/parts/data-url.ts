import parseDataURL from "data-urls";
import { TextDecoder } from "node:util";
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
 * @param field - request field named in errors, e.g. `parts[0].file.url`.
 * @param url - the URL string.
 * @returns the MIME essence, charset and body bytes.
 * @throws InvalidArgumentError when `url` is not a `data:` URL, has no `,`, or has invalid base64.
 */
export function parseDataUrl(field: string, url: string): DataUrl {
  if (!/^\s*data:/i.test(url)) throw new InvalidArgumentError(field, "is not a data: URL");
  const parsed = parseDataURL(url);
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
