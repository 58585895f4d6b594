import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError, PathNotAllowedError } from "../../src/errors.js";
import { confinePath, isInside, isSpecialPath, MAX_PATH_BYTES } from "../../src/files/confine.js";
import { settlesWithin } from "../support/wait.js";

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
  await symlink("/proc/self/environ", join(root, "environ"));
  await symlink("/", join(root, "slash"));
  await symlink(join(root, "loop-b"), join(root, "loop-a"));
  await symlink(join(root, "loop-a"), join(root, "loop-b"));
  await writeFile(join(root, "cafe\u0301.txt"), "NFD name\n"); // "café" decomposed
  await writeFile(join(root, "\u00e9t\u00e9.txt"), "NFC name\n"); // "été" composed
  socket = createServer();
  await new Promise<void>((done) => socket.listen(join(root, "sock"), done));
});

afterAll(async () => {
  await new Promise((done) => socket.close(done));
  await rm(base, { recursive: true, force: true });
});

let socket: Server;
const SPECIAL_WHY = "is a special filesystem path (/proc, /sys and /dev are never read)";

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

  it("accepts a path spelled through a link to a root when the root is stored resolved (the session directory is a realpath)", async () => {
    // Session directory created as base/root-link: stored as its realpath, root; clients still name files by the link.
    expect(await confinePath(F, join(base, "root-link", "a.txt"), [root])).toBe(join(root, "a.txt"));
    expect(await confinePath(F, join(base, "root-link", "sub", "b.txt"), [root])).toBe(join(root, "sub", "b.txt"));
    expect(await confinePath(F, join(base, "root-link", "missing.txt"), [root])).toBe(join(base, "root-link", "missing.txt"));
    // Escapes through links stay refused, whatever the spelling.
    expect((await denied(join(base, "root-link", "leak.txt"), [root])).message).toBe(
      `${F}: ${join(base, "root-link", "leak.txt")} is outside the session directory and the configured roots`,
    );
    await denied(join(base, "root-link", "leakdir", "secret.txt"), [root]);
    await denied(join(base, "root-link", "leakdir", "missing.txt"), [root]);
  });

  it("refuses a path outside every root the same way whether it exists or not", async () => {
    const why = (p: string) => `${F}: ${p} is outside the session directory and the configured roots`;
    expect((await denied(join(outside, "secret.txt"), [root])).message).toBe(why(join(outside, "secret.txt")));
    expect((await denied(join(outside, "no-such.txt"), [root])).message).toBe(why(join(outside, "no-such.txt")));
    expect((await denied(join(outside, "no", "such", "dir"), [root])).message).toBe(why(join(outside, "no", "such", "dir")));
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
    // Says the link leads out, without naming its target outside the root.
    expect(err.message).toBe(
      `${F}: ${join(root, "leak.txt")} leads through a symlink outside the session directory and the configured roots`,
    );
    const dir = await denied(join(root, "leakdir", "secret.txt"), [root]);
    expect(dir.message).toBe(
      `${F}: ${join(root, "leakdir", "secret.txt")} leads through a symlink outside the session directory and the configured roots`,
    );
    const missing = await denied(join(root, "leakdir", "nope.txt"), [root]);
    expect(missing.message).toContain("leads through a symlink outside");
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
    const err = await settlesWithin("the refusal", denied(join(root, "pipe"), [root]));
    expect(err.message).toBe(`${F}: ${join(root, "pipe")} is not a regular file or directory`);
  });

  it("refuses a unix socket without connecting to it", async () => {
    const err = await denied(join(root, "sock"), [root]);
    expect(err.message).toBe(`${F}: ${join(root, "sock")} is not a regular file or directory`);
  });

  it.each([
    "/dev/null",
    "/dev/zero",
    "/dev/urandom",
    "/proc/self/environ",
    "/proc/self/fd/0",
    "/proc",
    "/sys/kernel",
    "/sys",
    "/dev",
    "/dev/nope",
  ])("refuses %s as special even under a root of / (and never reads it)", async (path) => {
    const err = await settlesWithin("the refusal", denied(path, ["/"]));
    expect(err.message).toBe(`${F}: ${path} ${SPECIAL_WHY}`);
  });

  it("refuses special paths reached through .., a symlink, or a symlink to /", async () => {
    expect((await denied("/tmp/../proc/self/environ", ["/"])).message).toBe(`${F}: /tmp/../proc/self/environ ${SPECIAL_WHY}`);
    expect((await denied(join(root, "environ"), ["/"])).message).toBe(`${F}: ${join(root, "environ")} ${SPECIAL_WHY}`);
    expect((await denied(join(root, "slash", "proc", "self", "status"), ["/"])).message).toContain(SPECIAL_WHY);
    expect((await denied(join(root, "slash", "dev", "missing-device"), ["/"])).message).toContain(SPECIAL_WHY);
    await denied(join(root, "environ"), [root]);
    await denied(join(root, "slash", "etc", "passwd"), [root]);
  });

  it("isSpecialPath compares segments", () => {
    expect(isSpecialPath("/proc")).toBe(true);
    expect(isSpecialPath("/sys/kernel")).toBe(true);
    expect(isSpecialPath("/devices/x")).toBe(false);
    expect(isSpecialPath("/processes")).toBe(false);
    expect(isSpecialPath("/home/proc")).toBe(false);
  });

  it("refuses a symlink loop as unresolvable", async () => {
    const err = await denied(join(root, "loop-a"), [root]);
    expect(err.message).toBe(`${F}: ${join(root, "loop-a")} cannot be resolved (ELOOP)`);
  });

  it("rejects a NUL, a path over 4096 bytes and a name too long with InvalidArgumentError", async () => {
    await expect(confinePath(F, join(root, "a.txt\0.png"), [root])).rejects.toThrow(
      `${F}: ${JSON.stringify(join(root, "a.txt\0.png"))} contains a NUL character`,
    );
    const long = join(root, "x/".repeat(MAX_PATH_BYTES));
    await expect(confinePath(F, long, [root])).rejects.toThrow(/over the 4096-byte limit/);
    await expect(confinePath(F, long, [root])).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(confinePath(F, join(root, "n".repeat(300)), [root])).rejects.toThrow("has a name that is too long (ENAMETOOLONG)");
  });

  // A review, 2026-12-02: outside the roots, ENAMETOOLONG (which the kernel gives only when the
  // parent exists) answered INVALID_ARGUMENT, telling which directories exist outside.
  it("outside the roots, a name too long gets the plain refusal whether its directory exists or not", async () => {
    const name = "n".repeat(300);
    const existing = await denied(join(outside, name), [root]);
    const missing = await denied(join(outside, "no-such-dir", name), [root]);
    expect([existing.message, missing.message]).toEqual([
      `${F}: ${join(outside, name)} is outside the session directory and the configured roots`,
      `${F}: ${join(outside, "no-such-dir", name)} is outside the session directory and the configured roots`,
    ]);
  });

  it("refuses a very deep ../../.. that leaves the root", async () => {
    await denied(`${root}/${"../".repeat(1000)}etc/passwd`, [root]);
  });

  it("finds a file whose name is stored in the other Unicode normalization form", async () => {
    const nfd = join(root, "cafe\u0301.txt");
    const nfc = join(root, "\u00e9t\u00e9.txt");
    expect(await confinePath(F, join(root, "caf\u00e9.txt"), [root])).toBe(nfd); // NFC asked, NFD on disk
    expect(await confinePath(F, nfd, [root])).toBe(nfd);
    expect(await confinePath(F, join(root, "e\u0301te\u0301.txt"), [root])).toBe(nfc); // NFD asked, NFC on disk
    expect(await confinePath(F, join(root, "caf\u00e9-missing.txt"), [root])).toBe(join(root, "caf\u00e9-missing.txt"));
  });

  it("rejects a relative path", async () => {
    await expect(confinePath(F, "a.txt", [root])).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});
