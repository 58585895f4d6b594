import parseDataURL from "data-urls";
import fc from "fast-check";
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

describe("parseDataUrl gives the data-urls library's result without its URL parser on the body", () => {
  /** The library's answer as parseDataUrl would report it, or "refused". */
  const library = (url: string) => {
    const parsed = parseDataURL(url);
    if (parsed === null) return "refused";
    const charset = parsed.mimeType.parameters.get("charset");
    return { mime: parsed.mimeType.essence.toLowerCase(), ...(charset === undefined ? {} : { charset }), bytes: Buffer.from(parsed.body) };
  };
  const ours = (url: string) => {
    try {
      const d = parseDataUrl(F, url);
      return { ...d, bytes: Buffer.from(d.bytes) };
    } catch (error) {
      if (error instanceof InvalidArgumentError && error.field === F) return "refused";
      throw error;
    }
  };

  // Pieces that each step of the URL parser and the data: URL processor treats specially.
  const piece = fc.constantFrom(
    ...[
      "data:",
      "DATA:",
      "data:/",
      "data://",
      ",",
      ",,",
      ";",
      ";base64",
      "; BASE64",
      ";base64 ",
      "text/plain",
      "image/png",
      ";charset=utf-8",
    ],
    ...["?", "#", "%", "%2", "%41", "%zz", "%C3%A9", "%2C", " ", "\t", "\n", "\r", "\f", "\u0000", "\u001f", "\u007f", "\u00a0"],
    ...[
      "é",
      "☕",
      "\ud800",
      "\udc00",
      "😀",
      "=",
      "==",
      "===",
      "QQ",
      "QQ=",
      "QUI=",
      "QUJD",
      "aGk=",
      "a",
      "/",
      "+",
      "-",
      "_",
      "\\",
      '"',
      "<",
    ],
  );
  const start = fc.constantFrom("data:", "DATA:", " \t\u0001data:", "\u00a0data:", "data:/", "");
  const input = fc.tuple(start, fc.array(piece, { maxLength: 12 })).map(([head, pieces]) => head + pieces.join(""));

  it("on inputs made of the pieces the standard treats specially (20,000 cases)", () => {
    fc.assert(
      fc.property(input, (url) => {
        expect(ours(url)).toEqual(/^\s*data:/i.test(url) ? library(url) : "refused");
      }),
      { numRuns: 20_000 },
    );
  });

  it.each([
    ["base64 with whitespace, padding and a fragment", " data:image/png;base64,QU\tJD\nRA = = #frag "],
    ["a percent-encoded base64 body", "data:;base64,QUJD%52%41%3D%3D"],
    ["a query before the comma", "data:text/plain?x=1,hi"],
    ["a space before ? and #", "data:text/plain ?a ,b #c"],
    ["lone surrogates and non-ASCII", "data:text/plain;charset=utf-8,\ud800é%C3%A9"],
    ["a path (data:/)", "data:/x,hi"],
    ["an authority (data://)", "data://host/x,hi"],
    ["base64 of length 4n+1", "data:;base64,QUJDR"],
  ])("on %s", (_name, url) => {
    expect(ours(url)).toEqual(library(url));
  });

  it("decodes a 4 MiB base64 image URL to its bytes", () => {
    const bytes = Buffer.alloc(4 * 1024 * 1024);
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 2654435761) >>> 24;
    const d = parseDataUrl(F, toDataUrl("image/png", bytes));
    expect(d.mime).toBe("image/png");
    expect(Buffer.from(d.bytes).equals(bytes)).toBe(true);
  });

  it("refuses a URL over 64 KiB in another shape (data:/, data://, a MIME part over 64 KiB), naming the field", () => {
    for (const url of [
      `data:/x;base64,${"A".repeat(70_000)}`,
      `data://h/;base64,${"A".repeat(70_000)}`,
      `data:${"x".repeat(70_000)};base64,QQ==`,
    ]) {
      expect(() => parseDataUrl(F, url)).toThrow(
        new InvalidArgumentError(
          F,
          `is a data: URL of ${url.length} characters that is not in the form data:<mime>[;base64],<data> with a MIME part under 64 KiB (a URL in another shape may have at most 65536 characters)`,
        ),
      );
    }
    // The same shapes under 64 KiB go to the library whole, as before.
    expect(ours("data:/x,hi")).toEqual(library("data:/x,hi"));
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
