/**
 * A symbol found in a source file: a function, class, method, interface or a similar declaration,
 * with its whole extent in lines.
 *
 * Lines are 1-based and inclusive on both ends: a one-line function on line 7 is
 * `{start: 7, end: 7}`. (OpenCode takes these ranges from a running LSP, whose lines are
 * 0-based, and compares them with the 1-based `?start=` of the URL; ours are 1-based throughout.)
 */
export interface SourceSymbol {
  /** The symbol's name as the parser reports it, e.g. `greet`; a method is named without its class. */
  name: string;
  /** What it is, the same words for every language (see {@link SymbolKind}). */
  kind: SymbolKind;
  /** First line of the declaration, 1-based (lines). Decorators and modifiers are included. */
  start: number;
  /** Last line of the declaration, 1-based and inclusive (lines). */
  end: number;
}

/**
 * Kinds of symbol, named after LSP's `SymbolKind` in lower case so they read the same for every
 * language: TypeScript `function`/`class`/`method`/`constructor`/`interface`/`type`/`enum`/
 * `module`, getters, setters and class fields as `property`, top-level `const` as `constant` and
 * `let`/`var` as `variable`; Python `def` as `function` (`method` inside a class) and `class`;
 * Go `func` as `function`/`method` and `type` as `struct`, `interface` or `type`; Rust `fn` as
 * `function` (`method` inside an `impl` or `trait`), `struct`/`union` as `struct`, `enum`,
 * `trait`, `impl`, `mod` as `module`, `macro_rules!` as `macro`, `type`, `const`/`static` as
 * `constant`.
 */
export type SymbolKind =
  | "function"
  | "method"
  | "constructor"
  | "property"
  | "class"
  | "interface"
  | "struct"
  | "enum"
  | "type"
  | "trait"
  | "impl"
  | "module"
  | "macro"
  | "constant"
  | "variable";

/** Source text of one file together with the path that names its language. */
export interface SourceFile {
  /** Absolute path; only its extension is used, to choose the parser. */
  path: string;
  /** The whole file, decoded. */
  text: string;
}

/**
 * Picks the symbol for a 1-based `line` out of candidates: the outermost declaration whose first
 * line is `line`, else the outermost one whose name sits on `line` (a decorated class named on
 * the line after its decorator), else none.
 *
 * @param candidates - every declaration of the file, in any order, with `nameLine` (1-based).
 * @param line - the requested line, 1-based (lines).
 */
export function pickSymbol(candidates: Iterable<SourceSymbol & { nameLine?: number }>, line: number): SourceSymbol | undefined {
  let byStart: SourceSymbol | undefined;
  let byName: SourceSymbol | undefined;
  for (const candidate of candidates) {
    const symbol: SourceSymbol = { name: candidate.name, kind: candidate.kind, start: candidate.start, end: candidate.end };
    if (candidate.start === line && (byStart === undefined || symbol.end > byStart.end)) byStart = symbol;
    else if (candidate.nameLine === line && (byName === undefined || symbol.end - symbol.start > byName.end - byName.start))
      byName = symbol;
  }
  return byStart ?? byName;
}
