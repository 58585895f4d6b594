import { mkdir, symlink } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PathNotAllowedError } from "../../src/errors.js";
import { LIST_LIMIT, listTool } from "../../src/tools/list.js";
import { ToolInputError } from "../../src/tools/tool-context.js";
import { errorOf as rejection } from "../support/errors.js";
import { aborted, toolTree, type ToolTree } from "../support/tool-tree.js";

let t: ToolTree;

beforeAll(async () => {
  t = await toolTree("list-");
  for (const rel of ["README.md", ".env", "src/a.ts", "src/b.ts", "src/lib/c.ts", "docs/guide.md"]) await t.write(rel, "x\n");
  for (const rel of ["node_modules/x/index.js", ".git/config", "dist/out.js", "pkg/node_modules/y.js", "zig-out-debug/z"]) {
    await t.write(rel, "ignored\n");
  }
  await mkdir(join(t.session, "emptydir"));
  await symlink(t.outside, join(t.session, "leakdir"));
  await symlink(join(t.outside, "secret.txt"), join(t.session, "leak.txt"));
  await t.write("many/keep.txt", "x\n");
  for (let i = 0; i < 150; i++) await t.write(`big/f${String(i).padStart(3, "0")}.txt`, "x\n");
  await t.write("../extra/e.txt", "x\n");
});
afterAll(() => t.cleanup());

describe("listTool", () => {
  it("renders a tree: dirs first, sorted, ignored dirs and symlinks left out", async () => {
    const r = await listTool({ path: "src" }, t.ctx);
    expect(r).toEqual({
      title: "src",
      output: `${t.session}/src/\n  lib/\n    c.ts\n  a.ts\n  b.ts\n`,
      metadata: { count: 3, truncated: false },
    });
  });

  it("lists the session directory by default, skipping node_modules, .git, dist at any depth", async () => {
    const r = await listTool({ ignore: ["big/", "many"] }, t.ctx);
    expect(r.title).toBe("");
    expect(r.output).toBe(
      [
        `${t.session}/`,
        "  docs/",
        "    guide.md",
        "  src/",
        "    lib/",
        "      c.ts",
        "    a.ts",
        "    b.ts",
        "  .env",
        "  README.md",
        "",
      ].join("\n"),
    );
    expect(r.metadata).toEqual({ count: 6, truncated: false });
  });

  it("applies extra gitignore-style patterns at any depth", async () => {
    const r = await listTool({ path: t.session, ignore: ["*.md", "big/", "many/", "lib/"] }, t.ctx);
    expect(r.output).toBe(`${t.session}/\n  src/\n    a.ts\n    b.ts\n  .env\n`);
  });

  it("stops at 100 files and says so in metadata", async () => {
    const r = await listTool({ path: "big" }, t.ctx);
    const lines = r.output.split("\n");
    expect(lines[0]).toBe(`${t.session}/big/`);
    expect(lines.slice(1, -1)).toEqual(Array.from({ length: LIST_LIMIT }, (_, i) => `  f${String(i).padStart(3, "0")}.txt`));
    expect(r.metadata).toEqual({ count: 100, truncated: true });
  });

  it("lists a configured root outside the session directory", async () => {
    const r = await listTool({ path: "../extra" }, t.ctx);
    expect(r).toMatchObject({ title: "../extra", output: `${t.extra}/\n  e.txt\n` });
  });

  it("refuses ../outside and an absolute path outside the roots", async () => {
    expect(await rejection(listTool({ path: "../outside" }, t.ctx))).toBeInstanceOf(PathNotAllowedError);
    expect(await rejection(listTool({ path: t.outside }, t.ctx))).toBeInstanceOf(PathNotAllowedError);
    expect(await rejection(listTool({ path: "leakdir" }, t.ctx))).toBeInstanceOf(PathNotAllowedError);
  });

  it("refuses a missing directory and a file", async () => {
    const missing = await rejection(listTool({ path: "nope" }, t.ctx));
    expect(missing).toBeInstanceOf(ToolInputError);
    expect(missing.message).toBe(`Directory not found: ${join(t.session, "nope")}`);
    const file = await rejection(listTool({ path: "README.md" }, t.ctx));
    expect(file.message).toBe(`Not a directory: ${join(t.session, "README.md")}`);
  });

  it("stops when the signal is aborted", async () => {
    const err = await rejection(listTool({}, aborted(t.ctx)));
    expect(err.name).toBe("AbortError");
  });
});
