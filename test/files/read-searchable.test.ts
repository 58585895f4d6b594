import { execFileSync } from "node:child_process";
import { mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readSearchable } from "../../src/files/read-searchable.js";

let dir: string;

beforeAll(async () => {
  dir = await realpath(await mkdtemp(join(tmpdir(), "read-searchable-")));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

const file = async (name: string, content: string | Uint8Array): Promise<string> => {
  const p = join(dir, name);
  await writeFile(p, content);
  return p;
};

describe("readSearchable", () => {
  it("decodes text like the read tool: UTF-8, a BOM dropped, windows-1252 otherwise", async () => {
    expect(await readSearchable(await file("utf8.txt", "café 日本\n"), 1024)).toEqual({ kind: "text", text: "café 日本\n" });
    const bom = await file("bom.txt", new Uint8Array([0xef, 0xbb, 0xbf, 0x68, 0x69]));
    expect(await readSearchable(bom, 1024)).toEqual({ kind: "text", text: "hi" });
    const cp1252 = await file("cp1252.txt", new Uint8Array([0x63, 0x61, 0x66, 0xe9, 0x20, 0x80, 0x0a]));
    expect(await readSearchable(cp1252, 1024)).toEqual({ kind: "text", text: "café €\n" });
  });

  it("reads an empty file as empty text", async () => {
    expect(await readSearchable(await file("empty.txt", ""), 1024)).toEqual({ kind: "text", text: "" });
  });

  it("calls a file with a NUL byte or a binary extension binary", async () => {
    expect(await readSearchable(await file("nul.txt", new Uint8Array([0x61, 0x00, 0x62])), 1024)).toEqual({ kind: "binary" });
    expect(await readSearchable(await file("a.pyc", "print('hi')\n"), 1024)).toEqual({ kind: "binary" });
  });

  it("reads a file of exactly maxBytes and calls one byte more large", async () => {
    expect(await readSearchable(await file("ten.txt", "0123456789"), 10)).toEqual({ kind: "text", text: "0123456789" });
    expect(await readSearchable(await file("eleven.txt", "0123456789a"), 10)).toEqual({ kind: "large" });
  });

  it("checks for binary content before the size cap", async () => {
    expect(await readSearchable(await file("big-nul.txt", new Uint8Array(64)), 10)).toEqual({ kind: "binary" });
  });

  it("opens a FIFO without blocking and calls it binary", async () => {
    const p = join(dir, "fifo");
    execFileSync("mkfifo", [p]);
    expect(await readSearchable(p, 1024)).toEqual({ kind: "binary" });
  });

  it("throws the fs error for a missing file", async () => {
    const p = join(dir, "missing.txt");
    await expect(readSearchable(p, 1024)).rejects.toMatchObject({
      code: "ENOENT",
      message: `ENOENT: no such file or directory, open '${p}'`,
    });
  });
});
