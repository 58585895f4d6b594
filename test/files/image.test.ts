import { randomBytes } from "node:crypto";
import { crc32 } from "node:zlib";
import { create } from "@bufbuild/protobuf";
import sharp from "sharp";
import { describe, expect, it } from "vitest";
import { PartInputSchema, type PartInput } from "../../gen/ledger/v1/part_pb.js";
import { BUILT_IN_AGENTS } from "../../src/config/agents.js";
import { DEFAULT_LIMITS } from "../../src/config/limits.js";
import { InvalidArgumentError, LimitExceededError } from "../../src/errors.js";
import { parseDataUrl, toDataUrl } from "../../src/parts/data-url.js";
import { IMAGE_MAX_BYTES, isImageMime, normalizeImage, sniffImage } from "../../src/files/image.js";
import { resolveDrafts } from "../../src/parts/resolve.js";
import { rejection } from "../support/errors.js";
import { settlesWithin } from "../support/wait.js";

// Every image here is a real one, made by sharp itself.

const F = "parts[1].file.url";
const LIMITS = { image_pixels: DEFAULT_LIMITS.image_pixels };
const MiB = 1024 * 1024;

type Colour = { r: number; g: number; b: number; alpha?: number };
const GREEN: Colour = { r: 20, g: 160, b: 60 };

function solid(width: number, height: number, background: Colour = GREEN, channels: 3 | 4 = 3): sharp.Sharp {
  return sharp({ create: { width, height, channels, background } });
}

/** Uniform random RGB noise: incompressible, the worst case for PNG and JPEG. */
function noise(width: number, height: number): sharp.Sharp {
  return sharp(randomBytes(width * height * 3), { raw: { width, height, channels: 3 } });
}

async function info(bytes: Uint8Array): Promise<{ format: string; width: number; height: number; channels: number; pages: number }> {
  const m = await sharp(bytes).metadata();
  return { format: m.format, width: m.width, height: m.height, channels: m.channels, pages: m.pages ?? 1 };
}

async function invalid(promise: Promise<unknown>, message: RegExp): Promise<InvalidArgumentError> {
  const error = await rejection(promise);
  expect(error).toBeInstanceOf(InvalidArgumentError);
  const e = error as InvalidArgumentError;
  expect(e.field).toBe(F);
  expect(e.message).toMatch(message);
  return e;
}

async function animatedGif(width: number, height: number, frames: number): Promise<Buffer> {
  const colours = [GREEN, { r: 200, g: 30, b: 30 }, { r: 30, g: 30, b: 200 }, { r: 230, g: 230, b: 30 }];
  const pages = await Promise.all(
    Array.from({ length: frames }, (_, i) =>
      solid(width, height, colours[i % colours.length])
        .png()
        .toBuffer(),
    ),
  );
  return sharp(pages, { join: { animated: true } })
    .gif()
    .toBuffer();
}

/** A real PNG whose IHDR is rewritten (with a valid CRC) to declare another canvas size. */
async function pngDeclaring(width: number, height: number): Promise<Buffer> {
  const png = Buffer.from(await solid(1, 1).png().toBuffer());
  png.writeUInt32BE(width, 16);
  png.writeUInt32BE(height, 20);
  png.writeUInt32BE(crc32(png.subarray(12, 29)), 29);
  return png;
}

describe("normalizeImage keeps images within 2000×2000 px and 5 MiB as they are", () => {
  it.each([
    ["png", () => solid(640, 480).png().toBuffer(), "image/png"],
    ["jpeg", () => solid(2000, 2000).jpeg().toBuffer(), "image/jpeg"],
    ["webp", () => solid(300, 200).webp().toBuffer(), "image/webp"],
    ["gif", () => solid(300, 200).gif().toBuffer(), "image/gif"],
  ])("a small %s is returned byte-identical", async (_name, make, mime) => {
    const bytes = await make();
    const out = await normalizeImage(F, bytes, mime, LIMITS);
    expect(out.mime).toBe(mime);
    expect(Buffer.from(out.bytes).equals(bytes)).toBe(true);
  });

  it("reports the real format, not the declared one (a JPEG declared image/png)", async () => {
    const jpeg = await solid(100, 100).jpeg().toBuffer();
    const out = await normalizeImage(F, jpeg, "image/png", LIMITS);
    expect(out.mime).toBe("image/jpeg");
    expect(Buffer.from(out.bytes).equals(jpeg)).toBe(true);
  });

  it("keeps an animated GIF with all its frames", async () => {
    const gif = await animatedGif(120, 80, 3);
    expect((await info(gif)).pages).toBe(3);
    const out = await normalizeImage(F, gif, "image/gif", LIMITS);
    expect(out.mime).toBe("image/gif");
    expect(Buffer.from(out.bytes).equals(gif)).toBe(true);
  });

  it("keeps a PNG with alpha unchanged", async () => {
    const png = await solid(50, 50, { ...GREEN, alpha: 0.5 }, 4)
      .png()
      .toBuffer();
    const out = await normalizeImage(F, png, "image/png", LIMITS);
    expect(Buffer.from(out.bytes).equals(png)).toBe(true);
  });
});

describe("normalizeImage shrinks larger images", () => {
  it("stores a 4000×3000 PNG as a 2000×1500 PNG", async () => {
    const png = await solid(4000, 3000).png().toBuffer();
    const out = await normalizeImage(F, png, "image/png", LIMITS);
    expect(out.mime).toBe("image/png");
    expect(await info(out.bytes)).toMatchObject({ format: "png", width: 2000, height: 1500 });
  });

  it("fits a portrait JPEG inside 2000×2000 and re-encodes it as PNG", async () => {
    const jpeg = await solid(1500, 4500).jpeg().toBuffer();
    const out = await normalizeImage(F, jpeg, "image/jpeg", LIMITS);
    expect(out.mime).toBe("image/png");
    expect(await info(out.bytes)).toMatchObject({ width: 667, height: 2000 });
  });

  it("handles a very wide 20000×10 image (2000×1) and a very tall 10×20000 one (1×2000)", async () => {
    const wide = await normalizeImage(F, await solid(20000, 10).png().toBuffer(), "image/png", LIMITS);
    expect(await info(wide.bytes)).toMatchObject({ format: "png", width: 2000, height: 1 });
    const tall = await normalizeImage(F, await solid(10, 20000).png().toBuffer(), "image/png", LIMITS);
    expect(await info(tall.bytes)).toMatchObject({ format: "png", width: 1, height: 2000 });
  });

  it("keeps transparency when the result is a PNG", async () => {
    const png = await solid(3000, 1000, { ...GREEN, alpha: 0.5 }, 4)
      .png()
      .toBuffer();
    const out = await normalizeImage(F, png, "image/png", LIMITS);
    expect(await info(out.bytes)).toMatchObject({ format: "png", width: 2000, height: 667, channels: 4 });
    const { data } = await sharp(out.bytes).raw().toBuffer({ resolveWithObject: true });
    const [r, g, b, alpha] = data.subarray(0, 4);
    // Resizing premultiplies alpha, which may round a channel by one.
    expect([Math.abs(r! - GREEN.r), Math.abs(g! - GREEN.g), Math.abs(b! - GREEN.b)].every((d) => d <= 1)).toBe(true);
    expect(alpha).toBe(128);
  });

  it("applies EXIF orientation when it re-encodes", async () => {
    const rotated = await solid(3000, 1000).jpeg().withMetadata({ orientation: 6 }).toBuffer();
    const out = await normalizeImage(F, rotated, "image/jpeg", LIMITS);
    expect(await info(out.bytes)).toMatchObject({ width: 667, height: 2000 });
  });

  it("converts an animated GIF over 2000 px to a PNG of its first frame", async () => {
    const gif = await animatedGif(2500, 100, 2);
    const out = await normalizeImage(F, gif, "image/gif", LIMITS);
    expect(out.mime).toBe("image/png");
    expect(await info(out.bytes)).toMatchObject({ format: "png", width: 2000, height: 80, pages: 1 });
    const { data } = await sharp(out.bytes).raw().toBuffer({ resolveWithObject: true });
    expect([...data.subarray(0, 3)]).toEqual([GREEN.r, GREEN.g, GREEN.b]);
  });

  it("converts formats providers do not take (AVIF, TIFF, SVG) to PNG", async () => {
    const avif = await solid(200, 100).avif().toBuffer();
    const tiff = await solid(200, 100).tiff().toBuffer();
    const svg = Buffer.from(
      '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100"><rect width="200" height="100" fill="red"/></svg>',
    );
    for (const [bytes, mime] of [
      [avif, "image/avif"],
      [tiff, "image/tiff"],
      [svg, "image/svg+xml"],
    ] as const) {
      const out = await normalizeImage(F, bytes, mime, LIMITS);
      expect(out.mime, mime).toBe("image/png");
      expect(await info(out.bytes), mime).toMatchObject({ format: "png", width: 200, height: 100 });
    }
  });
});

describe("normalizeImage falls back to JPEG when the PNG is over 5 MiB", () => {
  it("stores a noisy 3000×2400 PNG as a 2000×1600 JPEG under 5 MiB", async () => {
    const png = await noise(3000, 2400).png().toBuffer();
    expect(png.byteLength).toBeGreaterThan(IMAGE_MAX_BYTES);
    const out = await normalizeImage(F, png, "image/png", LIMITS);
    expect(out.mime).toBe("image/jpeg");
    expect(out.bytes.byteLength).toBeLessThanOrEqual(5 * MiB);
    expect(await info(out.bytes)).toMatchObject({ format: "jpeg", width: 2000, height: 1600 });
  });

  it("re-encodes a 2000×2000 PNG that is within the size but over 5 MiB", async () => {
    const png = await noise(2000, 2000).png().toBuffer();
    expect(png.byteLength).toBeGreaterThan(IMAGE_MAX_BYTES);
    const out = await normalizeImage(F, png, "image/png", LIMITS);
    expect(out.mime).toBe("image/jpeg");
    expect(out.bytes.byteLength).toBeLessThanOrEqual(IMAGE_MAX_BYTES);
    expect(await info(out.bytes)).toMatchObject({ width: 2000, height: 2000 });
  });

  it("lowers the JPEG quality until the image fits the byte budget", async () => {
    const png = await noise(400, 400).png().toBuffer();
    const q85 = (await sharp(png).jpeg({ quality: 85 }).toBuffer()).byteLength;
    const q40 = (await sharp(png).jpeg({ quality: 40 }).toBuffer()).byteLength;
    const maxBytes = Math.floor((q85 + q40) / 2);
    const out = await normalizeImage(F, png, "image/png", LIMITS, { maxBytes });
    expect(out.mime).toBe("image/jpeg");
    expect(out.bytes.byteLength).toBeLessThanOrEqual(maxBytes);
    expect(out.bytes.byteLength).toBeLessThan(q85);
    expect(await info(out.bytes)).toMatchObject({ width: 400, height: 400 });
  });

  it("flattens transparency on white for JPEG", async () => {
    const raw = Buffer.alloc(300 * 300 * 4);
    randomBytes(300 * 300 * 3).forEach((v, i) => (raw[Math.floor(i / 3) * 4 + (i % 3)] = v));
    const png = await sharp(raw, { raw: { width: 300, height: 300, channels: 4 } })
      .png()
      .toBuffer();
    const out = await normalizeImage(F, png, "image/png", LIMITS, { maxBytes: 200_000 });
    expect(out.mime).toBe("image/jpeg");
    const { data } = await sharp(out.bytes).raw().toBuffer({ resolveWithObject: true });
    expect(Math.min(...data.subarray(0, 300))).toBeGreaterThan(200);
  });

  it("refuses with image_bytes when even the lowest quality is over the budget", async () => {
    const png = await noise(400, 400).png().toBuffer();
    const error = await rejection(normalizeImage(F, png, "image/png", LIMITS, { maxBytes: 1000 }));
    expect(error).toBeInstanceOf(LimitExceededError);
    expect(error).toMatchObject({ field: F, limit: "image_bytes", max: 1000 });
    expect((error as LimitExceededError).actual).toBeGreaterThan(1000);
  });
});

describe("normalizeImage refuses broken images with INVALID_ARGUMENT", () => {
  it("an empty image", async () => {
    await invalid(
      normalizeImage(F, new Uint8Array(0), "image/png", LIMITS),
      /^parts\[1\]\.file\.url: is an empty image \(image\/png, 0 bytes\)$/,
    );
  });

  it("a PNG cut in half", async () => {
    const png = await noise(300, 200).png().toBuffer();
    await invalid(normalizeImage(F, png.subarray(0, png.length >> 1), "image/png", LIMITS), /truncated or corrupt PNG image/);
  });

  it("a JPEG cut in half", async () => {
    const jpeg = await noise(300, 200).jpeg().toBuffer();
    await invalid(normalizeImage(F, jpeg.subarray(0, jpeg.length >> 1), "image/jpeg", LIMITS), /truncated or corrupt JPEG image/);
  });

  it("a large PNG cut in half (the resize path)", async () => {
    const png = await noise(2500, 100).png().toBuffer();
    await invalid(normalizeImage(F, png.subarray(0, png.length >> 1), "image/png", LIMITS), /truncated or corrupt PNG image/);
  });

  it("a WebP missing its tail, and a still GIF cut in half", async () => {
    const webp = await noise(300, 200).webp().toBuffer();
    await invalid(normalizeImage(F, webp.subarray(0, webp.length - 20), "image/webp", LIMITS), /^parts\[1\]\.file\.url: /);
    const gif = await noise(300, 200).gif().toBuffer();
    await invalid(normalizeImage(F, gif.subarray(0, gif.length >> 1), "image/gif", LIMITS), /^parts\[1\]\.file\.url: /);
  });

  it("random bytes declared image/png", async () => {
    await invalid(
      normalizeImage(F, randomBytes(4096), "image/png", LIMITS),
      /cannot be decoded as an image \(image\/png; expected PNG, JPEG, GIF, WebP/,
    );
  });

  it("text declared image/jpeg", async () => {
    await invalid(normalizeImage(F, Buffer.from("hello, not an image\n"), "image/jpeg", LIMITS), /cannot be decoded as an image/);
  });
});

describe("normalizeImage enforces limits.image_pixels from the header", () => {
  it("refuses a 3000×3000 image over a 4 000 000 px limit with LimitExceededError", async () => {
    const png = await solid(3000, 3000).png().toBuffer();
    const error = await rejection(normalizeImage(F, png, "image/png", { image_pixels: 4_000_000 }));
    expect(error).toBeInstanceOf(LimitExceededError);
    expect(error).toMatchObject({ field: F, limit: "image_pixels", max: 4_000_000, actual: 9_000_000 });
    expect((error as Error).message).toBe("parts[1].file.url: 9000000 pixels exceeds limit image_pixels (4000000 pixels)");
  });

  it("refuses an 8000×7000 image over the default 50 000 000 px", async () => {
    const png = await solid(8000, 7000).png().toBuffer();
    const error = await rejection(normalizeImage(F, png, "image/png", LIMITS));
    expect(error).toMatchObject({ limit: "image_pixels", max: 50_000_000, actual: 56_000_000 });
  });

  it("refuses a small file whose header declares 100000×100000 px without decoding it", async () => {
    const bomb = await pngDeclaring(100_000, 100_000);
    expect(bomb.byteLength).toBeLessThan(100);
    const error = await rejection(settlesWithin("the refusal", normalizeImage(F, bomb, "image/png", LIMITS)));
    expect(error).toMatchObject({ limit: "image_pixels", actual: 10_000_000_000 });
  });

  it("counts every frame of an animated GIF", async () => {
    const gif = await animatedGif(100, 100, 3);
    const error = await rejection(normalizeImage(F, gif, "image/gif", { image_pixels: 25_000 }));
    expect(error).toMatchObject({ limit: "image_pixels", max: 25_000, actual: 30_000 });
    await expect(normalizeImage(F, gif, "image/gif", { image_pixels: 30_000 })).resolves.toMatchObject({ mime: "image/gif" });
  });

  it("accepts an image exactly at the limit", async () => {
    const png = await solid(2000, 1000).png().toBuffer();
    await expect(normalizeImage(F, png, "image/png", { image_pixels: 2_000_000 })).resolves.toMatchObject({ mime: "image/png" });
  });
});

describe("sniffImage and isImageMime", () => {
  it("sniffs image content whatever it is called", async () => {
    expect(await sniffImage(await solid(2, 2).png().toBuffer())).toBe("image/png");
    expect(await sniffImage(await solid(2, 2).jpeg().toBuffer())).toBe("image/jpeg");
    expect(await sniffImage(await solid(2, 2).webp().toBuffer())).toBe("image/webp");
    expect(await sniffImage(await solid(2, 2).gif().toBuffer())).toBe("image/gif");
    expect(await sniffImage(Buffer.from("just text"))).toBeUndefined();
    expect(await sniffImage(Buffer.from("%PDF-1.7\n"))).toBeUndefined();
    expect(await sniffImage(new Uint8Array(0))).toBeUndefined();
  });

  it("reads the MIME essence", () => {
    expect(isImageMime("Image/PNG; name=a.png")).toBe(true);
    expect(isImageMime("image/svg+xml")).toBe(true);
    expect(isImageMime("text/plain")).toBe(false);
    expect(isImageMime("application/pdf")).toBe(false);
  });
});

describe("resolveDrafts normalizes data: images", () => {
  const ctx = {
    sessionId: "ses_x",
    messageId: "msg_x",
    directory: "/nonexistent",
    roots: [],
    limits: DEFAULT_LIMITS,
    agent: BUILT_IN_AGENTS[0]!,
    agents: new Map(BUILT_IN_AGENTS.map((a) => [a.name, a])),
  };
  const textDraft = create(PartInputSchema, { kind: { case: "text", value: { text: "look" } } });
  const fileDraft = (url: string, mime: string): PartInput =>
    create(PartInputSchema, { kind: { case: "file", value: { url, mime, filename: "x" } } });

  it("stores a large data: image shrunk, with the real mime, as a base64 data: URL", async () => {
    const png = await solid(4000, 3000).png().toBuffer();
    const { parts } = await resolveDrafts(ctx, [textDraft, fileDraft(toDataUrl("image/png", png), "image/png")]);
    const file = parts[1]!.kind;
    expect(file.case).toBe("file");
    if (file.case !== "file") return;
    expect(file.value.mime).toBe("image/png");
    const stored = parseDataUrl("url", file.value.url);
    expect(file.value.url).toBe(toDataUrl("image/png", stored.bytes));
    expect(await info(stored.bytes)).toMatchObject({ width: 2000, height: 1500 });
  });

  it("treats sniffed image content as an image whatever the declared mime", async () => {
    const png = await solid(3000, 100).png().toBuffer();
    const { parts } = await resolveDrafts(ctx, [
      textDraft,
      fileDraft(toDataUrl("application/octet-stream", png), "application/octet-stream"),
    ]);
    expect(parts).toHaveLength(2);
    const file = parts[1]!.kind;
    if (file.case !== "file") return expect.unreachable("a file part");
    expect(file.value.mime).toBe("image/png");
    expect(await info(parseDataUrl("url", file.value.url).bytes)).toMatchObject({ width: 2000 });
  });

  it("leaves PDFs and other data: files as they are", async () => {
    const url = toDataUrl("application/pdf", Buffer.from("%PDF-1.7\n%%EOF\n"));
    const { parts } = await resolveDrafts(ctx, [textDraft, fileDraft(url, "application/pdf")]);
    expect(parts[1]!.kind).toMatchObject({ case: "file", value: { mime: "application/pdf", url } });
  });

  it("refuses raw base64 without a scheme, naming the url field", async () => {
    const png = await solid(2, 2).png().toBuffer();
    const error = await rejection(resolveDrafts(ctx, [textDraft, fileDraft(png.toString("base64"), "image/png")]));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).field).toBe(F);
    expect((error as Error).message).toMatch(/has no URL scheme .*looks like raw base64: send it as data:<mime>;base64,<data>/);
  });

  it("refuses an unsupported scheme", async () => {
    const error = await rejection(resolveDrafts(ctx, [textDraft, fileDraft("ftp://example.com/a.png", "image/png")]));
    expect(error).toMatchObject({ field: F, message: expect.stringContaining('unsupported scheme "ftp:"') });
  });
});
