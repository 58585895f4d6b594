import { loadOnce } from "../../load-once.js";
import { pickSymbol, type SourceFile, type SourceSymbol, type SymbolKind } from "./types.js";

/** File extensions read with the TypeScript language service (lower case, with the dot). */
export const TYPESCRIPT_EXTENSIONS: ReadonlySet<string> = new Set([".ts", ".tsx", ".mts", ".cts", ".js", ".jsx", ".mjs", ".cjs"]);

type TypeScript = typeof import("typescript");
type NavigationTree = import("typescript").NavigationTree;

/**
 * Loads the `typescript` package once, on first use (it takes a few hundred ms to import); a
 * failed load is tried again on the next lookup.
 */
const loadTypeScript: () => Promise<TypeScript> = loadOnce(() =>
  import("typescript").then((mod) => ("default" in mod ? (mod.default as TypeScript) : mod)),
);

/** Navigation-tree kinds (`ScriptElementKind`) that are symbols, and their {@link SymbolKind}. */
const KINDS: ReadonlyMap<string, SymbolKind> = new Map([
  ["function", "function"],
  ["local function", "function"],
  ["method", "method"],
  ["constructor", "constructor"],
  ["getter", "property"],
  ["setter", "property"],
  ["property", "property"],
  ["class", "class"],
  ["local class", "class"],
  ["interface", "interface"],
  ["type", "type"],
  ["enum", "enum"],
  ["module", "module"],
  ["const", "constant"],
  ["let", "variable"],
  ["var", "variable"],
  ["local var", "variable"],
]);

/** Kinds whose children are locals: a variable declared in their body is not a symbol. */
const BODIES = new Set(["function", "local function", "method", "constructor", "getter", "setter"]);
const VARIABLES = new Set(["const", "let", "var", "local var"]);

/**
 * Finds the declaration that starts at a line of a TypeScript or JavaScript file.
 *
 * Uses the `typescript` package's language service in syntactic mode (no program, no type
 * check, no `tsserver` process): `getNavigationTree` is what `tsserver` answers LSP's
 * `textDocument/documentSymbol` with, so the candidates are the ones an editor's outline shows
 * (functions, classes, methods, constructors, accessors, interfaces, enums, type aliases,
 * namespaces, variables and test callbacks). A declaration's span starts at its decorators
 * and modifiers and leaves out a leading JSDoc comment. Imports (`alias`) and variables local
 * to a function body are not symbols (as in Python, Go and Rust).
 *
 * @param file - the file's path (its extension picks TS, TSX, JS or JSX parsing) and text.
 * @param line - the requested line, 1-based (lines).
 * @returns the outermost declaration starting on `line` (else named on `line`), or undefined.
 */
export async function typescriptSymbolAt(file: SourceFile, line: number): Promise<SourceSymbol | undefined> {
  const known = recent.find((r) => r.path === file.path && r.text === file.text);
  if (known) return pickSymbol(known.candidates, line);
  const candidates = declarationsOf(await loadTypeScript(), file);
  recent.unshift({ path: file.path, text: file.text, candidates });
  recent.length = Math.min(recent.length, RECENT_FILES);
  return pickSymbol(candidates, line);
}

type Candidate = SourceSymbol & { nameLine?: number };

/**
 * How many files' declarations are kept, by path and text, so that the one-line ranges of a
 * prompt on one file parse it once: a probe's 16 ranges on a 1 MiB file took 8 s (16 parses of
 * 0.5 s each on the event loop). Holds at most that many texts of `symbol_source_bytes`.
 */
const RECENT_FILES = 4;
const recent: Array<{ path: string; text: string; candidates: Candidate[] }> = [];

/** Every declaration of `file` an editor's outline shows (see {@link typescriptSymbolAt}). */
function declarationsOf(ts: TypeScript, file: SourceFile): Candidate[] {
  const { path, text } = file;
  const host: import("typescript").LanguageServiceHost = {
    getScriptFileNames: () => [path],
    getScriptVersion: () => "1",
    getScriptSnapshot: (name) => (name === path ? ts.ScriptSnapshot.fromString(text) : undefined),
    getCurrentDirectory: () => "/",
    getCompilationSettings: () => ({ allowJs: true, noResolve: true, noLib: true }),
    getDefaultLibFileName: () => "lib.d.ts",
    fileExists: (name) => name === path,
    readFile: (name) => (name === path ? text : undefined),
  };
  const service = ts.createLanguageService(host, ts.createDocumentRegistry(), ts.LanguageServiceMode.Syntactic);
  try {
    const tree = service.getNavigationTree(path);
    const lineOf = lineLocator(text);
    const candidates: Candidate[] = [];
    // `inBody`: under a function body, or under a variable or property whose value is a function
    // or object (it has children): variables and object keys there are locals, not symbols.
    const visit = (node: NavigationTree, parent: NavigationTree | undefined, inBody: boolean) => {
      const kind = KINDS.get(node.kind);
      const local = inBody && (VARIABLES.has(node.kind) || node.kind === "property");
      if (parent !== undefined && kind !== undefined && !local) {
        for (const span of node.spans) {
          candidates.push({
            name: node.text,
            kind,
            start: lineOf(span.start),
            // The span's end is exclusive; a declaration ending in "}\n" ends on the "}" line.
            end: lineOf(Math.max(span.start, span.start + span.length - 1)),
            nameLine: node.nameSpan ? lineOf(node.nameSpan.start) : undefined,
          });
        }
      }
      const childrenInBody = inBody || BODIES.has(node.kind) || VARIABLES.has(node.kind) || node.kind === "property";
      for (const child of node.childItems ?? []) visit(child, node, childrenInBody);
    };
    visit(tree, undefined, false);
    return candidates;
  } finally {
    service.dispose();
  }
}

/**
 * Maps a UTF-16 offset in `text` to its 1-based line, counting `\n` only (the caller has turned
 * `\r\n` and lone `\r` line ends into lines the same way, see `findSymbolAt`).
 */
function lineLocator(text: string): (pos: number) => number {
  const starts = [0];
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) starts.push(i + 1);
  return (pos) => {
    let low = 0;
    let high = starts.length - 1;
    while (low < high) {
      const mid = (low + high + 1) >> 1;
      if (starts[mid]! <= pos) low = mid;
      else high = mid - 1;
    }
    return low + 1;
  };
}
