import { describe, expect, it } from "vitest";
import { chunkDecoder, decodeText, decodeWindows1252, detectBom, stripBom } from "../../src/files/text-decode.js";

const bytes = (...b: number[]): Uint8Array => new Uint8Array(b);

describe("detectBom", () => {
  it("names UTF-8, UTF-16LE and UTF-16BE marks", () => {
    expect(detectBom(bytes(0xef, 0xbb, 0xbf, 0x61))).toBe("utf-8");
    expect(detectBom(bytes(0xff, 0xfe, 0x61, 0x00))).toBe("utf-16le");
    expect(detectBom(bytes(0xfe, 0xff, 0x00, 0x61))).toBe("utf-16be");
  });
  it("returns undefined without a mark or for a partial one", () => {
    expect(detectBom(bytes())).toBeUndefined();
    expect(detectBom(bytes(0xef, 0xbb))).toBeUndefined();
    expect(detectBom(bytes(0x61, 0x62, 0x63))).toBeUndefined();
  });
});

describe("decodeText", () => {
  it("decodes Latin-1 / windows-1252 bytes that are not UTF-8", () => {
    expect(decodeText(bytes(0x63, 0x61, 0x66, 0xe9, 0x0a))).toBe("café\n");
  });
  it("uses windows-1252, not ISO-8859-1, for 0x80-0x9F", () => {
    expect(decodeText(bytes(0x80, 0x20, 0x93, 0x61, 0x94))).toBe("€ “a”");
  });
  it("decodes valid UTF-8", () => {
    expect(decodeText(new TextEncoder().encode("café 日本\n"))).toBe("café 日本\n");
  });
  it("drops a UTF-8 BOM", () => {
    expect(decodeText(bytes(0xef, 0xbb, 0xbf, 0x68, 0x69))).toBe("hi");
  });
  it("decodes UTF-16LE with a BOM and drops the BOM", () => {
    const body = Buffer.from("café\r\nnaïve\n", "utf16le");
    expect(decodeText(new Uint8Array([0xff, 0xfe, ...body]))).toBe("café\r\nnaïve\n");
  });
  it("decodes UTF-16BE with a BOM and drops the BOM", () => {
    const le = Buffer.from("café", "utf16le");
    const be = Buffer.from(le).swap16();
    expect(decodeText(new Uint8Array([0xfe, 0xff, ...be]))).toBe("café");
  });
  it("decodes the empty input to the empty string", () => {
    expect(decodeText(bytes())).toBe("");
  });
});

describe("stripBom", () => {
  it("removes exactly one leading U+FEFF", () => {
    expect(stripBom("\uFEFF\uFEFFx")).toBe("\uFEFFx");
    expect(stripBom("x\uFEFF")).toBe("x\uFEFF");
  });
});

describe("decodeWindows1252", () => {
  it("maps 0x80-0x9F per the WHATWG index and other bytes to the same code point", () => {
    const c1 = decodeWindows1252(new Uint8Array(Array.from({ length: 32 }, (_, i) => 0x80 + i)));
    expect(c1).toBe("€\u0081‚ƒ„…†‡ˆ‰Š‹Œ\u008DŽ\u008F\u0090‘’“”•–—˜™š›œ\u009DžŸ");
    expect(decodeWindows1252(bytes(0x41, 0x7f, 0xa0, 0xe9, 0xff))).toBe("A\u007F\u00A0éÿ");
  });
});

describe("chunkDecoder", () => {
  it("joins a UTF-8 character split across chunks and drops the BOM", () => {
    const decode = chunkDecoder("utf-8", true);
    expect(decode(bytes(0xef, 0xbb, 0xbf, 0x63, 0x61, 0x66, 0xc3)) + decode(bytes(0xa9)) + decode()).toBe("café");
  });
  it("throws a TypeError on invalid UTF-8 when fatal", () => {
    const decode = chunkDecoder("utf-8", true);
    expect(() => decode(bytes(0x63, 0xe9, 0x0a))).toThrow(TypeError);
  });
  it("decodes windows-1252 chunk by chunk", () => {
    const decode = chunkDecoder("windows-1252");
    expect(decode(bytes(0x93, 0x61)) + decode(bytes(0x94)) + decode()).toBe("“a”");
  });
});
