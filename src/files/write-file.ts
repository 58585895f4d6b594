import { constants } from "node:fs";
import { lstat, mkdir, open, readFile } from "node:fs/promises";
import { dirname } from "node:path";
import { PathNotAllowedError } from "../errors.js";
import { isBinaryContent } from "./binary.js";

/** Largest file the edit tool reads and rewrites (bytes). */
export const EDIT_MAX_BYTES = 10 * 1024 * 1024;

/**
 * Writes `content` (UTF-8) at `path`, which `confinePath` already confined: the real path of an
 * existing file, or the lexical path of a new one. Never follows a symlink at the last
 * component: an existing file is opened with `O_NOFOLLOW` (its path is already the real one), a
 * new file with `O_CREAT | O_EXCL | O_NOFOLLOW`, so a symlink planted at that name (dangling, or
 * swapped in after the check) fails instead of being written through. Missing parent
 * directories are created (the deepest existing ancestor was checked to lie inside the roots).
 *
 * @param field - the tool input field named in errors (`filePath`).
 * @returns whether the file existed before (also when another writer created it meanwhile).
 * @throws PathNotAllowedError(field, path, "is a symbolic link ...") when the name is a symlink,
 *   "is a directory" when it names a directory, "is not a regular file" for a FIFO, socket or
 *   device found at the name.
 * @throws the fs error (EACCES, ENOSPC, ...) otherwise.
 */
export async function writeConfined(field: string, path: string, content: string): Promise<{ existed: boolean }> {
  const existing = await lstat(path).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return undefined;
    throw error;
  });
  if (existing?.isSymbolicLink()) throw new PathNotAllowedError(field, path, "is a symbolic link; refusing to write through it");
  if (existing?.isDirectory()) throw new PathNotAllowedError(field, path, "is a directory");
  if (!existing) await mkdir(dirname(path), { recursive: true });
  // O_NONBLOCK: a FIFO swapped in at the name fails or is refused below instead of blocking the open.
  const overwrite = constants.O_WRONLY | constants.O_TRUNC | constants.O_NOFOLLOW | constants.O_NONBLOCK;
  const create = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW | constants.O_NONBLOCK;
  let existed = existing !== undefined;
  let handle;
  try {
    // EEXIST: another writer created the name since the lstat; overwrite it as an existing file
    // (O_NOFOLLOW still refuses it if that was a symlink).
    handle = await open(path, existed ? overwrite : create, 0o644).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== "EEXIST") throw error;
      existed = true;
      return open(path, overwrite);
    });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ELOOP") throw new PathNotAllowedError(field, path, "is a symbolic link; refusing to write through it");
    if (code === "ENXIO") throw new PathNotAllowedError(field, path, "is not a regular file");
    throw error;
  }
  try {
    if (!(await handle.stat()).isFile()) throw new PathNotAllowedError(field, path, "is not a regular file");
    await handle.writeFile(content, "utf8");
  } finally {
    await handle.close();
  }
  return { existed };
}

/**
 * What the write tool's permission diff shows as the file it replaces (`path` confined): its
 * text; a one-line note for content it cannot show as text (`(a binary or non-UTF-8 file of N
 * bytes)`, `(a file of N bytes, too large to show)`), so replacing it never looks like creating
 * a new file; undefined when there is no file there (or not a regular one: the write refuses it).
 *
 * @throws the fs error other than ENOENT/ENOTDIR (EACCES, ...).
 */
export async function readForDiff(path: string): Promise<string | undefined> {
  const info = await lstat(path).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT" || error.code === "ENOTDIR") return undefined;
    throw error;
  });
  if (!info?.isFile()) return undefined;
  if (info.size > EDIT_MAX_BYTES) return `(a file of ${info.size} bytes, too large to show)\n`;
  const bytes = await readFile(path, { flag: constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK });
  if (isBinaryContent(bytes)) return `(a binary or non-UTF-8 file of ${bytes.length} bytes)\n`;
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    return `(a binary or non-UTF-8 file of ${bytes.length} bytes)\n`;
  }
}

/**
 * Reads a confined existing file as UTF-8 text for the edit tool, without following a symlink
 * at the last component. Returns undefined when it does not exist. A UTF-8 byte order mark is
 * kept (as U+FEFF), so writing the text back keeps it.
 * @throws PathNotAllowedError for a symlink or a directory; Error "File is too large to edit
 *   (N bytes, at most 10485760)" over {@link EDIT_MAX_BYTES}; Error "Cannot edit
 *   binary file: <path>" (by its content: `isBinaryContent`; a text file is edited whatever its
 *   extension) and
 *   "Cannot edit <path>: it is not UTF-8 text ..." for bytes that are not valid UTF-8 (a
 *   windows-1252 file), which a rewrite as UTF-8 would corrupt.
 */
export async function readForEdit(field: string, path: string): Promise<string | undefined> {
  const info = await lstat(path).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return undefined;
    throw error;
  });
  if (!info) return undefined;
  if (info.isSymbolicLink()) throw new PathNotAllowedError(field, path, "is a symbolic link; refusing to edit through it");
  if (info.isDirectory()) throw new PathNotAllowedError(field, path, "is a directory");
  if (info.size > EDIT_MAX_BYTES) throw new Error(`File is too large to edit (${info.size} bytes, at most ${EDIT_MAX_BYTES})`);
  const bytes = await readFile(path, { flag: constants.O_RDONLY | constants.O_NOFOLLOW });
  if (isBinaryContent(bytes)) throw new Error(`Cannot edit binary file: ${path}`);
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new Error(`Cannot edit ${path}: it is not UTF-8 text (the edit tool writes UTF-8, which would change its other bytes)`);
  }
}
