import { chmod, symlink } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PathNotAllowedError } from "../../src/errors.js";
import { GREP_LIMIT, GREP_MAX_FILE_BYTES, grepTool } from "../../src/tools/grep.js";
import { ToolInputError } from "../../src/tools/tool-context.js";
import { errorOf as rejection } from "../support/errors.js";
import { aborted, toolTree, type ToolTree } from "../support/tool-tree.js";
import { settlesWithin } from "../support/wait.js";

const T0 = 1_700_000_000; // seconds
let t: ToolTree;
const p = (rel: string): string => join(t.session, rel);

beforeAll(async () => {
  t = await toolTree("grep-");
  await t.write("src/old.ts", "const foo = 1;\nbar\nfoo(2);\n", T0);
  await t.write("src/new.ts", "bar\r\nlet foo2\r\n", T0 + 100);
  await t.write("docs/readme.md", "Foo in docs\nfoo again\n", T0 + 50);
  await t.write("node_modules/pkg/index.ts", "foo\n", T0 + 999);
  await t.write(".git/config", "foo\n", T0 + 999);
  await t.write("bin.dat", "foo\n", T0 + 999);
  await t.write("blob.bin2", new Uint8Array([0x66, 0x6f, 0x6f, 0x00, 0x0a]), T0 + 999);
  await t.write("utf16.txt", Buffer.from("\uFEFFutf16 foo\n", "utf16le"), T0 - 10);
  await t.write("big/huge.txt", "foo\n".repeat(GREP_MAX_FILE_BYTES / 4 + 1), T0);
  await t.write("big/long.txt", `foo${"x".repeat(2500)}\n`, T0);
  await t.write("big/image.raw", new Uint8Array(GREP_MAX_FILE_BYTES + 10), T0);
  await t.write("many/m.txt", "hit\n".repeat(150), T0);
  await symlink(join(t.outside, "secret.txt"), join(t.session, "leak.txt"));
});
afterAll(() => t.cleanup());

describe("grepTool", () => {
  it("groups matches by file, newest file first, skipping ignored dirs and binary files", async () => {
    const r = await grepTool({ pattern: "fo+\\d?", path: "src" }, t.ctx);
    expect(r).toEqual({
      title: "fo+\\d?",
      output: [
        "Found 3 matches",
        `${p("src/new.ts")}:`,
        "  Line 2: let foo2",
        "",
        `${p("src/old.ts")}:`,
        "  Line 1: const foo = 1;",
        "  Line 3: foo(2);",
      ].join("\n"),
      metadata: { matches: 3, truncated: false, skippedLarge: 0, skippedUnreadable: 0 },
    });
  });

  it("filters files with include, at any depth", async () => {
    const r = await grepTool({ pattern: "foo", include: "*.md" }, t.ctx);
    expect(r.output).toBe(["Found 1 matches", `${p("docs/readme.md")}:`, "  Line 2: foo again"].join("\n"));
    const braces = await grepTool({ pattern: "^bar$", include: "*.{ts,tsx}" }, t.ctx);
    expect(braces.output).toBe(
      ["Found 2 matches", `${p("src/new.ts")}:`, "  Line 1: bar", "", `${p("src/old.ts")}:`, "  Line 2: bar"].join("\n"),
    );
  });

  it("skips binary files, node_modules, .git and symlinks; decodes UTF-16", async () => {
    const r = await grepTool({ pattern: "foo", include: "*.{dat,bin2,txt,ts}" }, t.ctx);
    for (const hidden of ["bin.dat", "blob.bin2", "node_modules", ".git", "leak.txt", "secret"]) expect(r.output).not.toContain(hidden);
    expect(r.output).toContain(`${p("utf16.txt")}:\n  Line 1: utf16 foo`);
  });

  it("accepts (?i) and ripgrep-style escapes, and searches a single file", async () => {
    expect((await grepTool({ pattern: "(?i)^FOO in", path: "docs/readme.md" }, t.ctx)).output).toBe(
      ["Found 1 matches", `${p("docs/readme.md")}:`, "  Line 1: Foo in docs"].join("\n"),
    );
    expect((await grepTool({ pattern: "\\p{Lu}oo", path: "docs" }, t.ctx)).metadata.matches).toBe(1);
    expect((await grepTool({ pattern: "const\\ foo\\ \\=", path: "src" }, t.ctx)).metadata.matches).toBe(1);
  });

  it("cuts long lines at 2000 chars and skips files over 1 MiB with a footer", async () => {
    const r = await grepTool({ pattern: "foo", path: "big" }, t.ctx);
    expect(r.output).toBe(
      ["Found 1 matches", `${p("big/long.txt")}:`, `  Line 1: foo${"x".repeat(1997)}...`, "", "(1 file over 1 MiB not searched)"].join(
        "\n",
      ),
    );
    expect(r.metadata).toEqual({ matches: 1, truncated: false, skippedLarge: 1, skippedUnreadable: 0 });
  });

  it("shows 100 matches with the truncation header and footer", async () => {
    const r = await grepTool({ pattern: "hit", path: "many" }, t.ctx);
    const lines = r.output.split("\n");
    expect(lines[0]).toBe("Found 150 matches (showing first 100)");
    expect(lines[1]).toBe(`${p("many/m.txt")}:`);
    expect(lines.slice(2, 2 + GREP_LIMIT)).toEqual(Array.from({ length: GREP_LIMIT }, (_, i) => `  Line ${i + 1}: hit`));
    expect(lines.slice(2 + GREP_LIMIT)).toEqual([
      "",
      "(Results truncated: showing 100 of 150 matches (50 hidden). Consider using a more specific path or pattern.)",
    ]);
    expect(r.metadata).toMatchObject({ matches: 150, truncated: true });
  });

  it("says No files found when nothing matches", async () => {
    expect(await grepTool({ pattern: "zzz", path: "src" }, t.ctx)).toEqual({
      title: "zzz",
      output: "No files found",
      metadata: { matches: 0, truncated: false, skippedLarge: 0, skippedUnreadable: 0 },
    });
  });

  it.skipIf(process.getuid?.() === 0)("notes files it could not read", async () => {
    const locked = await t.write("locked/a.txt", "foo\n");
    await chmod(locked, 0o000);
    try {
      const r = await grepTool({ pattern: "foo", path: "locked" }, t.ctx);
      expect(r.output).toBe("No files found\n\n(Some paths were inaccessible and skipped)");
    } finally {
      await chmod(locked, 0o644);
    }
  });

  it("rejects an invalid regex and an empty pattern with ToolInputError", async () => {
    const err = await rejection(grepTool({ pattern: "foo(" }, t.ctx));
    expect(err).toBeInstanceOf(ToolInputError);
    expect(err.message).toBe('Invalid regex pattern "foo(": missing closing ): `foo(`');
    expect((await rejection(grepTool({ pattern: "" }, t.ctx))).message).toBe("pattern is required");
  });

  it.each([
    ["lookbehind", "(?<=const )foo", "lookbehind (?<= or ?<!) is not supported"],
    ["negative lookbehind", "(?<!x)foo", "lookbehind (?<= or ?<!) is not supported"],
    ["lookahead", "foo(?=\\()", "lookahead (?= or ?!) is not supported"],
    ["a backreference", "(o)\\1", "backreferences (\\1, \\k<name>) are not supported"],
    ["a named backreference", "(?<c>o)\\k<c>", "backreferences (\\1, \\k<name>) are not supported"],
  ])("refuses %s, which RE2 cannot run, naming the construct", async (_name, pattern, why) => {
    const err = await rejection(grepTool({ pattern }, t.ctx));
    expect(err).toBeInstanceOf(ToolInputError);
    expect(err.message).toBe(
      `Invalid regex pattern ${JSON.stringify(pattern)}: ${why}; grep uses RE2 syntax (as ripgrep does), which has no lookaround or backreferences`,
    );
  });

  it("refuses a repetition too large for RE2", async () => {
    const err = await rejection(grepTool({ pattern: "(?:(?:a{1,1000}){1,1000}){1,1000}" }, t.ctx));
    expect(err).toBeInstanceOf(ToolInputError);
    expect(err.message).toMatch(/^Invalid regex pattern .*: (invalid repeat count|expression too large)/);
  });

  it("reads inline flags anywhere, \\uXXXX escapes and \\Q...\\E quoting", async () => {
    expect((await grepTool({ pattern: "(?i:FOO) in", path: "docs" }, t.ctx)).metadata.matches).toBe(1);
    expect((await grepTool({ pattern: "\\u0046oo in", path: "docs" }, t.ctx)).metadata.matches).toBe(1);
    expect((await grepTool({ pattern: "\\u{46}oo in", path: "docs" }, t.ctx)).metadata.matches).toBe(1);
    expect((await grepTool({ pattern: "\\Qfoo(2)\\E", path: "src" }, t.ctx)).metadata.matches).toBe(1);
  });

  it("runs a catastrophic-backtracking pattern in linear time", async () => {
    // `(a+)+$` takes exponential time in a backtracking engine on a's followed by a non-matching
    // character (28 a's and a `!` take about 15 s with a JavaScript RegExp); RE2 stays linear.
    await t.write("redos/evil.txt", `${"a".repeat(50_000)}b\n${"a".repeat(30)}!\n`.repeat(10));
    const cases: Array<[string, number]> = [
      ["(a+)+$", 0],
      ["(a|aa)+$", 0],
      ["(a|a)+$", 0],
      ["(\\w+\\s?)*$x", 0],
      ["^(a+)+b?!", 10],
      ["(a+)+b", 10],
    ];
    for (const [pattern, matches] of cases) {
      // A hang bound: one of these lines takes minutes to a backtracking engine.
      const r = await settlesWithin(pattern, grepTool({ pattern, path: "redos" }, t.ctx));
      expect([pattern, r.metadata.matches]).toEqual([pattern, matches]);
    }
  });

  it("refuses ../outside, an absolute path outside the roots, and a missing path", async () => {
    expect(await rejection(grepTool({ pattern: "foo", path: "../outside" }, t.ctx))).toBeInstanceOf(PathNotAllowedError);
    expect(await rejection(grepTool({ pattern: "foo", path: join(t.outside, "secret.txt") }, t.ctx))).toBeInstanceOf(PathNotAllowedError);
    expect(await rejection(grepTool({ pattern: "foo", path: "leak.txt" }, t.ctx))).toBeInstanceOf(PathNotAllowedError);
    expect((await rejection(grepTool({ pattern: "foo", path: "nope" }, t.ctx))).message).toBe("Search path not found: nope");
  });

  it("stops when the signal is aborted", async () => {
    expect((await rejection(grepTool({ pattern: "foo" }, aborted(t.ctx)))).name).toBe("AbortError");
  });
});
