import { symlink } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PathNotAllowedError } from "../../src/errors.js";
import { GLOB_LIMIT, globTool } from "../../src/tools/glob.js";
import { ToolInputError } from "../../src/tools/tool-context.js";
import { errorOf as rejection } from "../support/errors.js";
import { aborted, toolTree, type ToolTree } from "../support/tool-tree.js";

const T0 = 1_700_000_000; // seconds
let t: ToolTree;

beforeAll(async () => {
  t = await toolTree("glob-");
  await t.write("src/old.ts", "x\n", T0);
  await t.write("src/new.ts", "x\n", T0 + 300);
  await t.write("src/lib/mid.ts", "x\n", T0 + 200);
  await t.write("root.ts", "x\n", T0 + 100);
  await t.write("notes.md", "x\n", T0 + 400);
  await t.write(".env", "x\n", T0);
  await t.write("node_modules/pkg/index.ts", "x\n", T0 + 999);
  await t.write("src/node_modules/deep.ts", "x\n", T0 + 999);
  await t.write(".git/hooks.ts", "x\n", T0 + 999);
  await symlink(t.outside, join(t.session, "leakdir"));
  for (let i = 0; i < 150; i++) await t.write(`many/f${String(i).padStart(3, "0")}.txt`, "x\n", T0 + i);
});
afterAll(() => t.cleanup());

describe("globTool", () => {
  it("matches a name pattern at any depth, newest first, skipping node_modules and .git", async () => {
    const r = await globTool({ pattern: "*.ts" }, t.ctx);
    const p = (rel: string): string => join(t.session, rel);
    expect(r).toEqual({
      title: "",
      output: [p("src/new.ts"), p("src/lib/mid.ts"), p("root.ts"), p("src/old.ts")].join("\n"),
      metadata: { count: 4, truncated: false },
    });
  });

  it("anchors a pattern with a slash to the search path, and reports the title relative to the session", async () => {
    const r = await globTool({ pattern: "*.ts", path: "src" }, t.ctx);
    expect(r.title).toBe("src");
    expect(r.output.split("\n")).toEqual([join(t.session, "src/new.ts"), join(t.session, "src/lib/mid.ts"), join(t.session, "src/old.ts")]);
    const anchored = await globTool({ pattern: "src/*.ts" }, t.ctx);
    expect(anchored.output).toBe([join(t.session, "src/new.ts"), join(t.session, "src/old.ts")].join("\n"));
  });

  it("includes hidden files and does not follow symlinks", async () => {
    expect((await globTool({ pattern: ".env" }, t.ctx)).output).toBe(join(t.session, ".env"));
    expect((await globTool({ pattern: "**/secret.txt" }, t.ctx)).output).toBe("No files found");
  });

  it("says No files found when nothing matches", async () => {
    expect(await globTool({ pattern: "*.rs" }, t.ctx)).toEqual({
      title: "",
      output: "No files found",
      metadata: { count: 0, truncated: false },
    });
  });

  it("keeps the newest 100 and adds the truncation footer", async () => {
    const r = await globTool({ pattern: "many/*.txt" }, t.ctx);
    const lines = r.output.split("\n");
    expect(lines).toHaveLength(GLOB_LIMIT + 2);
    expect(lines[0]).toBe(join(t.session, "many/f149.txt"));
    expect(lines[GLOB_LIMIT - 1]).toBe(join(t.session, "many/f050.txt"));
    expect(lines.slice(GLOB_LIMIT)).toEqual([
      "",
      "(Results are truncated: showing first 100 results. Consider using a more specific path or pattern.)",
    ]);
    expect(r.metadata).toEqual({ count: 100, truncated: true });
  });

  it("refuses ../outside and an absolute path outside the roots", async () => {
    expect(await rejection(globTool({ pattern: "*", path: "../outside" }, t.ctx))).toBeInstanceOf(PathNotAllowedError);
    expect(await rejection(globTool({ pattern: "*", path: t.outside }, t.ctx))).toBeInstanceOf(PathNotAllowedError);
  });

  it("refuses patterns that climb out or are absolute", async () => {
    const up = await rejection(globTool({ pattern: "../outside/*" }, t.ctx));
    expect(up).toBeInstanceOf(ToolInputError);
    expect(up.message).toBe(
      'pattern must be relative to the search directory and must not contain "..": ../outside/* (put the directory in "path")',
    );
    expect(await rejection(globTool({ pattern: `${t.outside}/*` }, t.ctx))).toBeInstanceOf(ToolInputError);
    expect(await rejection(globTool({ pattern: "" }, t.ctx))).toBeInstanceOf(ToolInputError);
  });

  it("refuses a missing directory", async () => {
    expect((await rejection(globTool({ pattern: "*", path: "nope" }, t.ctx))).message).toBe(
      `Directory not found: ${join(t.session, "nope")}`,
    );
  });

  it("stops when the signal is aborted", async () => {
    expect((await rejection(globTool({ pattern: "*.ts" }, aborted(t.ctx)))).name).toBe("AbortError");
  });
});
