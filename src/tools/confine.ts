import { realpath, stat } from "node:fs/promises";
import { dirname, isAbsolute, relative, resolve } from "node:path";
import { InvalidArgumentError, PathNotAllowedError } from "../errors.js";

/** Reason given when a path names a FIFO, socket or device. */
const NOT_REGULAR = "is not a regular file or directory";

/**
 * True when `child` is `root` or lies below it. Both must be absolute and normalized. Compares
 * with `path.relative`, never a string prefix, so `/srv/app-evil` is not inside `/srv/app`.
 */
export function isInside(root: string, child: string): boolean {
  const rel = relative(root, child);
  return rel === "" || (rel !== ".." && !rel.startsWith("../") && !isAbsolute(rel));
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
 * Confines an absolute path to a set of root directories (the session directory and the
 * configured roots), resolving symlinks. Not in OpenCode (its read tool asks for permission
 * instead); design.md §4 requires it.
 *
 * Steps:
 * 1. `path` is resolved lexically (`.`/`..`, duplicate and trailing slashes). It must lie inside
 *    some root, or the realpath of some root (roots are absolute directories; compared with
 *    `path.relative`, not a string prefix).
 * 2. `realpath(path)`. When it fails with ENOENT/ENOTDIR the lexical path is returned so the
 *    caller can fail the read with a readable "not found"; before that, the realpath of the
 *    deepest existing ancestor must lie inside a real root, so a missing name under a symlink
 *    that leaves the roots is refused rather than reported as missing.
 * 3. Otherwise the real path must lie inside the realpath of some root.
 * 4. The target is `stat`ed (never opened): FIFOs, sockets and character/block devices are refused.
 *
 * The check is a snapshot: a symlink swapped between this call and the read is not caught.
 *
 * @param field - request field named in errors, e.g. `parts[0].file.url`.
 * @param path - absolute path to check.
 * @param roots - absolute directories the path must stay within; missing roots are ignored.
 * @returns the real path (symlinks resolved), or the lexical path when the target does not exist.
 * @throws InvalidArgumentError when `path` is not absolute.
 * @throws PathNotAllowedError(field, path) when the path, or its symlink target, is outside every
 *   root; PathNotAllowedError(field, path, "is not a regular file or directory") for FIFOs,
 *   sockets and devices; PathNotAllowedError(field, path, "cannot be resolved (CODE)") when
 *   realpath fails otherwise (EACCES, ELOOP, ...).
 */
export async function confinePath(field: string, path: string, roots: string[]): Promise<string> {
  if (!isAbsolute(path)) throw new InvalidArgumentError(field, `${path} is not an absolute path`);
  const lexical = resolve(path);
  const reals = await realRoots(roots);
  const lexicalRoots = roots.map((root) => resolve(root));
  if (![...lexicalRoots, ...reals].some((root) => isInside(root, lexical))) {
    throw new PathNotAllowedError(field, path);
  }

  let real: string;
  try {
    real = await realpath(lexical);
  } catch (err) {
    const code = errnoCode(err);
    if (code === "ENOENT" || code === "ENOTDIR") {
      let ancestor: string;
      try {
        ancestor = await realAncestor(lexical);
      } catch (inner) {
        throw new PathNotAllowedError(field, path, `cannot be resolved (${errnoCode(inner) ?? "error"})`);
      }
      if (!reals.some((root) => isInside(root, ancestor))) throw new PathNotAllowedError(field, path);
      return lexical;
    }
    throw new PathNotAllowedError(field, path, `cannot be resolved (${code ?? "error"})`);
  }
  if (!reals.some((root) => isInside(root, real))) throw new PathNotAllowedError(field, path);

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
