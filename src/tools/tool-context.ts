import { realpath } from "node:fs/promises";
import { isAbsolute, relative, resolve } from "node:path";
import type { Schema } from "ai";
import type { z } from "zod";
import type { Limits } from "../config/limits.js";
import { canonicalPath, checkPathShape, confinePath } from "../files/confine.js";

/** What every model tool gets besides its input: where the session works and what it may touch. */
export interface ToolContext {
  /** The session directory: absolute and resolved (realpath). Relative tool paths start here. */
  directory: string;
  /** Further absolute directories the tools may read (config `roots`); missing ones are ignored. */
  roots: string[];
  /** Aborts the call: tools check it between files and throw its reason (an `AbortError`). */
  signal?: AbortSignal;
  /** `limits.image_pixels` (most pixels decoded from one image) for the images `read` returns; default the configured default. */
  limits?: Pick<Limits, "image_pixels">;
  /**
   * Checks the permission rules for this call before a tool changes anything (OpenCode
   * `ctx.ask`): resolves when allowed (at once, or after the user answered an `ask`); throws the
   * denial or the user's rejection, which becomes the tool error the model sees. Set by the
   * registry for every call; absent (everything allowed) only in direct unit calls.
   */
  ask?(request: ToolAsk): Promise<void>;
  /** Reports progress of a running call (bash output so far); stored on the running tool part, throttled. */
  progress?(update: { title?: string; metadata: Record<string, unknown> }): void;
}

/** What a tool asks permission for: its permission name, the patterns the rules match, facts for the user. */
export interface ToolAsk {
  /** The tool's name as rules name it (`write`, `edit`, `bash`, `task`). */
  permission: string;
  /** File paths relative to the session directory, the bash command, or the subagent's name. */
  patterns: string[];
  /** Shown to the person deciding (`filePath`, `diff`, `command`, `description`). */
  metadata: Record<string, unknown>;
}

/** What a tool returns to the agent loop. Follows OpenCode tool.ts `ExecuteResult`. */
export interface ToolOutput {
  /** Short label for UIs: the path relative to the session directory (grep: the pattern). */
  title: string;
  /** The text the model sees. */
  output: string;
  /** Facts for UIs and logs (counts, truncation), never shown to the model. */
  metadata: Record<string, unknown>;
}

/**
 * One model tool as the registry offers it (see `createTools` in registry.ts). Follows OpenCode
 * tool.ts `Tool.Def`: `id`, `description`, `parameters`, `execute`.
 *
 * @example
 * ```ts
 * export const readDefinition: ToolDefinition<ReadInput> = {
 *   id: "read",
 *   description: "Read a file (numbered lines, 2000 lines from `offset`) or list a directory. ...",
 *   inputSchema: z.object({ filePath: z.string(), offset: z.number().int().min(1).optional(), ... }),
 *   execute: readTool,
 * };
 * ```
 */
export interface ToolDefinition<Input> {
  /** The name the model calls the tool by, and that permission rules name (`read`, `grep`, ...). */
  id: string;
  /**
   * True when the tool calls `ctx.ask` itself with its own patterns (write, edit, bash: the path
   * or command; task: the subagent's name); the registry checks the others with the pattern `*`
   * before they run.
   */
  asks?: boolean;
  /** True when the tool may change files (write, edit, bash): the step's snapshot is taken before it runs. */
  changesFiles?: boolean;
  /** What the model is told the tool does. */
  description: string;
  /**
   * The input the model must send: zod, or a JSON Schema (`jsonSchema()` of the AI SDK, for MCP
   * tools); the AI SDK sends it to the model as JSON Schema and validates each call against it.
   */
  inputSchema: z.ZodType<Input> | Schema<Input>;
  /**
   * Runs one call with the validated input. Errors it throws become a tool error the model sees.
   *
   * @param input - the call's input, as `inputSchema` parsed it.
   * @param ctx - the session directory, roots and the call's abort signal.
   */
  execute(input: Input, ctx: ToolContext): Promise<ToolOutput>;
}

/** The model gave a tool an input it cannot use (bad regex, bad glob, missing directory). */
export class ToolInputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ToolInputError";
  }
}

/** A tool path after resolution and confinement; see {@link resolveToolPath}. */
export interface ToolPath {
  /** Real path to work on (symlinks resolved), or the lexical path when it does not exist. */
  path: string;
  /** The requested path relative to the session directory (`""` for the directory itself). */
  title: string;
  /** The path with every symlink in it resolved (see `canonicalPath`): the edit tools' lock key. */
  canonical: string;
  /**
   * The patterns a permission ask of this path carries: `title`, and also the canonical path
   * relative to the session directory's realpath when that differs (`pub/key.txt` through the
   * link `pub -> secret` is also `secret/key.txt`), so a rule on either spelling applies (the
   * strictest wins, `decide`).
   */
  patterns: string[];
}

/**
 * Resolves a tool's path argument and confines it to the session directory and roots.
 *
 * @param ctx - the tool context; `input` is resolved against `ctx.directory`.
 * @param field - input field named in errors, e.g. `path` or `filePath`.
 * @param input - absolute or relative path; undefined or empty means the session directory.
 * @returns the real path, the title (lexical path relative to `ctx.directory`), the canonical
 *   path and the permission patterns (see {@link ToolPath}).
 * @throws InvalidArgumentError when `input` contains a NUL or is over 4096 bytes (before or after
 *   joining it to `ctx.directory`).
 * @throws PathNotAllowedError when the path or its symlink target leaves
 *   `[ctx.directory, ...ctx.roots]`, lies in /proc, /sys or /dev, or names a FIFO, socket or
 *   device (see `confinePath`).
 */
export async function resolveToolPath(ctx: ToolContext, field: string, input: string | undefined): Promise<ToolPath> {
  if (input !== undefined) checkPathShape(field, input);
  const lexical = resolve(ctx.directory, input ?? ".");
  const path = await confinePath(field, lexical, [ctx.directory, ...ctx.roots]);
  const title = relative(ctx.directory, lexical);
  const canonical = await canonicalPath(path);
  const directory = await realpath(ctx.directory).catch(() => ctx.directory);
  const real = relative(directory, canonical);
  return { path, title, canonical, patterns: real === title ? [title] : [title, real] };
}

/**
 * Turns a model-written file pattern (glob `pattern`, grep `include`) into tinyglobby patterns
 * with ripgrep `--glob` meaning: a pattern without `/` matches file names at any depth
 * (`"*.ts"` → `"**\/*.ts"`), one with `/` is relative to the search directory.
 *
 * @param field - input field named in errors.
 * @param pattern - the glob, e.g. `"*.{ts,tsx}"` or `"src/**\/*.ts"`.
 * @returns one tinyglobby pattern (as a one-element array).
 * @throws ToolInputError when the pattern is empty, absolute, or has a `..` segment (it would
 *   search outside the search directory; put the directory in `path` instead).
 */
export function searchGlobs(field: string, pattern: string): string[] {
  const p = pattern.trim().replace(/^(\.\/)+/, "");
  if (p === "") throw new ToolInputError(`${field} is required`);
  if (isAbsolute(p) || /(^|\/)\.\.(\/|$)/.test(p)) {
    throw new ToolInputError(
      `${field} must be relative to the search directory and must not contain "..": ${pattern} (put the directory in "path")`,
    );
  }
  return [p.includes("/") ? p : `**/${p}`];
}
