import { describe, expect, it } from "vitest";
import { isBinary } from "../../src/files/binary.js";

describe("isBinary", () => {
  it("follows OpenCode: extension, NUL byte, >30% control bytes", () => {
    const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
    expect(isBinary("/x/a.PYC", enc("text"))).toBe(true);
    expect(isBinary("/x/a.txt", new Uint8Array())).toBe(false);
    expect(isBinary("/x/a.txt", enc("a\0b"))).toBe(true);
    expect(isBinary("/x/a.txt", new Uint8Array([1, 2, 3, 0x61, 0x62, 0x63, 0x64, 0x65]))).toBe(true); // 3/8
    expect(isBinary("/x/a.txt", new Uint8Array([1, 2, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68]))).toBe(false); // 2/10
    expect(isBinary("/x/a.txt", enc("tab\tcr\r\nff\f"))).toBe(false);
  });
  it("treats a UTF-16 BOM as text despite NUL bytes", () => {
    expect(isBinary("/x/a.txt", new Uint8Array([0xff, 0xfe, 0x61, 0x00]))).toBe(false);
    expect(isBinary("/x/a.txt", new Uint8Array([0xfe, 0xff, 0x00, 0x61]))).toBe(false);
    expect(isBinary("/x/a.txt", new Uint8Array([0x61, 0x00]))).toBe(true);
  });
  it("looks only at the first 4096 bytes", () => {
    const head = new Uint8Array(5000).fill(0x61);
    head[4500] = 0;
    expect(isBinary("/x/a.txt", head)).toBe(false);
  });
});
