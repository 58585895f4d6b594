import { readFileSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { ConfigError } from "./config-error.js";

const ENV = /\{env:([^}]+)\}/g;
const FILE = /\{file:([^}]+)\}/g;

/**
 * Replaces the variables of a config file in every string value of `value` (keys are left as
 * written), as OpenCode's config `load` does (docs/configuration.md, "The file"):
 * - `{env:NAME}`: the environment variable `NAME` of `env`, empty when unset;
 * - `{file:PATH}`: the content of the file, trimmed (leading and trailing white space removed);
 *   `PATH` is relative to `baseDir` (the config file's directory), or absolute, or `~/…` in the
 *   home directory. A file's content is inserted as is (its own `{env:}`/`{file:}` are not
 *   replaced again).
 * `{env:}` is replaced first, so `{file:{env:DIR}/x}` does not work (OpenCode neither).
 * Throws `ConfigError` `<source>: <key path>: {file:PATH}: <absolute path> does not exist` (or
 * `is not a regular file`, or `cannot be read: <why>`) naming the key holding it.
 */
export function substituteVariables(
  value: unknown,
  options: { env: NodeJS.ProcessEnv; baseDir: string; source: string; home?: string },
  keyPath: readonly (string | number)[] = [],
): unknown {
  if (typeof value === "string") {
    const withEnv = value.replace(ENV, (_, name: string) => options.env[name] ?? "");
    return withEnv.replace(FILE, (match: string, ref: string) => readReferencedFile(match, ref, options, keyPath));
  }
  if (Array.isArray(value)) return value.map((v, i) => substituteVariables(v, options, [...keyPath, i]));
  if (value && typeof value === "object")
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substituteVariables(v, options, [...keyPath, k])]));
  return value;
}

function readReferencedFile(
  match: string,
  ref: string,
  options: { baseDir: string; source: string; home?: string },
  keyPath: readonly (string | number)[],
): string {
  const home = options.home ?? os.homedir();
  const expanded = ref === "~" ? home : ref.startsWith("~/") ? path.join(home, ref.slice(2)) : ref;
  const file = path.resolve(options.baseDir, expanded);
  const fail = (why: string) => new ConfigError(`${options.source}: ${keyPath.join(".") || "(root)"}: ${match}: ${file} ${why}`);
  let stat;
  try {
    stat = statSync(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR") throw fail("does not exist");
    throw fail(`cannot be read: ${code ?? String(error)}`);
  }
  if (!stat.isFile()) throw fail("is not a regular file");
  try {
    return readFileSync(file, "utf8").trim();
  } catch (error) {
    throw fail(`cannot be read: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  }
}
