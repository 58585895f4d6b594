import { execFile as execFileCb } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { promisify } from "node:util";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findSymbolAt } from "../../src/parts/symbols/index.js";

// Real files in a temporary directory, parsed by the real TypeScript language service and the
// real tree-sitter grammars. Every line number here is 1-based, as in `?start=N&end=N`.

const TS = `import { readFile } from "node:fs/promises";

/** Says hello. */
export function greet(name: string): string {
  return \`hello \${name}\`;
}

@sealed
export class Greeter {
  constructor(private readonly who: string) {}

  hello(): string {
    return greet(this.who);
  }
}

export interface Options {
  loud: boolean;
}

const shout = (text: string) => {
  return text.toUpperCase();
};
`;

const PY = `import os


class Shape:
    """A shape."""

    def area(self):
        return 0

    @property
    def name(self):
        return "shape"


def main():
    print(Shape().area())
`;

const GO = `package main

type Point struct {
\tX int
}

func (p Point) Norm() int {
\treturn p.X
}

func main() {
}
`;

const RS = `#[derive(Debug)]
#[allow(dead_code)]
struct Point {
    x: i32,
}

impl Point {
    fn norm(&self) -> i32 {
        self.x
    }
}
`;

const execFile = promisify(execFileCb);
const MAX = 2 * 1024 * 1024;
let dir: string;
const at = (name: string, line: number, max = MAX) => findSymbolAt(join(dir, name), line, max);

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "ledger-symbols-"));
  await writeFile(join(dir, "greet.ts"), TS);
  await writeFile(join(dir, "shape.py"), PY);
  await writeFile(join(dir, "point.go"), GO);
  await writeFile(join(dir, "point.rs"), RS);
  await writeFile(join(dir, "App.jsx"), "export function App() {\n  return <div>hi</div>;\n}\n");
  await writeFile(join(dir, "crlf.mjs"), "// a\r\nfunction a() {\r\n  return 1;\r\n}\r\n");
  await writeFile(join(dir, "cr.cjs"), "// a\rfunction a() {\r  return 1;\r}\r");
  await writeFile(join(dir, "broken.ts"), "function ok() {\n  return 1;\n}\nfunction broken( {\n");
  await writeFile(join(dir, "notes.txt"), "function notCode() {\n}\n");
  await writeFile(
    join(dir, "nested.ts"),
    "const add = (a: number, b: number) => {\n  const sum = {\n    v: a + b,\n  };\n};\nclass K {\n  handler = () => {\n    const local = 1;\n  };\n}\n",
  );
  await writeFile(join(dir, "doc.rs"), "#[derive(Debug)]\n/// A point.\nstruct P {\n    x: i32,\n}\n");
  await execFile("mkfifo", [join(dir, "pipe.ts")]);
  await writeFile(
    join(dir, "locals.ts"),
    "function add(a: number, b: number) {\n  const sum = a + b;\n  return sum;\n}\nconst TOP = {\n  a: 1,\n};\n",
  );
  await writeFile(join(dir, "blob.ts"), Buffer.from([0, 1, 2, 3, 0, 0, 0, 0, 9, 9]));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe("findSymbolAt: TypeScript and JavaScript (language service)", () => {
  it("expands a function from its first line to its closing brace", async () => {
    expect(await at("greet.ts", 4)).toEqual({ name: "greet", kind: "function", start: 4, end: 6 });
  });

  it("expands a class method, and a constructor on one line", async () => {
    expect(await at("greet.ts", 12)).toEqual({ name: "hello", kind: "method", start: 12, end: 14 });
    expect(await at("greet.ts", 10)).toEqual({ name: "constructor", kind: "constructor", start: 10, end: 10 });
  });

  it("expands a decorated class from its decorator line, and from its name line", async () => {
    const greeter = { name: "Greeter", kind: "class", start: 8, end: 15 };
    expect(await at("greet.ts", 8)).toEqual(greeter);
    expect(await at("greet.ts", 9)).toEqual(greeter);
  });

  it("expands an interface and a const arrow function", async () => {
    expect(await at("greet.ts", 17)).toEqual({ name: "Options", kind: "interface", start: 17, end: 19 });
    expect(await at("greet.ts", 21)).toEqual({ name: "shout", kind: "constant", start: 21, end: 23 });
  });

  it("finds nothing on an import, a JSDoc line, a blank line or inside a body", async () => {
    for (const line of [1, 2, 3, 5, 7, 13, 99]) expect(await at("greet.ts", line)).toBeUndefined();
  });

  it("does not count a variable local to a function body as a symbol", async () => {
    expect(await at("locals.ts", 2)).toBeUndefined();
    // Locals under a function-valued const or class field, and object keys, are not symbols either.
    expect(await at("nested.ts", 2)).toBeUndefined();
    expect(await at("nested.ts", 3)).toBeUndefined();
    expect(await at("nested.ts", 8)).toBeUndefined();
    expect(await at("nested.ts", 1)).toEqual({ name: "add", kind: "constant", start: 1, end: 5 });
    expect(await at("nested.ts", 7)).toEqual({ name: "handler", kind: "property", start: 7, end: 9 });
    expect(await at("locals.ts", 1)).toEqual({ name: "add", kind: "function", start: 1, end: 4 });
    expect(await at("locals.ts", 5)).toEqual({ name: "TOP", kind: "constant", start: 5, end: 7 });
  });

  it("parses JSX, and counts CRLF and lone-CR line ends like the read tool", async () => {
    expect(await at("App.jsx", 1)).toEqual({ name: "App", kind: "function", start: 1, end: 3 });
    expect(await at("crlf.mjs", 2)).toEqual({ name: "a", kind: "function", start: 2, end: 4 });
    expect(await at("cr.cjs", 2)).toEqual({ name: "a", kind: "function", start: 2, end: 4 });
  });

  it("answers from the file as it is now: a file edited between two lookups is parsed again", async () => {
    await writeFile(join(dir, "edited.ts"), "function one() {\n  return 1;\n}\n");
    expect(await at("edited.ts", 1)).toEqual({ name: "one", kind: "function", start: 1, end: 3 });
    expect(await at("edited.ts", 1)).toEqual({ name: "one", kind: "function", start: 1, end: 3 });
    await writeFile(join(dir, "edited.ts"), "function two() {\n  return 2;\n\n}\n");
    expect(await at("edited.ts", 1)).toEqual({ name: "two", kind: "function", start: 1, end: 4 });
    // Another file of the same text is its own entry.
    await writeFile(join(dir, "copy.ts"), "function two() {\n  return 2;\n\n}\n");
    expect(await at("copy.ts", 1)).toEqual({ name: "two", kind: "function", start: 1, end: 4 });
  });

  it("still finds declarations in a file with a syntax error", async () => {
    expect(await at("broken.ts", 1)).toEqual({ name: "ok", kind: "function", start: 1, end: 3 });
  });
});

describe("findSymbolAt: Python, Go and Rust (tree-sitter)", () => {
  it("expands a Python class, a method and a function (kinds named alike for every language)", async () => {
    expect(await at("shape.py", 4)).toEqual({ name: "Shape", kind: "class", start: 4, end: 12 });
    expect(await at("shape.py", 7)).toEqual({ name: "area", kind: "method", start: 7, end: 8 });
    expect(await at("shape.py", 15)).toEqual({ name: "main", kind: "function", start: 15, end: 16 });
  });

  it("expands a decorated Python method from its decorator line and from its def line", async () => {
    const name = { name: "name", kind: "method", start: 10, end: 12 };
    expect(await at("shape.py", 10)).toEqual(name);
    expect(await at("shape.py", 11)).toEqual(name);
  });

  it("finds nothing on a Python import, docstring or body line", async () => {
    for (const line of [1, 5, 8, 16]) expect(await at("shape.py", line)).toBeUndefined();
  });

  it("expands a Go type and a Go method", async () => {
    expect(await at("point.go", 3)).toEqual({ name: "Point", kind: "struct", start: 3, end: 5 });
    expect(await at("point.go", 7)).toEqual({ name: "Norm", kind: "method", start: 7, end: 9 });
    expect(await at("point.go", 11)).toEqual({ name: "main", kind: "function", start: 11, end: 12 });
  });

  it("expands a Rust struct with its attributes, an impl and a method", async () => {
    const point = { name: "Point", kind: "struct", start: 1, end: 5 };
    expect(await at("point.rs", 1)).toEqual(point);
    expect(await at("point.rs", 3)).toEqual(point);
    expect(await at("point.rs", 7)).toEqual({ name: "impl Point", kind: "impl", start: 7, end: 11 });
    expect(await at("point.rs", 8)).toEqual({ name: "norm", kind: "method", start: 8, end: 10 });
    // A doc comment between the attribute and the item does not cut the attribute off.
    expect(await at("doc.rs", 1)).toEqual({ name: "P", kind: "struct", start: 1, end: 5 });
    expect(await at("doc.rs", 3)).toEqual({ name: "P", kind: "struct", start: 1, end: 5 });
  });
});

describe("findSymbolAt: fallbacks", () => {
  it("gives undefined for an unsupported extension, a binary file, a missing file and a file over the byte limit", async () => {
    expect(await at("notes.txt", 1)).toBeUndefined();
    expect(await at("blob.ts", 1)).toBeUndefined();
    expect(await at("missing.ts", 1)).toBeUndefined();
    expect(await at("pipe.ts", 1)).toBeUndefined(); // a FIFO: opened non-blocking, not read
    expect(await at("greet.ts", 4, TS.length - 1)).toBeUndefined();
    expect(await at("greet.ts", 4, Buffer.byteLength(TS))).toEqual({ name: "greet", kind: "function", start: 4, end: 6 });
  });
});
