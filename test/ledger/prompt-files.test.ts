import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { storedEvents } from "../support/stored.js";
import { file, partText, promptOnce, shape, text } from "../support/prompt.js";

// Field cases from real user reports: each `file:`/`data:` draft stored with the exact parts of
// docs/design.md §4, read back through ListMessages.

const PNG_1X1 = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==", "base64");
const TEN_LINES = Array.from({ length: 10 }, (_, i) => `line ${i + 1}`).join("\n") + "\n";

let t: TestLedger;
beforeAll(async () => {
  t = await startTestLedger();
  await mkdir(path.join(t.dir, "my dir"));
  await writeFile(path.join(t.dir, "my dir", "a.txt"), "hello\n");
  await writeFile(path.join(t.dir, "説明.md"), "# 説明\n");
  await writeFile(path.join(t.dir, "notes (draft).txt"), "draft\n");
  await writeFile(path.join(t.dir, "a#1.md"), "hash name\n");
  await writeFile(path.join(t.dir, "image.txt"), PNG_1X1);
  await writeFile(path.join(t.dir, "bytes.bin.txt"), Buffer.from(Array.from({ length: 256 }, (_, i) => i)));
  await writeFile(path.join(t.dir, "latin1.txt"), Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a]));
  await writeFile(path.join(t.dir, "utf16.txt"), Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from("café\n", "utf16le")]));
  await writeFile(path.join(t.dir, "ten.txt"), TEN_LINES);
  await mkdir(path.join(t.dir, "folder", "sub"), { recursive: true });
  await writeFile(path.join(t.dir, "folder", "b.txt"), "b\n");
});
afterAll(() => t?.close());

const url = (name: string) => pathToFileURL(path.join(t.dir, name)).href;
const call = (input: Record<string, unknown>) => `Called the Read tool with the following input: ${JSON.stringify(input)}`;

async function stored(drafts: ReturnType<typeof file>[]) {
  const { sessionId, message } = await promptOnce(t.client, t.dir, [text("look"), ...drafts]);
  const listed = await t.client.listMessages({ sessionId });
  expect(listed.messages).toHaveLength(1);
  expect(listed.messages[0]).toEqual(message);
  return { sessionId, parts: message.parts.slice(1) };
}

describe("file: URLs", () => {
  it("reads a file in a directory with %20 in its name", async () => {
    expect(url("my dir/a.txt")).toContain("my%20dir");
    const { parts } = await stored([file(url("my dir/a.txt"))]);
    const filePath = path.join(t.dir, "my dir", "a.txt");
    expect(parts.map(shape)).toEqual([
      { kind: "text", synthetic: true, text: call({ filePath }) },
      {
        kind: "text",
        synthetic: true,
        text: `<path>${filePath}</path>\n<type>file</type>\n<content>\n1: hello\n\n(End of file - total 1 lines)\n</content>`,
      },
      { kind: "file", mime: "text/plain", filename: "a.txt", url: url("my dir/a.txt") },
    ]);
  });

  it("reads a percent-encoded CJK file name", async () => {
    expect(url("説明.md")).toContain("%E8%AA%AC");
    const { parts } = await stored([file(url("説明.md"))]);
    expect(partText(parts[1])).toContain("1: # 説明");
    expect(shape(parts[2]!)).toMatchObject({ kind: "file", filename: "説明.md" });
  });

  it("reads parentheses in a path, raw and as %28/%29", async () => {
    const raw = `file://${t.dir}/notes%20(draft).txt`;
    const encoded = `file://${t.dir}/notes%20%28draft%29.txt`;
    const { parts } = await stored([file(raw), file(encoded)]);
    expect(parts.map((p) => p.kind.case)).toEqual(["text", "text", "file", "text", "text", "file"]);
    expect(partText(parts[1])).toContain("1: draft");
    expect(partText(parts[4])).toContain("1: draft");
  });

  it("reads %23 as # in a name, and treats a literal # as a fragment", async () => {
    const { sessionId, parts } = await stored([file(`file://${t.dir}/a%231.md`), file(`file://${t.dir}/a#1.md`)]);
    expect(partText(parts[1])).toContain("1: hash name");
    const missing = path.join(t.dir, "a");
    expect(parts.slice(3).map(shape)).toEqual([
      { kind: "text", synthetic: true, text: call({ filePath: missing }) },
      { kind: "text", synthetic: true, text: `Read tool failed to read ${missing} with the following error: File not found: ${missing}` },
    ]);
    expect(await storedEvents(t.ledger.deps.db, sessionId, { kind: "session_error" })).toHaveLength(1);
  });

  it("stores a failure text and a session_error event for a missing file, and the prompt succeeds", async () => {
    const missing = path.join(t.dir, "nope.txt");
    const { sessionId, parts } = await stored([file(url("nope.txt"))]);
    expect(parts.map(shape)).toEqual([
      { kind: "text", synthetic: true, text: call({ filePath: missing }) },
      { kind: "text", synthetic: true, text: `Read tool failed to read ${missing} with the following error: File not found: ${missing}` },
    ]);
    const rows = await storedEvents(t.ledger.deps.db, sessionId, { kind: "session_error" });
    expect(rows.map((r) => r.data)).toEqual([
      expect.objectContaining({
        sessionError: expect.objectContaining({ error: { message: `File not found: ${missing}`, fileRead: { path: missing } } }),
      }),
    ]);
  });

  it("drafts of one missing file each get their call and failure text, and a session_error each", async () => {
    const missing = path.join(t.dir, "gone.txt");
    const { sessionId, parts } = await stored([file(url("gone.txt")), file(url("gone.txt")), file(`${url("gone.txt")}/`)]);
    const failed = [
      { kind: "text", synthetic: true, text: call({ filePath: missing }) },
      { kind: "text", synthetic: true, text: `Read tool failed to read ${missing} with the following error: File not found: ${missing}` },
    ];
    expect(parts.map(shape)).toEqual([...failed, ...failed, ...failed]);
    const rows = await storedEvents(t.ledger.deps.db, sessionId, { kind: "session_error" });
    expect(rows).toHaveLength(3);
  });

  it("lists a directory given with a trailing slash and a text/plain mime", async () => {
    const dirUrl = `${url("folder")}/`;
    const { parts } = await stored([file(dirUrl, "text/plain")]);
    const dirPath = path.join(t.dir, "folder");
    expect(parts.map(shape)).toEqual([
      { kind: "text", synthetic: true, text: call({ filePath: dirPath }) },
      {
        kind: "text",
        synthetic: true,
        text: `<path>${dirPath}</path>\n<type>directory</type>\n<entries>\nb.txt\nsub/\n\n(2 entries)\n</entries>`,
      },
      { kind: "file", mime: "application/x-directory", filename: "folder", url: dirUrl },
    ]);
  });

  it("inlines a real PNG declared text/plain as a data: URL with the sniffed mime", async () => {
    const { parts } = await stored([file(url("image.txt"), "text/plain")]);
    expect(parts.map(shape)).toEqual([
      { kind: "text", synthetic: true, text: call({ filePath: path.join(t.dir, "image.txt") }) },
      { kind: "file", mime: "image/png", filename: "image.txt", url: `data:image/png;base64,${PNG_1X1.toString("base64")}` },
    ]);
  });

  it("refuses 256 bytes 0x00-0xFF declared application/octet-stream without inlining them", async () => {
    const filePath = path.join(t.dir, "bytes.bin.txt");
    const { parts } = await stored([file(url("bytes.bin.txt"), "application/octet-stream")]);
    expect(parts.map(shape)).toEqual([
      { kind: "text", synthetic: true, text: call({ filePath }) },
      {
        kind: "text",
        synthetic: true,
        text: `Read tool failed to read ${filePath} with the following error: Cannot read binary file: ${filePath}`,
      },
    ]);
  });

  it("decodes Latin-1 and UTF-16LE (BOM) text to UTF-8 that says café", async () => {
    const { parts } = await stored([file(url("latin1.txt")), file(url("utf16.txt"))]);
    expect(partText(parts[1])).toContain("\n1: café\n");
    expect(partText(parts[4])).toContain("\n1: café\n");
    expect(partText(parts[4])).not.toContain("\uFEFF");
  });

  // The drafts share one read (src/parts/resolve.ts readOnce); what that saves is a measurement
  // (256 drafts of a 100,000-entry directory: 54 s before), this checks what each draft stores.
  it("drafts naming one path in several spellings each get their own call, listing and file part, in order; another range is read apart", async () => {
    const dirPath = path.join(t.dir, "folder");
    const spellings = [url("folder"), `${url("folder")}/`, `${url("folder")}//`, `${url("folder")}/sub/..`];
    const ten = path.join(t.dir, "ten.txt");
    const { parts } = await stored([
      ...spellings.map((u) => file(u, "application/x-directory")),
      file(`${url("ten.txt")}?start=1&end=2`),
      file(`${url("ten.txt")}?start=1&end=2`),
      file(`${url("ten.txt")}?start=9&end=10`),
    ]);
    const listing = `<path>${dirPath}</path>\n<type>directory</type>\n<entries>\nb.txt\nsub/\n\n(2 entries)\n</entries>`;
    const content = (a: number, b: number, footer: string) =>
      `<path>${ten}</path>\n<type>file</type>\n<content>\n${a}: line ${a}\n${b}: line ${b}\n\n(${footer})\n</content>`;
    const ranges: Array<[number, number, string]> = [
      [1, 2, "Showing lines 1-2 of 10. Use offset=3 to continue."],
      [1, 2, "Showing lines 1-2 of 10. Use offset=3 to continue."],
      [9, 10, "End of file - total 10 lines"],
    ];
    expect(parts.map(shape)).toEqual([
      ...spellings.flatMap((u) => [
        { kind: "text", synthetic: true, text: call({ filePath: dirPath }) },
        { kind: "text", synthetic: true, text: listing },
        { kind: "file", mime: "application/x-directory", filename: "folder", url: u },
      ]),
      ...ranges.flatMap(([a, b, footer]) => [
        { kind: "text", synthetic: true, text: call({ filePath: ten, offset: a, limit: 2 }) },
        { kind: "text", synthetic: true, text: content(a, b, footer) },
        { kind: "file", mime: "text/plain", filename: "ten.txt", url: `${url("ten.txt")}?start=${a}&end=${b}` },
      ]),
    ]);
    expect(new Set(parts.map((p) => p.id)).size).toBe(parts.length);
  });

  it("reads ?start=3&end=5 of a 10-line file as lines 3-5", async () => {
    const filePath = path.join(t.dir, "ten.txt");
    const { parts } = await stored([file(`${url("ten.txt")}?start=3&end=5`)]);
    expect(partText(parts[0])).toBe(call({ filePath, offset: 3, limit: 3 }));
    expect(partText(parts[1])).toBe(
      `<path>${filePath}</path>\n<type>file</type>\n<content>\n3: line 3\n4: line 4\n5: line 5\n\n(Showing lines 3-5 of 10. Use offset=6 to continue.)\n</content>`,
    );
  });

  it("reads start=0 from line 1 and end=99 to the end of the file", async () => {
    const filePath = path.join(t.dir, "ten.txt");
    const { parts } = await stored([file(`${url("ten.txt")}?start=0`), file(`${url("ten.txt")}?end=99`)]);
    expect(partText(parts[0])).toBe(call({ filePath, offset: 1 }));
    expect(partText(parts[1])).toContain("1: line 1\n");
    expect(partText(parts[1])).toContain("10: line 10\n\n(End of file - total 10 lines)");
    expect(partText(parts[3])).toBe(call({ filePath, offset: 1, limit: 99 }));
    expect(partText(parts[4])).toContain("(End of file - total 10 lines)");
  });

  it("refuses start=8&end=4 with INVALID_ARGUMENT naming the url, writing nothing", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const error = await t.client
      .prompt({ sessionId, noReply: true, parts: [text("x"), file(`${url("ten.txt")}?start=8&end=4`)] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.InvalidArgument);
    expect((error as ConnectError).rawMessage).toContain("parts[1].file.url");
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
  });
});

describe("data: URLs", () => {
  it("decodes data:text/plain;charset=utf-8;base64,aGk=", async () => {
    const dataUrl = "data:text/plain;charset=utf-8;base64,aGk=";
    const { parts } = await stored([file(dataUrl, "text/plain", "hi.txt")]);
    expect(parts.map(shape)).toEqual([
      { kind: "text", synthetic: true, text: call({ filePath: "hi.txt" }) },
      { kind: "text", synthetic: true, text: "hi" },
      { kind: "file", mime: "text/plain", filename: "hi.txt", url: dataUrl },
    ]);
  });

  it("decodes base64 wrapped every 76 characters", async () => {
    const body = "The quick brown fox jumps over the lazy dog. ".repeat(20);
    const wrapped = Buffer.from(body)
      .toString("base64")
      .replace(/(.{76})/g, "$1\r\n");
    const { parts } = await stored([file(`data:text/plain;base64,${wrapped}`, "text/plain", "fox.txt")]);
    expect(partText(parts[1])).toBe(body);
  });

  it("decodes a data: URL of any text mime (markdown, JSON) like text/plain, keeping the declared mime", async () => {
    const markdown = `data:text/markdown;base64,${Buffer.from("# Title\n\nbody\n").toString("base64")}`;
    const json = "data:application/json,%7B%22a%22%3A1%7D";
    const { parts } = await stored([file(markdown, "text/markdown", "README.md"), file(json, "application/json", "a.json")]);
    expect(parts.map(shape)).toEqual([
      { kind: "text", synthetic: true, text: call({ filePath: "README.md" }) },
      { kind: "text", synthetic: true, text: "# Title\n\nbody\n" },
      { kind: "file", mime: "text/markdown", filename: "README.md", url: markdown },
      { kind: "text", synthetic: true, text: call({ filePath: "a.json" }) },
      { kind: "text", synthetic: true, text: '{"a":1}' },
      { kind: "file", mime: "application/json", filename: "a.json", url: json },
    ]);
  });

  it("keeps a data: URL of another mime as the file part only", async () => {
    const dataUrl = `data:image/png;base64,${PNG_1X1.toString("base64")}`;
    const { parts } = await stored([file(dataUrl, "image/png", "dot.png")]);
    expect(parts.map(shape)).toEqual([{ kind: "file", mime: "image/png", filename: "dot.png", url: dataUrl }]);
    // The declared mime decides, not the URL's: a zip sent as data:text/plain stays a file.
    const zip = `data:text/plain;base64,${Buffer.from("PK\u0003\u0004").toString("base64")}`;
    expect((await stored([file(zip, "application/zip", "a.zip")])).parts.map(shape)).toEqual([
      { kind: "file", mime: "application/zip", filename: "a.zip", url: zip },
    ]);
  });
});

describe("file names", () => {
  // A client that sends the path it sees as `filename` gets the file's name stored, whatever the kind.
  it("a filename given as a full path is stored as its basename for every kind of file", async () => {
    await writeFile(path.join(t.dir, "spec.pdf"), "%PDF-1.7\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n");
    await writeFile(path.join(t.dir, "pixel.png"), PNG_1X1);
    const named = (draft: ReturnType<typeof file>, filename: string) => ({
      kind: { case: "file" as const, value: { ...(draft.kind!.value as object), filename } },
    });
    const { parts } = await stored([
      named(file(url("spec.pdf"), "application/pdf"), "/home/me/docs/spec.pdf"),
      named(file(url("ten.txt")), "/home/me/ten.txt"),
      named(file(url("pixel.png"), "image/png"), "C:\\Users\\me\\pixel.png"),
      named(file(`${url("folder")}/`, "application/x-directory"), "/home/me/folder/"),
      named(file("data:text/plain;base64,aGk=", "text/plain"), "/tmp/notes/hi.txt"),
      named(file(`data:image/png;base64,${PNG_1X1.toString("base64")}`, "image/png"), "\\\\server\\share\\dot.png"),
      named(file("https://example.com/a/b.md", "text/markdown"), "/srv/files/b.md"),
      named(file(url("ten.txt")), "docs/ten.txt"),
    ]);
    // A relative name is kept: it names the file as the prompt text does (e.g. a reference's alias path).
    expect(parts.filter((p) => p.kind.case === "file").map((p) => shape(p).filename)).toEqual([
      "spec.pdf",
      "ten.txt",
      "pixel.png",
      "folder",
      "hi.txt",
      "dot.png",
      "b.md",
      "docs/ten.txt",
    ]);
  });
});
