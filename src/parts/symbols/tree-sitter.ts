import { createRequire } from "node:module";
import type { Language, Node } from "web-tree-sitter";
import { loadOnce, loadOncePerKey } from "../../load-once.js";
import { pickSymbol, type SourceFile, type SourceSymbol, type SymbolKind } from "./types.js";

/** A language read with tree-sitter, and the npm package that ships its grammar as `.wasm`. */
interface Grammar {
  /** Module specifier of the grammar's `.wasm`, resolved from this package's `node_modules`. */
  wasm: string;
  /** Node types that are declarations (functions, classes, methods, types, ...). */
  declarations: ReadonlySet<string>;
  /** Node types that precede a declaration and belong to it (decorators, attributes). */
  prefixes: ReadonlySet<string>;
  /** Comment node types, stepped over between a declaration and its prefixes. */
  comments: ReadonlySet<string>;
  /** Node type that wraps a declaration together with its decorators, if the grammar has one. */
  wrapper?: string;
}

const GRAMMARS = {
  python: {
    wasm: "tree-sitter-python/tree-sitter-python.wasm",
    declarations: new Set(["function_definition", "class_definition"]),
    prefixes: new Set(),
    comments: new Set(["comment"]),
    wrapper: "decorated_definition",
  },
  go: {
    wasm: "tree-sitter-go/tree-sitter-go.wasm",
    declarations: new Set(["function_declaration", "method_declaration", "type_declaration", "type_spec"]),
    prefixes: new Set(),
    comments: new Set(["comment"]),
  },
  rust: {
    wasm: "tree-sitter-rust/tree-sitter-rust.wasm",
    declarations: new Set([
      "function_item",
      "function_signature_item",
      "struct_item",
      "enum_item",
      "union_item",
      "trait_item",
      "impl_item",
      "mod_item",
      "macro_definition",
      "type_item",
      "const_item",
      "static_item",
    ]),
    prefixes: new Set(["attribute_item"]),
    comments: new Set(["line_comment", "block_comment"]),
  },
} satisfies Record<string, Grammar>;

/** Languages read with tree-sitter. */
export type TreeSitterLanguage = keyof typeof GRAMMARS;

/** File extensions (lower case, with the dot) read with tree-sitter, and their language. */
export const TREE_SITTER_EXTENSIONS: ReadonlyMap<string, TreeSitterLanguage> = new Map([
  [".py", "python"],
  [".pyi", "python"],
  [".go", "go"],
  [".rs", "rust"],
]);

const require = createRequire(import.meta.url);
/**
 * Loads `web-tree-sitter` and initializes its WebAssembly runtime once, on first use; a failed
 * load (e.g. EMFILE) is tried again on the next lookup, not cached for the process.
 */
const loadRuntime: () => Promise<typeof import("web-tree-sitter")> = loadOnce(() =>
  import("web-tree-sitter").then(async (mod) => {
    await mod.Parser.init();
    return mod;
  }),
);

/** Loads a grammar's `.wasm` once per process (again after a failed load). */
const loadLanguage: (name: TreeSitterLanguage) => Promise<Language> = loadOncePerKey((name) =>
  loadRuntime().then((mod) => mod.Language.load(require.resolve(GRAMMARS[name].wasm))),
);

/** 1-based last line of a node; a node ending at column 0 of a line ends on the line before. */
function lastLine(node: Node): number {
  const { row, column } = node.endPosition;
  return column === 0 && row > node.startPosition.row ? row : row + 1;
}

/** Node types with one fixed {@link SymbolKind}; the others are decided by `kindOf`. */
const FIXED_KINDS: ReadonlyMap<string, SymbolKind> = new Map([
  ["class_definition", "class"],
  ["method_declaration", "method"],
  ["function_declaration", "function"],
  ["function_signature_item", "method"],
  ["struct_item", "struct"],
  ["union_item", "struct"],
  ["enum_item", "enum"],
  ["trait_item", "trait"],
  ["impl_item", "impl"],
  ["mod_item", "module"],
  ["macro_definition", "macro"],
  ["type_item", "type"],
  ["const_item", "constant"],
  ["static_item", "constant"],
]);

/** The {@link SymbolKind} of a declaration node. */
function kindOf(node: Node): SymbolKind {
  const fixed = FIXED_KINDS.get(node.type);
  if (fixed) return fixed;
  switch (node.type) {
    case "function_definition": {
      // Python: a def whose block (possibly through a decorator) belongs to a class is a method.
      let up = node.parent;
      if (up?.type === "decorated_definition") up = up.parent;
      return up?.type === "block" && up.parent?.type === "class_definition" ? "method" : "function";
    }
    case "function_item": {
      // Rust: a fn in an impl or trait body is a method.
      const owner = node.parent?.type === "declaration_list" ? node.parent.parent?.type : undefined;
      return owner === "impl_item" || owner === "trait_item" ? "method" : "function";
    }
    case "type_declaration":
    case "type_spec": {
      // Go: `type T struct{}` / `type I interface{}` / anything else.
      const spec = node.type === "type_spec" ? node : node.namedChildren.find((child) => child?.type === "type_spec");
      const type = spec?.childForFieldName("type")?.type;
      return type === "struct_type" ? "struct" : type === "interface_type" ? "interface" : "type";
    }
    default:
      return "type";
  }
}

function nameOf(node: Node): string {
  const name = node.childForFieldName("name");
  if (name) return name.text;
  if (node.type === "type_declaration") {
    const spec = node.namedChildren.find((child) => child?.type === "type_spec");
    return spec?.childForFieldName("name")?.text ?? "type";
  }
  if (node.type === "impl_item") {
    const type = node.childForFieldName("type")?.text ?? "";
    const trait = node.childForFieldName("trait")?.text;
    return trait ? `impl ${trait} for ${type}` : `impl ${type}`;
  }
  return node.type;
}

/**
 * Finds the declaration that starts at a line of a Python, Go or Rust file, with `web-tree-sitter`
 * and the grammar `.wasm` shipped by the `tree-sitter-python`, `tree-sitter-go` and
 * `tree-sitter-rust` npm packages (no native addon, no language server).
 *
 * Declarations: Python `def`/`class` (methods are `def`s inside a class; decorators belong to
 * the declaration, so it starts at its first decorator and is also found by its `def` line);
 * Go functions, methods and `type` declarations (a grouped `type (...)` and each spec in it);
 * Rust `fn` (with or without a body), `struct`, `enum`, `union`, `trait`, `impl`, `mod`,
 * `macro_rules!`, `type`, `const` and `static`, each starting at its first `#[...]` attribute.
 * The parser is error-tolerant: a file with syntax errors still yields the declarations it can.
 *
 * @param file - the file's path (not read; the caller decoded it) and text.
 * @param language - which grammar to parse with.
 * @param line - the requested line, 1-based (lines).
 * @returns the outermost declaration starting on `line` (else named on `line`), or undefined.
 * @throws Error when the grammar's `.wasm` cannot be found or loaded (a broken install).
 */
export async function treeSitterSymbolAt(file: SourceFile, language: TreeSitterLanguage, line: number): Promise<SourceSymbol | undefined> {
  const mod = await loadRuntime();
  const grammar: Grammar = GRAMMARS[language];
  const parser = new mod.Parser();
  try {
    parser.setLanguage(await loadLanguage(language));
    const tree = parser.parse(file.text);
    if (tree === null) return undefined;
    try {
      const row = line - 1;
      const candidates: Array<SourceSymbol & { nameLine?: number }> = [];
      const add = (node: Node) => {
        let first: Node = node;
        if (grammar.wrapper !== undefined && node.parent?.type === grammar.wrapper) first = node.parent;
        for (
          let prev = first.previousNamedSibling;
          prev !== null && (grammar.prefixes.has(prev.type) || grammar.comments.has(prev.type));
          prev = prev.previousNamedSibling
        ) {
          if (grammar.prefixes.has(prev.type)) first = prev;
        }
        candidates.push({
          name: nameOf(node),
          kind: kindOf(node),
          start: first.startPosition.row + 1,
          end: lastLine(node),
          nameLine: node.startPosition.row + 1,
        });
      };
      // Descend only into subtrees that contain the requested line; a declaration beside them
      // is still a candidate, since its decorators or attributes may start on that line.
      const visit = (node: Node) => {
        if (grammar.declarations.has(node.type)) add(node);
        for (const child of node.namedChildren) {
          if (child === null) continue;
          if (child.startPosition.row <= row && child.endPosition.row >= row) visit(child);
          else if (grammar.declarations.has(child.type)) add(child);
        }
      };
      visit(tree.rootNode);
      return pickSymbol(candidates, line);
    } finally {
      tree.delete();
    }
  } finally {
    parser.delete();
  }
}
