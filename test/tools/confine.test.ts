import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError, PathNotAllowedError } from "../../src/errors.js";
import { confinePath, isInside } from "../../src/tools/confine.js";

const F = "parts[0].file.url";
let base: string; // realpath of the temp dir
let root: string; // allowed root
let outside: string; // sibling dir, not allowed

beforeAll(async () => {
  base = await realpath(await mkdtemp(join(tmpdir(), "confine-")));
  root = join(base, "root");
  outside = join(base, "root-evil");
  await mkdir(join(root, "sub"), { recursive: true });
  await mkdir(outside);
  await writeFile(join(root, "a.txt"), "a\n");
  await writeFile(join(root, "sub", "b.txt"), "b\n");
  await writeFile(join(outside, "secret.txt"), "secret\n");
  await symlink(join(outside, "secret.txt"), join(root, "leak.txt"));
  await symlink(outside, join(root, "leakdir"));
  await symlink(join(root, "sub", "b.txt"), join(root, "ok-link.txt"));
  await symlink(root, join(base, "root-link"));
  execFileSync("mkfifo", [join(root, "pipe")]);
});

afterAll(async () => {
  await rm(base, { recursive: true, force: true });
});

async function denied(path: string, roots: string[]): Promise<PathNotAllowedError> {
  const err: unknown = await confinePath(F, path, roots).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(PathNotAllowedError);
  return err as PathNotAllowedError;
}

describe("isInside", () => {
  it("compares path segments, not string prefixes", () => {
    expect(isInside("/srv/app", "/srv/app")).toBe(true);
    expect(isInside("/srv/app", "/srv/app/x/y")).toBe(true);
    expect(isInside("/srv/app", "/srv/app/..x")).toBe(true);
    expect(isInside("/srv/app", "/srv/app-evil/x")).toBe(false);
    expect(isInside("/srv/app", "/srv")).toBe(false);
    expect(isInside("/", "/anything")).toBe(true);
  });
});

describe("confinePath", () => {
  it("returns the real path of a file inside a root", async () => {
    expect(await confinePath(F, join(root, "a.txt"), [root])).toBe(join(root, "a.txt"));
    expect(await confinePath(F, root, [root])).toBe(root);
    expect(await confinePath(F, join(root, "sub") + "/", [root])).toBe(join(root, "sub"));
  });

  it("resolves a symlink that stays inside a root", async () => {
    expect(await confinePath(F, join(root, "ok-link.txt"), [root])).toBe(join(root, "sub", "b.txt"));
  });

  it("accepts a path under a root given through a symlinked root", async () => {
    expect(await confinePath(F, join(base, "root-link", "a.txt"), [join(base, "root-link")])).toBe(join(root, "a.txt"));
    expect(await confinePath(F, join(root, "a.txt"), [join(base, "root-link")])).toBe(join(root, "a.txt"));
  });

  it("refuses a path outside every root, and a sibling that shares the prefix", async () => {
    const err = await denied(join(outside, "secret.txt"), [root]);
    expect(err.message).toBe(`${F}: ${join(outside, "secret.txt")} is outside the session directory and the configured roots`);
    expect(err.field).toBe(F);
    await denied("/etc/passwd", [root]);
  });

  it("refuses .. that climbs out of the root", async () => {
    await denied(join(root, "sub", "..", "..", "root-evil", "secret.txt"), [root]);
  });

  it("refuses a symlink pointing outside the root", async () => {
    const err = await denied(join(root, "leak.txt"), [root]);
    expect(err.path).toBe(join(root, "leak.txt"));
    await denied(join(root, "leakdir", "secret.txt"), [root]);
  });

  it("returns the lexical path of a missing file inside a root", async () => {
    expect(await confinePath(F, join(root, "nope", "x.txt"), [root])).toBe(join(root, "nope", "x.txt"));
    expect(await confinePath(F, join(root, "a.txt", "x"), [root])).toBe(join(root, "a.txt", "x"));
  });

  it("refuses a missing name under a symlink that leaves the root", async () => {
    await denied(join(root, "leakdir", "missing.txt"), [root]);
  });

  it("accepts any of several roots", async () => {
    expect(await confinePath(F, join(outside, "secret.txt"), [root, outside])).toBe(join(outside, "secret.txt"));
    expect(await confinePath(F, join(root, "a.txt"), [join(base, "gone"), root])).toBe(join(root, "a.txt"));
  });

  it("refuses a FIFO quickly, without opening it", async () => {
    const started = Date.now();
    const err = await denied(join(root, "pipe"), [root]);
    expect(err.message).toBe(`${F}: ${join(root, "pipe")} is not a regular file or directory`);
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it("refuses a character device", async () => {
    const err = await denied("/dev/null", ["/dev"]);
    expect(err.message).toBe(`${F}: /dev/null is not a regular file or directory`);
  });

  it("rejects a relative path", async () => {
    await expect(confinePath(F, "a.txt", [root])).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});
