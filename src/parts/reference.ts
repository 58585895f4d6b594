import { realpath } from "node:fs/promises";
import path from "node:path";
import type { JsonObject } from "@bufbuild/protobuf";
import type { FilePartInput } from "../../gen/ledger/v1/part_pb.js";

/** The leading note of a `file:` draft that lies inside a configured reference. */
export interface ReferenceNote {
  text: string;
  /** `{reference: {name, kind: "local", path, target, targetPath, source}}`, as OpenCode stores it. */
  metadata: JsonObject;
}

/**
 * OpenCode `referenceContextFromFilePart` + `referenceTextPart` (local references): when the read
 * path `filePath` lies strictly inside a configured reference, the note
 * `Referenced configured reference @<alias>/<target>.` with the reference root, the resolved path
 * and a hint, and `metadata.reference`. The alias is the one the draft's `filename` names
 * (`<alias>/...`, a trailing `#range` ignored) when the path lies inside it, else the first
 * reference (config order) that contains the path. The URL alone decides what is read.
 * Returns undefined when no reference contains the path (or the path is a reference root itself).
 */
export async function referenceNote(
  references: Record<string, string>,
  draft: FilePartInput,
  filePath: string,
): Promise<ReferenceNote | undefined> {
  const entries = Object.entries(references);
  if (entries.length === 0) return undefined;
  const name = draft.filename.replace(/#\d+(?:-\d*)?$/, "");
  const slash = name.indexOf("/");
  const named = slash > 0 ? name.slice(0, slash) : undefined;
  const ordered =
    named === undefined ? entries : [...entries.filter(([alias]) => alias === named), ...entries.filter(([alias]) => alias !== named)];
  for (const [alias, root] of ordered) {
    const target = await targetInside(root, filePath);
    if (target === undefined) continue;
    const label = `@${alias}/${target}`;
    const spanText = draft.source?.kind.value?.text;
    const sourceValue = named === alias ? `@${name}` : label;
    const source = spanText
      ? { value: spanText.value, start: spanText.start, end: spanText.end }
      : { value: sourceValue, start: 0, end: sourceValue.length };
    const text = [
      `Referenced configured reference ${label}.`,
      "Kind: local directory",
      `Reference root: ${root}`,
      `Resolved path: ${filePath}`,
      // OpenCode's text names its `scout` subagent; ours is the built-in `explore`.
      "For targeted context, inspect the reference path directly with Read, Glob, and Grep. For broader research, call the task tool with subagent explore and include this reference path.",
    ].join("\n");
    return { text, metadata: { reference: { name: alias, kind: "local", path: root, target, targetPath: filePath, source } } };
  }
  return undefined;
}

/** `filePath` relative to `root` (or to its realpath) with `/` separators, when strictly inside it. */
async function targetInside(root: string, filePath: string): Promise<string | undefined> {
  const candidates = [path.resolve(root)];
  try {
    const real = await realpath(root);
    if (real !== candidates[0]) candidates.push(real);
  } catch {
    // A missing reference root contains nothing real; the lexical root still counts.
  }
  for (const base of candidates) {
    const relative = path.relative(base, filePath);
    if (!relative || relative === ".." || relative.startsWith(`..${path.sep}`) || path.isAbsolute(relative)) continue;
    return relative.split(path.sep).join("/");
  }
  return undefined;
}
