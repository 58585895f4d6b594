import { constants } from "node:fs";
import { lstat, open, realpath } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { glob, isDynamicPattern } from "tinyglobby";
import type { LedgerConfig } from "../config/config.js";
import { isInstructionUrl } from "../config/instruction-urls.js";
import { BINARY_SAMPLE_BYTES, isBinary } from "../files/binary.js";
import { isInside, isSpecialPath } from "../files/confine.js";
import { decodeText, stripBom } from "../files/text-decode.js";
import { logger } from "../observe/log.js";

/**
 * Most bytes of one instruction file put into the system prompt (40 KiB, about 10,000 tokens at
 * 4 bytes a token). Claude Code warns from 40,000 characters of CLAUDE.md on; an AGENTS.md is
 * usually a few KiB. A longer file is cut here, with a note saying so.
 */
export const INSTRUCTION_FILE_BYTES = 40 * 1024;

/**
 * Most bytes of all instruction files together (64 KiB, about 16,000 tokens: an eighth of a
 * 128k-token context, so the conversation keeps the rest). Files past it are cut or left out, with a note.
 */
export const INSTRUCTIONS_TOTAL_BYTES = 64 * 1024;

/** Project instruction file names, in order of preference: CLAUDE.md counts only where no AGENTS.md is found. */
const PROJECT_FILES = ["AGENTS.md", "CLAUDE.md"] as const;

/** Where the instructions of one step come from. */
export interface InstructionSources {
  /** The session directory (absolute, resolved): the project files are looked up from here. */
  directory: string;
  /** `instructions` of the config (files, globs, URLs) and the directory they are relative to. */
  instructions: LedgerConfig["instructions"];
  /**
   * A tenant's session: its tenant's roots (absolute). The project files are looked up no higher
   * than the nearest of them holding the session directory (the session directory alone when
   * none holds it), so a tenant never gets an AGENTS.md from above its roots. Undefined: up to
   * the git root.
   */
  ceilings?: string[];
  /** Environment giving `HOME` and `XDG_CONFIG_HOME` (the global file and `~/`); default `process.env`. */
  env?: NodeJS.ProcessEnv;
}

/**
 * The instruction sections of a step's system prompt (OpenCode `Instruction.system`), each
 * `Instructions from: <absolute path>\n<contents>`, in this order, each file once:
 *
 * 1. the project's `AGENTS.md` files from the session directory up to its git worktree root
 *    (nearest first), or its `CLAUDE.md` files when there is no `AGENTS.md` ({@link projectInstructionFiles});
 * 2. the global file ({@link globalInstructionFile});
 * 3. the files and globs of `instructions` ({@link configuredInstructionFiles}); URLs are skipped
 *    (not fetched; warned about at start, see src/config/instruction-urls.ts).
 *
 * Files are read at each call (the loop calls it at each step, as OpenCode does): an edit shows in
 * the next step. Empty, binary and unreadable files are left out (unreadable ones logged). A file
 * gets at most {@link INSTRUCTION_FILE_BYTES} bytes, all together (their `Instructions from:` lines
 * included) at most {@link INSTRUCTIONS_TOTAL_BYTES}; a cut file ends with a `[truncated: ...]`
 * note, and once the total is reached the files left are not opened: one `[omitted: N instruction
 * files, ...]` note names them (the first {@link OMITTED_NAMES}). Never throws. No files: `[]`.
 */
export async function instructionSections(sources: InstructionSources): Promise<string[]> {
  const files = await instructionFiles(sources).catch((error: unknown) => {
    logger.warn("instructions: cannot list the instruction files; none sent", { directory: sources.directory, error });
    return [];
  });
  const sections: string[] = [];
  let left = INSTRUCTIONS_TOTAL_BYTES;
  const unique = [...new Set(files)];
  for (let i = 0; i < unique.length; i++) {
    const file = unique[i]!;
    const label = `Instructions from: ${file}\n`;
    const limit = Math.min(INSTRUCTION_FILE_BYTES, left - Buffer.byteLength(label));
    // Full: the files left are named in one note, not opened.
    if (limit <= 0) {
      sections.push(omittedNote(unique.slice(i)));
      break;
    }
    const read = await readInstructionFile(file, limit);
    if (!read || read.size === 0 || (read.bytes === read.size && !read.text.trim())) continue;
    left -= Buffer.byteLength(label) + read.bytes;
    sections.push(`${label}${read.text}${truncationNote(read)}`);
  }
  return sections;
}

/** Most file names an `[omitted: ...]` note lists. */
const OMITTED_NAMES = 10;

/** The note that stands for `files`, left out because the instructions fill their total limit. */
function omittedNote(files: string[]): string {
  const names =
    files.slice(0, OMITTED_NAMES).join(", ") + (files.length > OMITTED_NAMES ? ` and ${files.length - OMITTED_NAMES} more` : "");
  const count = files.length === 1 ? "1 instruction file" : `${files.length} instruction files`;
  return `[omitted: ${count}, as the instructions already fill their ${INSTRUCTIONS_TOTAL_BYTES}-byte limit: ${names}]`;
}

/** The instruction files of {@link instructionSections}, in its order (duplicates kept). */
async function instructionFiles(sources: InstructionSources): Promise<string[]> {
  const env = sources.env ?? process.env;
  const global = await globalInstructionFile(env);
  return [
    ...(await projectInstructionFiles(sources.directory, sources.ceilings)),
    ...(global ? [global] : []),
    ...(await configuredInstructionFiles(sources.instructions, env)),
  ];
}

/**
 * The project's instruction files for a session directory (OpenCode `Instruction.systemPaths`
 * with `findUp`): every `AGENTS.md` in the directory and its ancestors up to the git worktree
 * root (the nearest ancestor holding `.git`, a directory or a worktree's file; without one, the
 * session directory alone), nearest first; when there is none, the `CLAUDE.md` files the same way.
 * A file that is not a regular file, or whose real path (symlinks resolved) leaves the worktree
 * root, is skipped. With `ceilings` (a tenant's roots), the walk stops at the nearest of them
 * holding the directory, if that is below the git root (at the directory itself when none holds
 * it). Real paths (what is read; symlinks resolved); `[]` when none.
 */
export async function projectInstructionFiles(directory: string, ceilings?: string[]): Promise<string[]> {
  let top = (await gitRoot(directory)) ?? directory;
  if (ceilings) {
    const holding = ceilings.filter((root) => isInside(root, directory)).sort((a, b) => b.length - a.length)[0] ?? directory;
    if (isInside(top, holding)) top = holding;
  }
  const dirs = upTo(directory, top);
  const realTop = await realpath(top).catch(() => top);
  for (const name of PROJECT_FILES) {
    const found: string[] = [];
    for (const dir of dirs) {
      // The real path is what gets read: a link changed after this check cannot lead elsewhere.
      const real = await confinedFile(path.join(dir, name), realTop);
      if (real) found.push(real);
    }
    if (found.length > 0) return found;
  }
  return [];
}

/**
 * The global instruction file: the first existing of `$XDG_CONFIG_HOME/ledger/AGENTS.md`, then,
 * for users coming from OpenCode, `$XDG_CONFIG_HOME/opencode/AGENTS.md` and `~/.claude/CLAUDE.md`
 * (OpenCode reads the last two too). `XDG_CONFIG_HOME` defaults to `~/.config`; `~` is `HOME`
 * (else `os.homedir()`). Undefined when none exists.
 */
export async function globalInstructionFile(env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  const home = env.HOME || os.homedir();
  const xdg = env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : path.join(home, ".config");
  const candidates = [
    path.join(xdg, "ledger", "AGENTS.md"),
    path.join(xdg, "opencode", "AGENTS.md"),
    path.join(home, ".claude", "CLAUDE.md"),
  ];
  for (const file of candidates) if (await isRegularFile(file)) return file;
  return undefined;
}

/**
 * The files named by `instructions` (OpenCode resolves them from the project directory up; here,
 * as for every path of the config, against `baseDir`, the config file's directory): `~/` is
 * `HOME`; a path without glob characters is taken when it is a regular file; a glob
 * (`docs/**\/*.md`, tinyglobby syntax) gives its regular files, sorted. URLs are skipped. The
 * entries come from the operator's config, so they may name any file the server can read.
 * Absolute paths, in entry order.
 */
export async function configuredInstructionFiles(
  instructions: LedgerConfig["instructions"],
  env: NodeJS.ProcessEnv = process.env,
): Promise<string[]> {
  const files: string[] = [];
  for (const entry of instructions.entries) {
    if (isInstructionUrl(entry)) continue;
    const expanded = entry.startsWith("~/") ? path.join(env.HOME || os.homedir(), entry.slice(2)) : entry;
    const absolute = path.resolve(instructions.baseDir, expanded);
    if (!isDynamicPattern(expanded)) {
      if (await isRegularFile(absolute)) files.push(absolute);
      continue;
    }
    const segments = absolute.split(path.sep);
    const firstDynamic = segments.findIndex((segment) => isDynamicPattern(segment));
    const cwd = segments.slice(0, firstDynamic).join(path.sep) || path.sep;
    const pattern = segments.slice(firstDynamic).join("/");
    const matches = await glob(pattern, { cwd, absolute: true, onlyFiles: true }).catch(() => []);
    files.push(...matches.map((m) => path.resolve(m)).sort());
  }
  return files;
}

/** One instruction file as read: `text` (its first `bytes` bytes, decoded) of `size` bytes in all. */
interface ReadInstruction {
  text: string;
  bytes: number;
  size: number;
}

function truncationNote(read: ReadInstruction): string {
  if (read.bytes === read.size) return "";
  return (
    `\n\n[truncated: this file is ${read.size} bytes; only its first ${read.bytes} bytes are included ` +
    `(limits: ${INSTRUCTION_FILE_BYTES} bytes a file, ${INSTRUCTIONS_TOTAL_BYTES} bytes for all instructions)]`
  );
}

/**
 * Reads at most `limit` bytes of `file` (cut back to a whole UTF-8 character), opened without
 * blocking so a FIFO cannot hang the step. Undefined for a file that is not regular, is binary,
 * or cannot be read (logged).
 */
async function readInstructionFile(file: string, limit: number): Promise<ReadInstruction | undefined> {
  try {
    const handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
    try {
      const info = await handle.stat();
      if (!info.isFile()) return undefined;
      // One byte past the limit tells whether the cut falls inside a character.
      const buf = new Uint8Array(Math.min(info.size, Math.max(limit + 1, BINARY_SAMPLE_BYTES)));
      let n = 0;
      while (n < buf.length) {
        const { bytesRead } = await handle.read(buf, n, buf.length - n, n);
        if (bytesRead === 0) break;
        n += bytesRead;
      }
      if (isBinary(file, buf.subarray(0, Math.min(n, BINARY_SAMPLE_BYTES)))) return undefined;
      const size = Math.max(info.size, n);
      let bytes = Math.min(n, limit);
      // Cut before a UTF-8 continuation byte so the last character stays whole.
      if (bytes < size) while (bytes > 0 && (buf[bytes]! & 0xc0) === 0x80) bytes--;
      return { text: stripBom(decodeText(buf.subarray(0, bytes))), bytes, size };
    } finally {
      await handle.close();
    }
  } catch (error) {
    logger.warn("instructions: cannot read an instruction file; left out", { file, error });
    return undefined;
  }
}

/** The nearest ancestor of `directory` (itself included) holding `.git`, or undefined. */
async function gitRoot(directory: string): Promise<string | undefined> {
  for (let dir = directory; ; dir = path.dirname(dir)) {
    if (await lstat(path.join(dir, ".git")).catch(() => undefined)) return dir;
    if (path.dirname(dir) === dir) return undefined;
  }
}

/** `directory` and its ancestors up to `top` (included), nearest first. */
function upTo(directory: string, top: string): string[] {
  const dirs = [directory];
  for (let dir = directory; dir !== top && path.dirname(dir) !== dir;) dirs.push((dir = path.dirname(dir)));
  return dirs;
}

async function isRegularFile(file: string): Promise<boolean> {
  const info = await lstat(file).catch(() => undefined);
  if (!info) return false;
  if (info.isFile()) return true;
  // A symlink counts when it leads to a regular file.
  return info.isSymbolicLink() && (await realpath(file).then(isRegularFile, () => false));
}

/** The real path of `file` when it is a regular file inside `realTop` (and not under /proc, /sys, /dev); else undefined. */
async function confinedFile(file: string, realTop: string): Promise<string | undefined> {
  if (!(await isRegularFile(file))) return undefined;
  const real = await realpath(file).catch(() => undefined);
  if (!real || isSpecialPath(real)) return undefined;
  if (isInside(realTop, real)) return real;
  logger.warn("instructions: project instruction file leads outside its worktree through a symlink; left out", { file });
  return undefined;
}
