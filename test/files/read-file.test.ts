import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LimitExceededError } from "../../src/errors.js";
import { readPath, ReadFailure, type ReadResult } from "../../src/files/read-file.js";
import { settlesWithin } from "../support/wait.js";

const PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
let dir: string;

beforeAll(async () => {
  dir = await realpath(await mkdtemp(join(tmpdir(), "read-")));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function file(name: string, content: string | Uint8Array): Promise<string> {
  const p = join(dir, name);
  await writeFile(p, content);
  return p;
}
const lines = (n: number, f: (i: number) => string = (i) => `line ${i}`): string =>
  Array.from({ length: n }, (_, i) => f(i + 1)).join("\n") + "\n";
const text = (p: string, numbered: string[], footer: string): string =>
  `<path>${p}</path>\n<type>file</type>\n<content>\n${numbered.join("\n")}\n\n${footer}\n</content>`;

async function textOf(p: string, options?: { offset?: number; limit?: number }): Promise<Extract<ReadResult, { kind: "text" }>> {
  const r = await readPath(p, options);
  if (r.kind !== "text") throw new Error(`expected text, got ${r.kind}`);
  return r;
}
async function failure(p: string, options?: { offset?: number; limit?: number }): Promise<string> {
  const err: unknown = await readPath(p, options).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ReadFailure);
  expect((err as Error).message).not.toMatch(/\n\s+at /);
  return (err as Error).message;
}

describe("readPath: text", () => {
  it("reads a whole small file with the end-of-file footer", async () => {
    const p = await file("ten.txt", lines(10));
    const r = await textOf(p);
    const all = Array.from({ length: 10 }, (_, i) => `${i + 1}: line ${i + 1}`);
    expect(r).toEqual({ kind: "text", output: text(p, all, "(End of file - total 10 lines)"), totalLines: 10, truncated: false });
  });

  it("shows exactly lines 3-5 for offset 3, limit 3", async () => {
    const p = await file("ten.txt", lines(10));
    const r = await textOf(p, { offset: 3, limit: 3 });
    expect(r.output).toBe(
      `<path>${p}</path>\n<type>file</type>\n<content>\n3: line 3\n4: line 4\n5: line 5\n\n` +
        `(Showing lines 3-5 of 10. Use offset=6 to continue.)\n</content>`,
    );
    expect(r.truncated).toBe(true);
    expect(r.totalLines).toBe(10);
  });

  it("says end of file when the limit reaches the last line exactly", async () => {
    const p = await file("ten.txt", lines(10));
    expect((await textOf(p, { offset: 8, limit: 3 })).output).toBe(
      text(p, ["8: line 8", "9: line 9", "10: line 10"], "(End of file - total 10 lines)"),
    );
  });

  it("stops a 3000-line file at 2000 lines", async () => {
    const p = await file("big.txt", lines(3000));
    const r = await textOf(p);
    const shown = Array.from({ length: 2000 }, (_, i) => `${i + 1}: line ${i + 1}`);
    expect(r.output).toBe(text(p, shown, "(Showing lines 1-2000 of 3000. Use offset=2001 to continue.)"));
    expect(r.totalLines).toBe(3000);
  });

  // A probe, 2026-12-02: the footer's line count read a 4 GiB sparse file to its end (70 s).
  it("counts lines for the footer up to 16 MiB past the lines shown, then says 'of more than N'", async () => {
    const p = join(dir, "huge-sparse.txt");
    await writeFile(p, "line\n".repeat(3000));
    execFileSync("truncate", ["-s", String(2 * 1024 ** 3), p]); // 2 GiB: 3000 lines, then NULs
    const r = await settlesWithin("the read", textOf(p));
    const shown = Array.from({ length: 2000 }, (_, i) => `${i + 1}: line`);
    expect(r.output).toBe(text(p, shown, "(Showing lines 1-2000 of more than 3000. Use offset=2001 to continue.)"));
    expect(r).toMatchObject({ truncated: true, totalLines: 3000 });
  });

  it("does not read a huge last line to its end: shown cut, and the footer says the rest is not read", async () => {
    const p = join(dir, "huge-line.txt");
    await writeFile(p, "line\n".repeat(3) + "a".repeat(40 * 1024 * 1024)); // then one 40 MiB line
    const r = await settlesWithin("the read", textOf(p));
    const cut = `4: ${"a".repeat(2000)}... (line truncated to 2000 chars)`;
    expect(r.output).toBe(
      text(
        p,
        ["1: line", "2: line", "3: line", cut],
        "(Showing lines 1-4; line 4 goes on for more than 16 MiB, so the rest of the file is not read.)",
      ),
    );
    expect(r).toMatchObject({ truncated: true, totalLines: 4 });
  });

  // A review, 2026-12-03: the budget starts in the first long line and runs on through the next.
  it("of many 1 MiB lines, says 'of more than N' with the next offset, not that the last shown line goes on for 16 MiB", async () => {
    const p = join(dir, "long-lines.txt");
    await writeFile(p, `${"b".repeat(1024 * 1024)}\n`.repeat(20));
    const r = await settlesWithin("the read", textOf(p));
    expect(r.output.split("\n").at(-2)).toBe("(Showing lines 1-17 of more than 17. Use offset=18 to continue.)");
  });

  it("caps the output at 50 KB", async () => {
    const row = "x".repeat(100);
    const p = await file(
      "wide.txt",
      lines(1000, () => row),
    );
    const r = await textOf(p);
    // 100 bytes for the first line, 101 for each next one: 100 + 505 * 101 = 51105 <= 51200.
    const shown = Array.from({ length: 506 }, (_, i) => `${i + 1}: ${row}`);
    expect(r.output).toBe(text(p, shown, "(Output capped at 50 KB. Showing lines 1-506. Use offset=507 to continue.)"));
    expect(r).toMatchObject({ totalLines: 1000, truncated: true });
  });

  it("cuts a long line at 2000 chars", async () => {
    const p = await file("long.txt", `${"a".repeat(2500)}\nshort\n`);
    expect((await textOf(p)).output).toBe(
      text(p, [`1: ${"a".repeat(2000)}... (line truncated to 2000 chars)`, "2: short"], "(End of file - total 2 lines)"),
    );
  });

  it("keeps a line of exactly 2000 chars whole", async () => {
    const p = await file("exact.txt", `${"b".repeat(2000)}\n`);
    expect((await textOf(p)).output).toBe(text(p, [`1: ${"b".repeat(2000)}`], "(End of file - total 1 lines)"));
  });

  it("handles CRLF, a lone CR and a missing final newline", async () => {
    const p = await file("crlf.txt", "one\r\ntwo\r\nthree\rfour");
    expect((await textOf(p)).output).toBe(text(p, ["1: one", "2: two", "3: three", "4: four"], "(End of file - total 4 lines)"));
  });

  it("keeps empty lines", async () => {
    const p = await file("blank.txt", "\n\nx\n");
    expect((await textOf(p)).output).toBe(text(p, ["1: ", "2: ", "3: x"], "(End of file - total 3 lines)"));
  });

  it("splits CRLF and multi-byte characters across 64 KiB read chunks", async () => {
    const p = await file("chunks.txt", `${"x".repeat(65535)}\r\n${"y".repeat(65533)}\né\n`);
    const r = await textOf(p, { offset: 2 });
    expect(r.output).toBe(text(p, [`2: ${"y".repeat(2000)}... (line truncated to 2000 chars)`, "3: é"], "(End of file - total 3 lines)"));
  });

  it("reads an empty file at offset 1, and refuses offset 2", async () => {
    const p = await file("empty.txt", "");
    expect((await textOf(p)).output).toBe(`<path>${p}</path>\n<type>file</type>\n<content>\n\n\n(End of file - total 0 lines)\n</content>`);
    expect(await failure(p, { offset: 2 })).toBe("Offset 2 is out of range for this file (0 lines)");
  });

  it("refuses an offset past the end", async () => {
    const p = await file("ten.txt", lines(10));
    expect(await failure(p, { offset: 11 })).toBe("Offset 11 is out of range for this file (10 lines)");
  });

  it("refuses an offset or limit below 1", async () => {
    const p = await file("ten.txt", lines(10));
    expect(await failure(p, { offset: 0 })).toBe("offset must be greater than or equal to 1");
    expect(await failure(p, { limit: 0 })).toBe("limit must be greater than or equal to 1");
  });

  it("decodes Latin-1, UTF-16LE with a BOM, and drops a UTF-8 BOM", async () => {
    const latin1 = await file("latin1.txt", new Uint8Array([0x63, 0x61, 0x66, 0xe9, 0x0a]));
    expect((await textOf(latin1)).output).toBe(text(latin1, ["1: café"], "(End of file - total 1 lines)"));
    const utf16 = await file("utf16.txt", new Uint8Array([0xff, 0xfe, ...Buffer.from("café\r\nthé\r\n", "utf16le")]));
    expect((await textOf(utf16)).output).toBe(text(utf16, ["1: café", "2: thé"], "(End of file - total 2 lines)"));
    const bom = await file("bom.txt", new Uint8Array([0xef, 0xbb, 0xbf, ...Buffer.from("café\n")]));
    expect((await textOf(bom)).output).toBe(text(bom, ["1: café"], "(End of file - total 1 lines)"));
  });

  it("decodes the whole file as windows-1252 when a late byte is not UTF-8", async () => {
    const head = Buffer.from(lines(10000, () => "plain ascii line"));
    const p = await file("late.txt", new Uint8Array([...head, 0x93, 0x63, 0x61, 0x66, 0xe9, 0x94, 0x0a]));
    expect((await textOf(p, { offset: 10001 })).output).toBe(text(p, ["10001: “café”"], "(End of file - total 10001 lines)"));
  });
});

describe("readPath: binary and attachments", () => {
  it("returns a PNG as an attachment, found by content not name", async () => {
    const bytes = Buffer.from(PNG_1X1, "base64");
    const p = await file("pixel.txt", bytes);
    const r = await readPath(p);
    expect(r).toEqual({ kind: "attachment", mime: "image/png", data: new Uint8Array(bytes), output: "Image read successfully" });
  });

  it("returns a PDF as an attachment", async () => {
    const p = await file("doc.bin", "%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n");
    const r = await readPath(p);
    expect(r).toMatchObject({ kind: "attachment", mime: "application/pdf", output: "PDF read successfully" });
  });

  it("refuses an attachment over the size limit", async () => {
    const p = await file("pixel.png", Buffer.from(PNG_1X1, "base64"));
    const err: unknown = await readPath(p, { maxAttachmentBytes: 10, field: "parts[2].file.url" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LimitExceededError);
    expect((err as LimitExceededError).message).toBe("parts[2].file.url: 70 bytes exceeds limit attachment_bytes (10 bytes)");
  });

  it("refuses bytes 0x00-0xFF as binary", async () => {
    const p = await file("all.data", new Uint8Array(Array.from({ length: 256 }, (_, i) => i)));
    expect(await failure(p)).toBe(`Cannot read binary file: ${p}`);
  });

  it("refuses a binary extension even with text content", async () => {
    const p = await file("notes.zip", "hello\n");
    expect(await failure(p)).toBe(`Cannot read binary file: ${p}`);
  });
});

describe("readPath: directories and failures", () => {
  it("lists a directory sorted with localeCompare, subdirectories ending with /", async () => {
    const d = join(dir, "tree");
    await mkdir(join(d, "sub"), { recursive: true });
    await writeFile(join(d, "B.txt"), "");
    await writeFile(join(d, "a.md"), "");
    await symlink(join(d, "sub"), join(d, "link"));
    const r = await readPath(d);
    expect(r).toEqual({
      kind: "directory",
      entries: 4,
      output: `<path>${d}</path>\n<type>directory</type>\n<entries>\na.md\nB.txt\nlink/\nsub/\n\n(4 entries)\n</entries>`,
    });
    expect((await readPath(d, { offset: 2, limit: 2 })).output).toBe(
      `<path>${d}</path>\n<type>directory</type>\n<entries>\nB.txt\nlink/\n\n` +
        `(Showing 2 of 4 entries. Use 'offset' parameter to read beyond entry 4)\n</entries>`,
    );
  });

  it("says a missing file is not found", async () => {
    const p = join(dir, "missing.txt");
    expect(await failure(p)).toBe(`File not found: ${p}`);
    expect(await failure(join(dir, "ten.txt", "x"))).toBe(`File not found: ${join(dir, "ten.txt", "x")}`);
  });

  it("refuses a FIFO without opening it", async () => {
    const p = join(dir, "fifo");
    execFileSync("mkfifo", [p]);
    expect(await failure(p)).toBe(`Not a regular file or directory: ${p}`);
  });

  it.skipIf(process.getuid?.() === 0)("reports a permission error by its message", async () => {
    const p = await file("locked.txt", "x");
    execFileSync("chmod", ["000", p]);
    expect(await failure(p)).toBe(`EACCES: permission denied, open '${p}'`);
  });
});
