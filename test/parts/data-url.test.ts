import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/errors.js";
import { dataUrlText, isTextMime, parseDataUrl, toDataUrl } from "../../src/parts/data-url.js";

const F = "parts[0].file.url";
const text = (b: Uint8Array): string => Buffer.from(b).toString("utf8");

describe("parseDataUrl", () => {
  it("parses a base64 text URL with a charset", () => {
    const d = parseDataUrl(F, "data:text/plain;charset=utf-8;base64,aGk=");
    expect(d.mime).toBe("text/plain");
    expect(d.charset).toBe("utf-8");
    expect(text(d.bytes)).toBe("hi");
    expect(dataUrlText(d)).toBe("hi");
  });

  it("lower-cases the MIME essence and drops parameters", () => {
    const d = parseDataUrl(F, "data:Image/PNG;name=x.png;base64,AAEC");
    expect(d.mime).toBe("image/png");
    expect(d.charset).toBeUndefined();
    expect([...d.bytes]).toEqual([0, 1, 2]);
  });

  const long = "The quick brown fox jumps over the lazy dog. ".repeat(10) + "café ☕\n";
  const b64 = Buffer.from(long, "utf8").toString("base64");
  const wrap = (eol: string): string => b64.match(/.{1,76}/g)!.join(eol);

  it.each([
    ["\\r\\n", "\r\n"],
    ["\\n", "\n"],
  ])("accepts base64 wrapped every 76 chars with %s", (_name, eol) => {
    expect(wrap(eol)).toContain(eol);
    const d = parseDataUrl(F, `data:text/plain;base64,${wrap(eol)}`);
    expect(dataUrlText(d)).toBe(long);
  });

  it("percent-decodes a non-base64 body; no MIME means text/plain;charset=US-ASCII", () => {
    const d = parseDataUrl(F, "data:,hello%20world");
    expect(d.mime).toBe("text/plain");
    expect(d.charset).toBe("US-ASCII");
    expect(dataUrlText(d)).toBe("hello world");
  });

  it.each([
    ["no comma", "data:text/plain;base64"],
    ["bad base64", "data:text/plain;base64,a"],
    ["other scheme", "https://example.com/a.txt"],
    ["not a URL", "hello"],
  ])("rejects %s with InvalidArgumentError", (_name, url) => {
    expect(() => parseDataUrl(F, url)).toThrow(InvalidArgumentError);
    try {
      parseDataUrl(F, url);
    } catch (err) {
      expect((err as InvalidArgumentError).field).toBe(F);
      expect((err as Error).message.startsWith(`${F}: `)).toBe(true);
    }
  });
});

describe("dataUrlText", () => {
  it("decodes with the charset parameter", () => {
    const d = parseDataUrl(F, `data:text/plain;charset=ISO-8859-1;base64,${Buffer.from([0x63, 0x61, 0x66, 0xe9]).toString("base64")}`);
    expect(dataUrlText(d)).toBe("café");
    const smart = parseDataUrl(
      F,
      `data:text/plain;charset=latin1;base64,${Buffer.from([0x93, 0x68, 0x69, 0x94, 0x80]).toString("base64")}`,
    );
    expect(dataUrlText(smart)).toBe("“hi”€");
  });
  it("falls back to UTF-8 for an unknown charset", () => {
    const d = parseDataUrl(F, `data:text/plain;charset=x-klingon;base64,${Buffer.from("café").toString("base64")}`);
    expect(dataUrlText(d)).toBe("café");
  });
  it("without a charset: UTF-8 when valid, else windows-1252", () => {
    expect(dataUrlText(parseDataUrl(F, `data:text/plain;base64,${Buffer.from("日本").toString("base64")}`))).toBe("日本");
    expect(dataUrlText(parseDataUrl(F, "data:text/plain;base64,Y2Fm6Q=="))).toBe("café");
  });
  it("never returns a BOM, and a BOM overrides the charset", () => {
    expect(dataUrlText({ mime: "text/plain", charset: "utf-8", bytes: new Uint8Array([0xef, 0xbb, 0xbf, 0x68, 0x69]) })).toBe("hi");
    const utf16 = new Uint8Array([0xff, 0xfe, ...Buffer.from("hi", "utf16le")]);
    expect(dataUrlText({ mime: "text/plain", charset: "utf-8", bytes: utf16 })).toBe("hi");
  });
});

describe("toDataUrl", () => {
  it("builds a base64 data URL", () => {
    expect(toDataUrl("image/png", new Uint8Array([0, 1, 2]))).toBe("data:image/png;base64,AAEC");
  });
  it("encodes only the view of a larger buffer", () => {
    const big = new Uint8Array([9, 9, 0x68, 0x69, 9]);
    expect(toDataUrl("text/plain", big.subarray(2, 4))).toBe("data:text/plain;base64,aGk=");
  });
  it("round-trips through parseDataUrl", () => {
    const bytes = new Uint8Array(Array.from({ length: 256 }, (_, i) => i));
    const d = parseDataUrl(F, toDataUrl("application/octet-stream", bytes));
    expect(d.mime).toBe("application/octet-stream");
    expect([...d.bytes]).toEqual([...bytes]);
  });
});

describe("isTextMime", () => {
  it("is true for text/* and application/ JSON, XML, YAML, scripts and their suffix forms; false for media and octet streams", () => {
    const text = [
      "text/plain",
      "text/markdown",
      "TEXT/CSV; charset=utf-8",
      "application/json",
      "application/ld+json",
      "application/xml",
      "application/atom+xml",
      "application/x-yaml",
      "application/yaml",
      "application/toml",
      "application/javascript",
      "application/sql",
      "application/graphql",
      "application/x-sh",
    ];
    const other = [
      "image/png",
      "application/pdf",
      "application/octet-stream",
      "application/zip",
      "application/jsonp-not",
      "audio/json",
      "",
    ];
    expect(text.filter((m) => !isTextMime(m))).toEqual([]);
    expect(other.filter(isTextMime)).toEqual([]);
  });
});
