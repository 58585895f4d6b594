import { fileTypeFromBuffer } from "file-type";
import type sharp from "sharp";
import type { Limits } from "../config/limits.js";
import { InvalidArgumentError, LimitExceededError } from "../errors.js";
import { loadOnce } from "../load-once.js";

/** Longest side a stored image may have, in pixels (docs/design.md §3 step 6). */
export const IMAGE_MAX_DIMENSION = 2000;
/** Largest stored image, in bytes of the encoded file (docs/design.md §3 step 6): 5 MiB. */
export const IMAGE_MAX_BYTES = 5 * 1024 * 1024;
/** JPEG qualities tried, in order, when the resized PNG is over the byte budget. */
export const JPEG_QUALITIES: readonly number[] = [85, 70, 55, 40, 25, 10];

/**
 * libvips `fail_on` level used for every decode. `error` refuses truncated data and decoder
 * errors (a cut PNG or JPEG, a corrupt WebP), but not mere warnings such as extraneous bytes
 * in a JPEG, which providers accept.
 */
const FAIL_ON = "error";

/**
 * sharp (libvips, ~30 MB of native code), imported on the first image, not when the ledger
 * starts; a failed load is tried again on the next image.
 */
const loadSharp: () => Promise<typeof sharp> = loadOnce(() => import("sharp").then((mod) => mod.default));

/** Formats stored unchanged when within bounds: sharp's format name → MIME type. */
const KEPT_FORMATS: ReadonlyMap<string, string> = new Map([
  ["png", "image/png"],
  ["jpeg", "image/jpeg"],
  ["gif", "image/gif"],
  ["webp", "image/webp"],
]);

/** Formats whose frame count multiplies their pixel count (every frame is decoded when kept). */
const ANIMATED_FORMATS: ReadonlySet<string> = new Set(["gif", "webp"]);

/** Sniffed (`file-type`) MIME types that count as image content: the raster formats sharp decodes. */
const SNIFFED_IMAGES: ReadonlyMap<string, string> = new Map([
  ["image/png", "image/png"],
  ["image/apng", "image/png"],
  ["image/jpeg", "image/jpeg"],
  ["image/gif", "image/gif"],
  ["image/webp", "image/webp"],
  ["image/avif", "image/avif"],
  ["image/tiff", "image/tiff"],
]);

const SUPPORTED = "PNG, JPEG, GIF, WebP, AVIF, TIFF or SVG";

/** An image as it is stored: its real MIME type and encoded bytes. */
export interface NormalizedImage {
  /** MIME type of `bytes`, found by decoding (never the declared one): `image/png`, `image/jpeg`, `image/gif` or `image/webp`. */
  mime: string;
  /** The encoded image: the input itself when it was kept, else a new PNG or JPEG. */
  bytes: Uint8Array;
}

/** Bounds of {@link normalizeImage}; the defaults are docs/design.md's and suit the providers. */
export interface ImageBounds {
  /** Longest side, in pixels; default {@link IMAGE_MAX_DIMENSION}. */
  maxDimension?: number;
  /** Largest encoded image, in bytes; default {@link IMAGE_MAX_BYTES}. */
  maxBytes?: number;
}

/**
 * Is this MIME type (parameters allowed, any case) an image type (`image/*`)?
 *
 * @param mime - e.g. `image/PNG; name=a.png`.
 * @returns true for `image/...`. Never throws.
 */
export function isImageMime(mime: string): boolean {
  return mime.split(";")[0]!.trim().toLowerCase().startsWith("image/");
}

/**
 * Sniffs image content by its magic bytes (package `file-type`).
 *
 * @param bytes - the file content (only its first few KiB are looked at).
 * @returns the image MIME type (`image/png` also for APNG, `image/jpeg`, `image/gif`,
 *   `image/webp`, `image/avif`, `image/tiff`), or undefined for anything else. Never throws.
 */
export async function sniffImage(bytes: Uint8Array): Promise<string | undefined> {
  if (bytes.byteLength === 0) return undefined;
  const type = await fileTypeFromBuffer(bytes).catch(() => undefined);
  return type === undefined ? undefined : SNIFFED_IMAGES.get(type.mime);
}

/**
 * Normalizes an image before it is stored (docs/design.md §3 step 6), so that no later turn sends a
 * provider an image it refuses:
 *
 * 1. Empty input → `InvalidArgumentError`.
 * 2. The header is read (no pixel decoded): an unknown or corrupt header →
 *    `InvalidArgumentError`; more than `limits.image_pixels` pixels (width × height, times the
 *    frame count for animated GIF/WebP) → `LimitExceededError(field, "image_pixels", max,
 *    pixels, "pixels")`.
 * 3. A PNG, JPEG, GIF or WebP within `maxDimension` × `maxDimension` px and `maxBytes` is
 *    decoded in full (every frame) to prove it is whole, then returned byte-identical, with the
 *    MIME type of its real format. Truncated or corrupt data → `InvalidArgumentError`.
 * 4. Anything else (too large, too heavy, or AVIF/TIFF/SVG) is decoded (first frame/page only;
 *    EXIF orientation applied), shrunk to fit inside `maxDimension` × `maxDimension` keeping its
 *    aspect ratio (never enlarged; a side never goes below 1 px), and encoded as PNG; when that
 *    PNG is over `maxBytes`, as JPEG (alpha flattened on white) at quality 85, 70, 55, 40, 25, 10,
 *    the first that fits. None fits → `LimitExceededError(field, "image_bytes", maxBytes,
 *    smallest, "bytes")`. Metadata (EXIF, ICC) is dropped; colours are converted to sRGB.
 *
 * Decoding uses libvips `fail_on: error` and `limitInputPixels`, so a lying header cannot make
 * the decoder allocate more than the limit.
 *
 * @param field - request field named in errors, e.g. `parts[1].file.url`.
 * @param bytes - the encoded image, in bytes.
 * @param mime - the declared or sniffed MIME type, e.g. `image/png`; only used in error messages.
 * @param limits - `image_pixels`: most pixels decoded from one image.
 * @param bounds - override the 2000 px / 5 MiB bounds (tests, tuning).
 * @returns the image to store: its MIME type and bytes.
 * @throws InvalidArgumentError(field, ...) for an empty, undecodable, truncated or corrupt image.
 * @throws LimitExceededError for too many pixels (`image_pixels`) or an image that cannot be
 *   brought under `maxBytes` (`image_bytes`).
 */
export async function normalizeImage(
  field: string,
  bytes: Uint8Array,
  mime: string,
  limits: Pick<Limits, "image_pixels">,
  bounds: ImageBounds = {},
): Promise<NormalizedImage> {
  const maxDimension = bounds.maxDimension ?? IMAGE_MAX_DIMENSION;
  const maxBytes = bounds.maxBytes ?? IMAGE_MAX_BYTES;
  if (bytes.byteLength === 0) throw new InvalidArgumentError(field, `is an empty image (${mime}, 0 bytes)`);
  const sharp = await loadSharp();

  let header: sharp.Metadata;
  try {
    header = await sharp(bytes, { limitInputPixels: false }).metadata();
  } catch (error) {
    throw new InvalidArgumentError(field, `cannot be decoded as an image (${mime}; expected ${SUPPORTED}): ${reason(error)}`);
  }
  const { format, width, height } = header;
  if (!width || !height) throw new InvalidArgumentError(field, `cannot be decoded as an image (${mime}): its header gives no size`);
  const frames = ANIMATED_FORMATS.has(format) ? Math.max(header.pages ?? 1, 1) : 1;
  const pixels = width * height * frames;
  if (pixels > limits.image_pixels) throw new LimitExceededError(field, "image_pixels", limits.image_pixels, pixels, "pixels");

  const keptMime = KEPT_FORMATS.get(format);
  if (keptMime !== undefined && width <= maxDimension && height <= maxDimension && bytes.byteLength <= maxBytes) {
    try {
      await sharp(bytes, { failOn: FAIL_ON, limitInputPixels: limits.image_pixels, pages: -1 }).stats();
    } catch (error) {
      throw corrupt(field, format, error);
    }
    return { mime: keptMime, bytes };
  }

  let pixelsOut: { data: Buffer; info: sharp.OutputInfo };
  try {
    pixelsOut = await sharp(bytes, { failOn: FAIL_ON, limitInputPixels: limits.image_pixels, autoOrient: true })
      .resize({ width: maxDimension, height: maxDimension, fit: "inside", withoutEnlargement: true })
      .raw()
      .toBuffer({ resolveWithObject: true });
  } catch (error) {
    throw corrupt(field, format, error);
  }
  const { data, info } = pixelsOut;
  const resized = () => sharp(data, { raw: { width: info.width, height: info.height, channels: info.channels } });
  const png = await resized().png().toBuffer();
  if (png.byteLength <= maxBytes) return { mime: "image/png", bytes: png };
  let smallest = png.byteLength;
  for (const quality of JPEG_QUALITIES) {
    const jpeg = await resized().flatten({ background: "#ffffff" }).jpeg({ quality }).toBuffer();
    if (jpeg.byteLength <= maxBytes) return { mime: "image/jpeg", bytes: jpeg };
    smallest = Math.min(smallest, jpeg.byteLength);
  }
  throw new LimitExceededError(field, "image_bytes", maxBytes, smallest, "bytes");
}

function corrupt(field: string, format: string, error: unknown): InvalidArgumentError {
  return new InvalidArgumentError(field, `is a truncated or corrupt ${format.toUpperCase()} image: ${reason(error)}`);
}

function reason(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).trim();
}
