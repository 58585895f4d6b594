import { writeFile } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { file, promptOnce, shape, text } from "../support/prompt.js";

// `?start=N&end=N` names the symbol starting on line N (issue 7 item 5): through the real server,
// the read call is widened to the whole symbol, 1-based, and says which symbol it found.

const TS = [
  'import { join } from "node:path";',
  "",
  "export function greet(name: string): string {",
  "  return join('hello', name);",
  "}",
  "",
  "export class Greeter {",
  "  hello(who: string): string {",
  "    return greet(who);",
  "  }",
  "}",
  "",
].join("\n");

const PY = [
  "import os",
  "",
  "",
  "class Shape:",
  "    def area(self):",
  "        return 0",
  "",
  "",
  "def main():",
  "    print(Shape().area())",
  "",
].join("\n");

let t: TestLedger;
beforeAll(async () => {
  t = await startTestLedger();
  await writeFile(path.join(t.dir, "greet.ts"), TS);
  await writeFile(path.join(t.dir, "shape.py"), PY);
});
afterAll(() => t?.close());

const call = (input: Record<string, unknown>) => `Called the Read tool with the following input: ${JSON.stringify(input)}`;
const read = (filePath: string, lines: string, footer: string) =>
  `<path>${filePath}</path>\n<type>file</type>\n<content>\n${lines}\n\n${footer}\n</content>`;

async function stored(name: string, line: number) {
  const url = `${pathToFileURL(path.join(t.dir, name)).href}?start=${line}&end=${line}`;
  const { sessionId, message } = await promptOnce(t.client, t.dir, [text("look"), file(url)]);
  const listed = await t.client.listMessages({ sessionId });
  expect(listed.messages[0]).toEqual(message);
  const parts = message.parts;
  // text, read call, read output, file part: ids ascending in stored order.
  expect(parts.map((p) => p.id)).toEqual([...parts.map((p) => p.id)].sort());
  const metadata = parts[1]?.kind.case === "text" ? parts[1].kind.value.metadata : undefined;
  return { url, parts: parts.map(shape), metadata };
}

describe("symbol ranges through Prompt", () => {
  it("widens a TypeScript function's first line to the whole function", async () => {
    const filePath = path.join(t.dir, "greet.ts");
    const { url, parts, metadata } = await stored("greet.ts", 3);
    expect(parts).toEqual([
      { kind: "text", synthetic: false, text: "look" },
      { kind: "text", synthetic: true, text: call({ filePath, offset: 3, limit: 3 }) },
      {
        kind: "text",
        synthetic: true,
        text: read(
          filePath,
          "3: export function greet(name: string): string {\n4:   return join('hello', name);\n5: }",
          "(Showing lines 3-5 of 11. Use offset=6 to continue.)",
        ),
      },
      { kind: "file", mime: "text/plain", filename: "greet.ts", url },
    ]);
    expect(metadata).toEqual({ symbol: { name: "greet", kind: "function", start: 3, end: 5 } });
  });

  it("widens a class method's line to the method, not the class", async () => {
    const filePath = path.join(t.dir, "greet.ts");
    const { parts, metadata } = await stored("greet.ts", 8);
    expect(parts[1]).toEqual({ kind: "text", synthetic: true, text: call({ filePath, offset: 8, limit: 3 }) });
    expect(parts[2]).toEqual({
      kind: "text",
      synthetic: true,
      text: read(
        filePath,
        "8:   hello(who: string): string {\n9:     return greet(who);\n10:   }",
        "(Showing lines 8-10 of 11. Use offset=11 to continue.)",
      ),
    });
    expect(metadata).toEqual({ symbol: { name: "hello", kind: "method", start: 8, end: 10 } });
  });

  it("widens a Python class and a Python function", async () => {
    const filePath = path.join(t.dir, "shape.py");
    const shape = await stored("shape.py", 4);
    expect(shape.parts[1]).toEqual({ kind: "text", synthetic: true, text: call({ filePath, offset: 4, limit: 3 }) });
    expect(shape.parts[2]).toEqual({
      kind: "text",
      synthetic: true,
      text: read(
        filePath,
        "4: class Shape:\n5:     def area(self):\n6:         return 0",
        "(Showing lines 4-6 of 10. Use offset=7 to continue.)",
      ),
    });
    expect(shape.metadata).toEqual({ symbol: { name: "Shape", kind: "class", start: 4, end: 6 } });

    const main = await stored("shape.py", 9);
    expect(main.parts[1]).toEqual({ kind: "text", synthetic: true, text: call({ filePath, offset: 9, limit: 2 }) });
    expect(main.parts[2]).toEqual({
      kind: "text",
      synthetic: true,
      text: read(filePath, "9: def main():\n10:     print(Shape().area())", "(End of file - total 10 lines)"),
    });
  });

  it("reads the single line where no symbol starts, with no symbol metadata", async () => {
    const filePath = path.join(t.dir, "greet.ts");
    const { parts, metadata } = await stored("greet.ts", 4);
    expect(parts[1]).toEqual({ kind: "text", synthetic: true, text: call({ filePath, offset: 4, limit: 1 }) });
    expect(parts[2]).toEqual({
      kind: "text",
      synthetic: true,
      text: read(filePath, "4:   return join('hello', name);", "(Showing lines 4-4 of 11. Use offset=5 to continue.)"),
    });
    expect(metadata).toBeUndefined();
  });

  it("widens only the first symbol_lookups one-line ranges of a prompt, in draft order", async () => {
    const limited = await startTestLedger({ limits: { symbol_lookups: 1 } });
    try {
      await writeFile(path.join(limited.dir, "greet.ts"), TS);
      const filePath = path.join(limited.dir, "greet.ts");
      const url = (line: number) => `${pathToFileURL(filePath).href}?start=${line}&end=${line}`;
      const { message } = await promptOnce(limited.client, limited.dir, [text("look"), file(url(3)), file(url(8))]);
      const texts = message.parts
        .map(shape)
        .filter((p) => p.kind === "text")
        .map((p) => p.text);
      expect(texts).toContain(call({ filePath, offset: 3, limit: 3 }));
      expect(texts).toContain(call({ filePath, offset: 8, limit: 1 }));
    } finally {
      await limited.close();
    }
  });
});
