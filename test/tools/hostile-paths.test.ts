import { execFileSync } from "node:child_process";
import { symlink } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError, PathNotAllowedError } from "../../src/errors.js";
import { globTool } from "../../src/tools/glob.js";
import { grepTool } from "../../src/tools/grep.js";
import { listTool } from "../../src/tools/list.js";
import { readTool } from "../../src/tools/read.js";
import type { ToolContext } from "../../src/tools/tool-context.js";
import { errorOf as rejection } from "../support/errors.js";
import { toolTree, type ToolTree } from "../support/tool-tree.js";
import { settlesWithin } from "../support/wait.js";

// The model's tools get the same confinement as `file:` drafts (files/confine.ts); these are the
// hostile inputs a model could be talked into sending.

let t: ToolTree;
/** A session whose directory is `/`: only /proc, /sys and /dev stay out of reach. */
const slash: ToolContext = { directory: "/", roots: [] };

beforeAll(async () => {
  t = await toolTree("hostile-tools-");
  await t.write("cafe\u0301.txt", "decomposed name\n"); // NFD on disk
  await t.write("notes/a.txt", "needle\n");
  execFileSync("mkfifo", [join(t.session, "notes", "pipe")]);
  await symlink("/", join(t.session, "root-link"));
  await symlink(t.outside, join(t.session, "out-dir"));
});
afterAll(() => t.cleanup());

/** Runs `call` and checks it rejected with `type` without blocking (a hang bound, `settlesWithin`). */
async function refusedQuickly(
  call: () => Promise<unknown>,
  type: typeof PathNotAllowedError | typeof InvalidArgumentError,
): Promise<Error> {
  const err = await rejection(settlesWithin("the refusal", call()));
  expect(err).toBeInstanceOf(type);
  return err;
}

describe("tools on hostile paths", () => {
  it("read: finds an NFD-named file asked for in NFC", async () => {
    const r = await readTool({ filePath: "caf\u00e9.txt" }, t.ctx);
    expect(r.output).toContain("1: decomposed name");
    expect(r.output).toContain(`<path>${join(t.session, "cafe\u0301.txt")}</path>`);
  });

  it("read: refuses a FIFO without blocking", async () => {
    const err = await refusedQuickly(() => readTool({ filePath: "notes/pipe" }, t.ctx), PathNotAllowedError);
    expect(err.message).toBe(`filePath: ${join(t.session, "notes", "pipe")} is not a regular file or directory`);
  });

  it.each([
    ["a NUL", "notes/a.txt\0"],
    ["a path over 4096 bytes", "x".repeat(5000)],
    ["a deep ../ chain over 4096 bytes", `${"../".repeat(2000)}etc/passwd`],
  ])("read: rejects %s as an invalid argument", async (_name, filePath) => {
    await refusedQuickly(() => readTool({ filePath }, t.ctx), InvalidArgumentError);
  });

  it.each(["/etc/passwd", "../outside/secret.txt", "root-link/etc/passwd", "out-dir/secret.txt", "out-dir/missing.txt", "root-link"])(
    "read/list/grep: refuse %s, which leaves the roots",
    async (path) => {
      await refusedQuickly(() => readTool({ filePath: path }, t.ctx), PathNotAllowedError);
      await refusedQuickly(() => listTool({ path }, t.ctx), PathNotAllowedError);
      await refusedQuickly(() => grepTool({ pattern: "x", path }, t.ctx), PathNotAllowedError);
    },
  );

  it.each(["/proc/self/environ", "/proc", "/sys/kernel", "/dev/zero", "/dev/urandom", "/dev"])(
    "read/list/glob/grep in a session at /: refuse %s as a special filesystem",
    async (path) => {
      const why = `${path} is a special filesystem path (/proc, /sys and /dev are never read)`;
      expect((await refusedQuickly(() => readTool({ filePath: path }, slash), PathNotAllowedError)).message).toBe(`filePath: ${why}`);
      expect((await refusedQuickly(() => listTool({ path }, slash), PathNotAllowedError)).message).toBe(`path: ${why}`);
      expect((await refusedQuickly(() => globTool({ pattern: "*", path }, slash), PathNotAllowedError)).message).toBe(`path: ${why}`);
      expect((await refusedQuickly(() => grepTool({ pattern: "x", path }, slash), PathNotAllowedError)).message).toBe(`path: ${why}`);
    },
  );

  it("glob/grep in a session at /: never walk into /proc, /sys or /dev", async () => {
    // Without the exclusion, tinyglobby lists the regular files of sysfs (sys/kernel/*), and grep would read them.
    for (const pattern of ["proc/self/environ", "proc/1/environ", "proc/*/status", "sys/kernel/*", "sys/**/uevent", "dev/zero", "dev/*"]) {
      expect((await globTool({ pattern }, slash)).output).toBe("No files found");
      expect((await grepTool({ pattern: "x", include: pattern }, slash)).output).toBe("No files found");
    }
  });

  it("grep: skips a FIFO inside the searched directory without blocking", async () => {
    const r = await settlesWithin("grep", grepTool({ pattern: "needle", path: "notes" }, t.ctx));
    expect(r.output).toBe(["Found 1 matches", `${join(t.session, "notes", "a.txt")}:`, "  Line 1: needle"].join("\n"));
  });
});
