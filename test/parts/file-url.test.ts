import { mkdir, mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError, PathNotAllowedError } from "../../src/errors.js";
import { parseFileUrl } from "../../src/parts/file-url.js";
import { confinePath } from "../../src/files/confine.js";
import { readPath } from "../../src/files/read-file.js";

const F = "parts[0].file.url";

function invalid(url: string): string {
  try {
    parseFileUrl(F, url);
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as InvalidArgumentError).field).toBe(F);
    return (err as Error).message;
  }
  throw new Error(`expected InvalidArgumentError for ${url}`);
}

describe("parseFileUrl: paths", () => {
  it("decodes %20 in a directory name", () => {
    expect(parseFileUrl(F, "file:///tmp/my%20dir/a.txt")).toEqual({ path: "/tmp/my dir/a.txt", hasTrailingSlash: false });
  });

  it("decodes a percent-encoded CJK name, and accepts it raw", () => {
    expect(parseFileUrl(F, "file:///tmp/%E6%97%A5%E6%9C%AC%E8%AA%9E.txt").path).toBe("/tmp/日本語.txt");
    expect(parseFileUrl(F, "file:///tmp/日本語.txt").path).toBe("/tmp/日本語.txt");
  });

  it("accepts parens raw and as %28/%29", () => {
    expect(parseFileUrl(F, "file:///tmp/a(1).txt").path).toBe("/tmp/a(1).txt");
    expect(parseFileUrl(F, "file:///tmp/a%281%29.txt").path).toBe("/tmp/a(1).txt");
  });

  it("decodes %23 to # in a name, while a literal # starts the fragment", () => {
    expect(parseFileUrl(F, "file:///tmp/issue%2342.md").path).toBe("/tmp/issue#42.md");
    expect(parseFileUrl(F, "file:///tmp/issue#42.md").path).toBe("/tmp/issue");
  });

  it("reports a trailing slash and drops it from the path", () => {
    expect(parseFileUrl(F, "file:///tmp/src/")).toEqual({ path: "/tmp/src", hasTrailingSlash: true });
    expect(parseFileUrl(F, "file:///")).toEqual({ path: "/", hasTrailingSlash: true });
  });

  it("resolves dot segments and duplicate slashes", () => {
    expect(parseFileUrl(F, "file:///tmp/a/../b//c.txt").path).toBe("/tmp/b/c.txt");
    expect(parseFileUrl(F, "file:///tmp/a/%2e%2e/c.txt").path).toBe("/tmp/c.txt");
  });

  it("treats a raw backslash as a slash, an escaped one as part of the name, and %252e%252e as a literal name", () => {
    expect(parseFileUrl(F, "file:///tmp/s/a\\..\\..\\etc\\passwd").path).toBe("/tmp/etc/passwd");
    expect(parseFileUrl(F, "file:///tmp/s/..%5C..%5Cetc%5Cpasswd").path).toBe("/tmp/s/..\\..\\etc\\passwd");
    expect(parseFileUrl(F, "file:///tmp/s/%252e%252e/%252e%252e/etc/passwd").path).toBe("/tmp/s/%2e%2e/%2e%2e/etc/passwd");
    expect(parseFileUrl(F, "file:///tmp/s/.%2E/%2E./x").path).toBe("/x");
  });

  it("ignores what hides in the query and fragment", () => {
    expect(parseFileUrl(F, "file:///tmp/s/a.txt?/../../etc/passwd").path).toBe("/tmp/s/a.txt");
    expect(parseFileUrl(F, "file:///tmp/s/a.txt#/../../etc/passwd").path).toBe("/tmp/s/a.txt");
  });

  it("refuses a relative file: URL instead of reading from the root", () => {
    expect(() => parseFileUrl(F, "file:package.json")).toThrow(InvalidArgumentError);
    expect(() => parseFileUrl(F, "file:package.json")).toThrow("is a relative file: URL");
    expect(parseFileUrl(F, "file:/tmp/a.txt").path).toBe("/tmp/a.txt");
  });

  it("treats localhost as the local machine", () => {
    expect(parseFileUrl(F, "file://localhost/etc/hosts").path).toBe("/etc/hosts");
  });

  it("refuses a remote host", () => {
    const url = "file://otherhost/x";
    expect(() => parseFileUrl(F, url)).toThrow(PathNotAllowedError);
    expect(() => parseFileUrl(F, url)).toThrow(`${F}: ${url} names a remote host`);
  });

  it.each([
    "file:///C:/x",
    "file:///c|/x",
    "file://C:/x",
    "file:///D%3A/x",
    "file:///C:%5CWindows%5Cwin.ini",
    "file:///C:\\Windows\\win.ini",
    "file:///c%7C/x",
  ])("refuses the Windows drive path %s", (url) => {
    expect(() => parseFileUrl(F, url)).toThrow(PathNotAllowedError);
  });

  it.each([
    ["a malformed URL", "file://[::1"],
    ["plain text", "not a url"],
    ["another scheme", "https://example.com/a.txt"],
    ["an encoded slash", "file:///tmp/a%2Fb"],
    ["a non-UTF-8 escape", "file:///tmp/caf%E9"],
    ["a NUL", "file:///tmp/a%00b"],
    ["a path over 4096 bytes", `file:///tmp/${"a".repeat(4100)}`],
    ["an encoded path over 4096 bytes", `file:///tmp/${"%E6%97%A5".repeat(1400)}`],
  ])("rejects %s with InvalidArgumentError", (_name, url) => {
    expect(invalid(url).startsWith(`${F}: `)).toBe(true);
  });
});

describe("parseFileUrl: line ranges", () => {
  const range = (q: string): { offset?: number; limit?: number } => {
    const { offset, limit } = parseFileUrl(F, `file:///tmp/a.txt${q}`);
    return { offset, limit };
  };

  it("has no range without a query", () => {
    expect(range("")).toEqual({ offset: undefined, limit: undefined });
    expect(range("?foo=1")).toEqual({ offset: undefined, limit: undefined });
  });
  it("start=3&end=5 reads lines 3 to 5 inclusive", () => {
    expect(range("?start=3&end=5")).toEqual({ offset: 3, limit: 3 });
  });
  it("start=5&end=5 reads one line", () => {
    expect(range("?start=5&end=5")).toEqual({ offset: 5, limit: 1 });
  });
  it("marks only a one-line range with both bounds as a symbol line", () => {
    const symbolLine = (q: string) => parseFileUrl(F, `file:///tmp/a.ts${q}`).symbolLine;
    expect(symbolLine("?start=5&end=5")).toBe(5);
    expect(symbolLine("?start=1&end=1")).toBe(1);
    expect(symbolLine("?end=1")).toBeUndefined();
    expect(symbolLine("?start=5")).toBeUndefined();
    expect(symbolLine("?start=5&end=6")).toBeUndefined();
    expect(symbolLine("?start=0&end=1")).toBeUndefined();
    expect(symbolLine("")).toBeUndefined();
  });
  it("start=0 means from line 1 with no limit", () => {
    expect(range("?start=0")).toEqual({ offset: 1, limit: undefined });
  });
  it("start=0&end=4 reads lines 1 to 4", () => {
    expect(range("?start=0&end=4")).toEqual({ offset: 1, limit: 4 });
  });
  it("end alone reads from line 1", () => {
    expect(range("?end=99")).toEqual({ offset: 1, limit: 99 });
  });
  it("start alone has no limit", () => {
    expect(range("?start=7")).toEqual({ offset: 7, limit: undefined });
  });

  it("rejects end before start", () => {
    expect(invalid("file:///tmp/a.txt?start=8&end=4")).toBe(`${F}: query parameter end=4 is before start=8 (end is inclusive)`);
  });
  it.each(["?start=abc", "?start=-1", "?start=1.5", "?start=", "?end=2e3", "?start=99999999999999999999"])("rejects the bound %s", (q) => {
    expect(invalid(`file:///tmp/a.txt${q}`)).toMatch(/must be a whole line number \(0 or more\)$/);
  });
  it("rejects end=0 and a repeated bound", () => {
    expect(invalid("file:///tmp/a.txt?end=0")).toBe(`${F}: query parameter end=0 must be 1 or more (lines are 1-based)`);
    expect(invalid("file:///tmp/a.txt?start=1&start=2")).toBe(`${F}: query parameter start is given 2 times`);
  });
});

describe("parseFileUrl + confinePath + readPath", () => {
  let root: string;
  beforeAll(async () => {
    root = await realpath(await mkdtemp(join(tmpdir(), "file-url-")));
    await mkdir(join(root, "my dir"));
    await writeFile(join(root, "my dir", "日本 (1)#.txt"), "one\ntwo\nthree\nfour\nfive\nsix\n");
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("reads the range a file: URL names", async () => {
    const url = `file://${root}/my%20dir/%E6%97%A5%E6%9C%AC%20(1)%23.txt?start=3&end=5#L3`;
    const target = parseFileUrl(F, url);
    const real = await confinePath(F, target.path, [root]);
    const r = await readPath(real, { offset: target.offset, limit: target.limit });
    expect(r.output).toBe(
      `<path>${root}/my dir/日本 (1)#.txt</path>\n<type>file</type>\n<content>\n3: three\n4: four\n5: five\n\n` +
        `(Showing lines 3-5 of 6. Use offset=6 to continue.)\n</content>`,
    );
  });
});
