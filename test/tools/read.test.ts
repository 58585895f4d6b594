import { symlink } from "node:fs/promises";
import { join } from "node:path";
import sharp from "sharp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PathNotAllowedError } from "../../src/errors.js";
import { readPath, ReadFailure } from "../../src/files/read-file.js";
import { readTool } from "../../src/tools/read.js";
import { errorOf as rejection } from "../support/errors.js";
import { aborted, toolTree, type ToolTree } from "../support/tool-tree.js";

const PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
const PDF = "%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n";
let t: ToolTree;

beforeAll(async () => {
  t = await toolTree("read-tool-");
  await t.write("src/a.txt", "one\ntwo\nthree\n");
  await t.write("pic.bin", Buffer.from(PNG_1X1, "base64"));
  await t.write("doc.bin", PDF);
  await t.write("blob.txt", new Uint8Array([1, 0, 2, 0]));
  await symlink(join(t.outside, "secret.txt"), join(t.session, "leak.txt"));
});
afterAll(() => t.cleanup());

describe("readTool", () => {
  it("reads a text file given relative to the session directory", async () => {
    const r = await readTool({ filePath: "src/a.txt", offset: 2, limit: 1 }, t.ctx);
    const path = join(t.session, "src/a.txt");
    expect(r).toEqual({
      title: "src/a.txt",
      output: `<path>${path}</path>\n<type>file</type>\n<content>\n2: two\n\n(Showing lines 2-2 of 3. Use offset=3 to continue.)\n</content>`,
      metadata: { truncated: true, totalLines: 3 },
    });
    expect(r.attachments).toBeUndefined();
  });

  it("lists a directory like readPath", async () => {
    const r = await readTool({ filePath: t.session }, t.ctx);
    const direct = await readPath(t.session);
    expect(r).toEqual({ title: "", output: direct.output, metadata: { truncated: false, entries: 5 } });
    expect((await readTool({ filePath: ".", limit: 2 }, t.ctx)).metadata).toEqual({ truncated: true, entries: 5 });
  });

  it("returns an image and a PDF as data: URL attachments", async () => {
    const img = await readTool({ filePath: "pic.bin" }, t.ctx);
    expect(img).toEqual({
      title: "pic.bin",
      output: "Image read successfully",
      metadata: { truncated: false, mime: "image/png", bytes: Buffer.from(PNG_1X1, "base64").length },
      attachments: [{ mime: "image/png", url: `data:image/png;base64,${PNG_1X1}`, filename: "pic.bin" }],
    });
    const pdf = await readTool({ filePath: join(t.session, "doc.bin") }, t.ctx);
    expect(pdf.output).toBe("PDF read successfully");
    expect(pdf.attachments).toEqual([
      { mime: "application/pdf", url: `data:application/pdf;base64,${Buffer.from(PDF).toString("base64")}`, filename: "doc.bin" },
    ]);
  });

  it("brings an image within 2000 px as a prompt's image is (normalizeImage), and refuses one over limits.image_pixels", async () => {
    await t.write(
      "wide.png",
      await sharp({ create: { width: 3000, height: 100, channels: 3, background: "#00c" } })
        .png()
        .toBuffer(),
    );
    const wide = await readTool({ filePath: "wide.png" }, t.ctx);
    const stored = Buffer.from(wide.attachments![0]!.url.replace(/^data:image\/png;base64,/, ""), "base64");
    expect(await sharp(stored).metadata()).toMatchObject({ format: "png", width: 2000, height: 67 });
    expect(wide.metadata).toEqual({ truncated: false, mime: "image/png", bytes: stored.length });
    const err = await rejection(readTool({ filePath: "wide.png" }, { ...t.ctx, limits: { image_pixels: 1000 } }));
    expect(err.message).toBe("filePath: 300000 pixels exceeds limit image_pixels (1000 pixels)");
  });

  it("turns a ReadFailure into a plain Error with the same message", async () => {
    const missing = await rejection(readTool({ filePath: "nope.txt" }, t.ctx));
    expect(missing).not.toBeInstanceOf(ReadFailure);
    expect(missing.message).toBe(`File not found: ${join(t.session, "nope.txt")}`);
    expect((await rejection(readTool({ filePath: "blob.txt" }, t.ctx))).message).toBe(
      `Cannot read binary file: ${join(t.session, "blob.txt")}`,
    );
    expect((await rejection(readTool({ filePath: "src/a.txt", offset: 0 }, t.ctx))).message).toBe(
      "offset must be greater than or equal to 1",
    );
  });

  it("refuses ../outside, an absolute path outside the roots, and a symlink leading out", async () => {
    for (const filePath of ["../outside/secret.txt", join(t.outside, "secret.txt"), "leak.txt"]) {
      const err = await rejection(readTool({ filePath }, t.ctx));
      expect(err).toBeInstanceOf(PathNotAllowedError);
      expect(err.message).toMatch(
        /^filePath: .* (is outside|leads through a symlink outside) the session directory and the configured roots$/,
      );
    }
  });

  it("stops when the signal is aborted", async () => {
    expect((await rejection(readTool({ filePath: "src/a.txt" }, aborted(t.ctx)))).name).toBe("AbortError");
  });
});
