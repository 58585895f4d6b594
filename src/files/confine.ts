import { realpath, stat, statfs } from "node:fs/promises";
import { basename, dirname, isAbsolute, join, relative, resolve } from "node:path";
import { InvalidArgumentError, PathNotAllowedError } from "../errors.js";

/** Longest path accepted, in bytes of UTF-8 (Linux `PATH_MAX`). Longer paths are refused as malformed. */
export const MAX_PATH_BYTES = 4096;

/**
 * Pseudo-filesystem mount points that are never read, even under a root that contains them
 * (a configured root of `/`, or a session directory of `/`): their files are not data (`/proc/self/environ`
 * holds the server's secrets, `/dev/zero` never ends, reads in `/sys` can have side effects).
 */
export const SPECIAL_DIRS: readonly string[] = ["/proc", "/sys", "/dev"];

/** Reason given when a path names a FIFO, socket or device. */
const NOT_REGULAR = "is not a regular file or directory";
/** Reason given when a path inside the roots resolves, through a symlink, to a place outside them. */
const THROUGH_SYMLINK = "leads through a symlink outside the session directory and the configured roots";
/** Reason given for a path in {@link SPECIAL_DIRS} or on a kernel pseudo-filesystem. */
const SPECIAL = "is a special filesystem path (/proc, /sys and /dev are never read)";

/**
 * Linux `statfs` magic numbers of kernel pseudo-filesystems (linux/magic.h), for one mounted
 * somewhere other than {@link SPECIAL_DIRS} (e.g. a procfs bind-mounted into a project).
 * proc, sysfs, debugfs, tracefs, securityfs, cgroup, cgroup2, bpf, configfs, pstore, efivarfs,
 * devpts, binfmt_misc, fusectl, mqueue, selinuxfs, smackfs.
 */
const PSEUDO_FS_MAGIC: ReadonlySet<number> = new Set([
  0x9fa0, 0x62656572, 0x64626720, 0x74726163, 0x73636673, 0x27e0eb, 0x63677270, 0xcafe4a11, 0x62656570, 0x6165676c, 0xde5e81e4, 0x1cd1,
  0x42494e4d, 0x65735543, 0x19800202, 0xf97cff8c, 0x43415d53,
]);

/**
 * True when `child` is `root` or lies below it. Both must be absolute and normalized. Compares
 * with `path.relative`, never a string prefix, so `/srv/app-evil` is not inside `/srv/app`.
 */
export function isInside(root: string, child: string): boolean {
  const rel = relative(root, child);
  return rel === "" || (rel !== ".." && !rel.startsWith("../") && !isAbsolute(rel));
}

/** True when the absolute, normalized `path` is one of {@link SPECIAL_DIRS} or lies below one. */
export function isSpecialPath(path: string): boolean {
  return SPECIAL_DIRS.some((dir) => isInside(dir, path));
}

/**
 * Checks the shape of a path before any filesystem call: no NUL, at most {@link MAX_PATH_BYTES}
 * bytes of UTF-8.
 *
 * @throws InvalidArgumentError(field, ...) naming the problem.
 */
export function checkPathShape(field: string, path: string): void {
  if (path.includes("\0")) throw new InvalidArgumentError(field, `${JSON.stringify(path)} contains a NUL character`);
  const bytes = Buffer.byteLength(path, "utf8");
  if (bytes > MAX_PATH_BYTES) {
    throw new InvalidArgumentError(
      field,
      `path is ${bytes} bytes long, over the ${MAX_PATH_BYTES}-byte limit (starts ${JSON.stringify(path.slice(0, 80))})`,
    );
  }
}

function errnoCode(err: unknown): string | undefined {
  if (typeof err === "object" && err !== null && "code" in err && typeof err.code === "string") return err.code;
  return undefined;
}

/** Realpath of every root that exists; roots that do not exist are left out. */
async function realRoots(roots: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const root of roots) {
    try {
      out.push(await realpath(root));
    } catch (err) {
      if (errnoCode(err) !== "ENOENT" && errnoCode(err) !== "ENOTDIR") throw err;
    }
  }
  return out;
}

/** Realpath of the deepest ancestor of `lexical` that exists (at worst `/`). */
async function realAncestor(lexical: string): Promise<string> {
  let dir = dirname(lexical);
  for (;;) {
    try {
      return await realpath(dir);
    } catch (err) {
      const code = errnoCode(err);
      if ((code !== "ENOENT" && code !== "ENOTDIR") || dir === dirname(dir)) throw err;
      dir = dirname(dir);
    }
  }
}

/**
 * The canonical spelling of an absolute path: its realpath when it exists, else the realpath of
 * its deepest existing ancestor joined with the names below it (`/tmp/link/new/a.txt` →
 * `/tmp/real dir/new/a.txt`). Used where two spellings of one file must be told apart from two
 * files: permission patterns and the edit tools' file lock.
 *
 * @param path - an absolute path, already confined (see {@link confinePath}).
 * @returns the canonical absolute path.
 * @throws the fs error when a component cannot be resolved for another reason than ENOENT or
 *   ENOTDIR (EACCES, ELOOP, ...).
 */
export async function canonicalPath(path: string): Promise<string> {
  const below: string[] = [];
  for (let at = resolve(path); ; at = dirname(at)) {
    try {
      return join(await realpath(at), ...below);
    } catch (err) {
      const code = errnoCode(err);
      if ((code !== "ENOENT" && code !== "ENOTDIR") || at === dirname(at)) throw err;
      below.unshift(basename(at));
    }
  }
}

/** The NFC and NFD forms of `path` that differ from it (and from each other), in that order. */
function unicodeVariants(path: string): string[] {
  const out: string[] = [];
  for (const form of ["NFC", "NFD"] as const) {
    const variant = path.normalize(form);
    if (variant !== path && !out.includes(variant)) out.push(variant);
  }
  return out;
}

/** True when `path` lies on a kernel pseudo-filesystem (Linux `statfs`); false elsewhere or when unknown. */
async function onPseudoFs(path: string): Promise<boolean> {
  if (process.platform !== "linux") return false;
  try {
    return PSEUDO_FS_MAGIC.has((await statfs(path)).type >>> 0);
  } catch {
    return false; // the stat below reports what is wrong with the path
  }
}

/**
 * Confines an absolute path to a set of root directories (the session directory and the
 * configured roots), comparing canonical paths on both sides: the realpath of the path and the
 * realpath of every root, taken now (links can change after a session was created). So both
 * spellings of the same file are inside — a session directory `/tmp/linkproj` that is a link to
 * `/tmp/realproj dir` (macOS: `/tmp` → `/private/tmp`) accepts `/tmp/linkproj/src/a.txt` and
 * `/tmp/realproj dir/src/a.txt` — while an escape through a link stays refused. Not in OpenCode
 * (its read tool asks for permission instead); docs/design.md §4 requires it.
 *
 * Steps (every one a path computation or a `realpath`/`stat`/`statfs`: nothing is opened, so a
 * FIFO cannot block and `/dev/zero` is never read):
 * 1. The path must have no NUL and at most {@link MAX_PATH_BYTES} bytes, and be absolute.
 * 2. `path` is resolved lexically (`.`/`..`, duplicate and trailing slashes) and must not be in
 *    {@link SPECIAL_DIRS}.
 * 3. `realpath(path)`. When it fails with ENOENT/ENOTDIR, the NFC then the NFD form of the path
 *    is tried (macOS clients send NFD names, Linux files are usually NFC). When none exists the
 *    lexical path is returned so the caller can fail the read with a readable "not found";
 *    before that, the realpath of the deepest existing ancestor must lie inside the realpath of a
 *    root (and outside {@link SPECIAL_DIRS}), so a missing name under a link that leaves the
 *    roots is refused rather than reported as missing.
 * 4. Otherwise the real path must lie inside the realpath of some root, outside
 *    {@link SPECIAL_DIRS}, and not on a kernel pseudo-filesystem (procfs, sysfs, ... by `statfs`).
 * 5. The target is `stat`ed (never opened): FIFOs, sockets and character/block devices are refused.
 * A path that no root contains, lexically or really, gets the same "outside" refusal whether it
 * exists or not, and whatever `realpath` said about it, so refusals tell nothing about files
 * outside the roots.
 *
 * The check is a snapshot: a symlink swapped between this call and the read is not caught.
 *
 * @param field - request field named in errors, e.g. `parts[0].file.url`.
 * @param path - absolute path to check.
 * @param roots - absolute directories the path must stay within; missing roots are ignored.
 * @returns the real path (symlinks resolved; possibly the NFC/NFD form that exists), or the
 *   lexical path when the target does not exist.
 * @throws InvalidArgumentError when `path` is not absolute, contains a NUL, is longer than
 *   {@link MAX_PATH_BYTES} bytes, or has a name the filesystem finds too long (ENAMETOOLONG).
 * @throws PathNotAllowedError(field, path) when the path is outside every root (compared
 *   canonically), and PathNotAllowedError(field, path, "leads through a symlink outside ...")
 *   when it is inside a root as written but a symlink in it (the file or a parent directory)
 *   resolves outside every root (the target is not named, so nothing outside the roots is
 *   disclosed); PathNotAllowedError(field, path, "is a special filesystem path ...") under /proc,
 *   /sys, /dev or on a pseudo-filesystem; PathNotAllowedError(field, path, "is not a regular
 *   file or directory") for FIFOs, sockets and devices; PathNotAllowedError(field, path, "cannot
 *   be resolved (CODE)") when realpath fails otherwise (EACCES, ELOOP, ...) on a path inside a root.
 */
export async function confinePath(field: string, path: string, roots: string[]): Promise<string> {
  checkPathShape(field, path);
  if (!isAbsolute(path)) throw new InvalidArgumentError(field, `${path} is not an absolute path`);
  const lexical = resolve(path);
  if (isSpecialPath(lexical)) throw new PathNotAllowedError(field, path, SPECIAL);
  const reals = await realRoots(roots);
  const asWritten = [...roots.map((root) => resolve(root)), ...reals].some((root) => isInside(root, lexical));
  const inside = (real: string): boolean => reals.some((root) => isInside(root, real));
  /** Out of the roots: through a link when the path is inside as written, plainly outside otherwise. */
  const escaped = () => (asWritten ? new PathNotAllowedError(field, path, THROUGH_SYMLINK) : new PathNotAllowedError(field, path));
  const unresolvable = (code: string | undefined) =>
    asWritten ? new PathNotAllowedError(field, path, `cannot be resolved (${code ?? "error"})`) : new PathNotAllowedError(field, path);

  /** The realpath of `candidate`, or undefined when it does not exist. */
  const realOf = async (candidate: string): Promise<string | undefined> => {
    try {
      return await realpath(candidate);
    } catch (err) {
      const code = errnoCode(err);
      if (code === "ENOENT" || code === "ENOTDIR") return undefined;
      // Outside every root, the plain refusal: the kernel says ENAMETOOLONG only when the parent
      // exists, which would tell a caller what exists outside (a review, 2026-12-02).
      if (code === "ENAMETOOLONG") {
        if (!asWritten) throw escaped();
        throw new InvalidArgumentError(field, `${path} has a name that is too long (ENAMETOOLONG)`);
      }
      throw unresolvable(code);
    }
  };

  let real = await realOf(lexical);
  for (const variant of real === undefined ? unicodeVariants(lexical) : []) {
    if (isSpecialPath(variant)) continue;
    real = await realOf(variant);
    if (real !== undefined) break;
  }
  if (real === undefined) {
    let ancestor: string;
    try {
      ancestor = await realAncestor(lexical);
    } catch (inner) {
      throw unresolvable(errnoCode(inner));
    }
    if (!inside(ancestor)) throw escaped();
    if (isSpecialPath(ancestor)) throw new PathNotAllowedError(field, path, SPECIAL);
    return lexical;
  }
  if (!inside(real)) throw escaped();
  if (isSpecialPath(real) || (await onPseudoFs(real))) throw new PathNotAllowedError(field, path, SPECIAL);

  let kind;
  try {
    kind = await stat(real);
  } catch (err) {
    const code = errnoCode(err);
    if (code === "ENOENT" || code === "ENOTDIR") return real; // removed meanwhile: the read reports it
    throw new PathNotAllowedError(field, path, `cannot be resolved (${code ?? "error"})`);
  }
  if (!kind.isFile() && !kind.isDirectory()) throw new PathNotAllowedError(field, path, NOT_REGULAR);
  return real;
}
