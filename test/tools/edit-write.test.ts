import { execFileSync } from "node:child_process";
import { mkdir, readFile, symlink } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeConfined } from "../../src/files/write-file.js";
import { editTool } from "../../src/tools/edit.js";
import { decide, type Rule } from "../../src/tools/permission.js";
import type { ToolAsk, ToolContext } from "../../src/tools/tool-context.js";
import { writeTool } from "../../src/tools/write.js";
import { toolTree, type ToolTree } from "../support/tool-tree.js";

let t: ToolTree;

beforeAll(async () => {
  t = await toolTree("edit-write-");
});
afterAll(() => t.cleanup());

/** A context whose asks wait until the test answers them, in the order they were asked. */
function askingContext(): { ctx: ToolContext; asks: { request: ToolAsk; allow(): void }[] } {
  const asks: { request: ToolAsk; allow(): void }[] = [];
  const ctx: ToolContext = {
    ...t.ctx,
    ask: (request) => new Promise<void>((allow) => asks.push({ request, allow })),
  };
  return { ctx, asks };
}

/** Waits until `asks` holds `n` requests (or fails after 2 s). */
async function asked(asks: unknown[], n: number): Promise<void> {
  for (let i = 0; i < 200 && asks.length < n; i++) await new Promise((r) => setTimeout(r, 10));
  expect(asks.length).toBe(n);
}

describe("edit and write on one file in one step", () => {
  it("three edits of one file started at once all apply, one after the other", async () => {
    const path = await t.write("race.txt", "line1\nline2\nline3\n");
    const results = await Promise.all([
      editTool({ filePath: "race.txt", oldString: "line1", newString: "ONE" }, t.ctx),
      editTool({ filePath: "race.txt", oldString: "line2", newString: "TWO" }, t.ctx),
      editTool({ filePath: "race.txt", oldString: "line3", newString: "THREE" }, t.ctx),
    ]);
    expect(results.map((r) => r.output)).toEqual(Array(3).fill("Edit applied successfully."));
    expect(await readFile(path, "utf8")).toBe("ONE\nTWO\nTHREE\n");
  });

  it("two edits waiting for permission: the second is asked only after the first is written, and both stay", async () => {
    const path = await t.write("ab.txt", "alpha\nbeta\n");
    const { ctx, asks } = askingContext();
    const first = editTool({ filePath: "ab.txt", oldString: "alpha", newString: "ALPHA" }, ctx);
    const second = editTool({ filePath: "ab.txt", oldString: "beta", newString: "BETA" }, ctx);
    // Whichever reached the file's lock first is asked first (their paths resolve concurrently);
    // the other is asked only once that one is written, with a diff made from what it wrote.
    await asked(asks, 1);
    const firstIsAlpha = String(asks[0]!.request.metadata?.diff).includes("+ALPHA");
    asks[0]!.allow();
    await (firstIsAlpha ? first : second);
    await asked(asks, 2);
    expect(asks[1]!.request.metadata).toMatchObject({
      diff: expect.stringMatching(firstIsAlpha ? / ALPHA\n-beta\n\+BETA/ : /-alpha\n\+ALPHA\n BETA/),
    });
    asks[1]!.allow();
    await Promise.all([first, second]);
    expect(await readFile(path, "utf8")).toBe("ALPHA\nBETA\n");
  });

  it("a call waiting for the file's lock gives up at once on abort; the calls after it keep their order", async () => {
    const path = await t.write("queue.txt", "a\nb\nc\n");
    const { ctx, asks } = askingContext();
    const holder = editTool({ filePath: "queue.txt", oldString: "a", newString: "A" }, ctx);
    await asked(asks, 1);
    const controller = new AbortController();
    const waiting = editTool({ filePath: "queue.txt", oldString: "b", newString: "B" }, { ...ctx, signal: controller.signal });
    const after = editTool({ filePath: "queue.txt", oldString: "c", newString: "C" }, ctx);
    const settled = waiting.then(
      () => "resolved",
      (error: unknown) => (error instanceof Error ? error.message : String(error)),
    );
    controller.abort(new Error("the session was aborted"));
    // Rejected while the holder still waits for its answer, without asking anything.
    expect(await settled).toBe("the session was aborted");
    expect(asks).toHaveLength(1);
    asks[0]!.allow();
    await holder;
    await asked(asks, 2);
    expect(asks[1]!.request.metadata).toMatchObject({ diff: expect.stringContaining("+C") });
    asks[1]!.allow();
    await after;
    expect(await readFile(path, "utf8")).toBe("A\nb\nC\n");
  });

  it("two writes creating one new file at once both succeed; the file holds the one that came second", async () => {
    const results = await Promise.all([
      writeTool({ filePath: "new/one.txt", content: "first\n" }, t.ctx),
      writeTool({ filePath: "new/one.txt", content: "second\n" }, t.ctx),
    ]);
    // One after the other, in whichever order they reached the file's lock: one made the file,
    // the other found it and replaced it, and the file holds that one's content.
    expect(results.map((r) => r.output)).toEqual(["Wrote file successfully.", "Wrote file successfully."]);
    expect(results.map((r) => r.metadata?.exists).sort()).toEqual([false, true]);
    const later = results[0]!.metadata?.exists ? "first\n" : "second\n";
    expect(await readFile(join(t.session, "new/one.txt"), "utf8")).toBe(later);
  });
});

describe("permission patterns through a symlink", () => {
  const rules: Rule[] = [
    { permission: "edit", pattern: "*", action: "allow" },
    { permission: "edit", pattern: "secret/*", action: "deny" },
  ];

  it("an edit or write through `pub -> secret` asks with both spellings, so a deny rule on secret/* applies", async () => {
    await t.write("secret/key.txt", "k1\n");
    await symlink("secret", join(t.session, "pub"));
    const { ctx, asks } = askingContext();
    const edit = editTool({ filePath: "pub/key.txt", oldString: "k1", newString: "k2" }, ctx);
    await asked(asks, 1);
    expect(asks[0]!.request.patterns).toEqual(["pub/key.txt", "secret/key.txt"]);
    asks[0]!.allow();
    await edit;
    const write = writeTool({ filePath: join(t.session, "pub/deep/new.txt"), content: "n\n" }, ctx);
    await asked(asks, 2);
    expect(asks[1]!.request.patterns).toEqual(["pub/deep/new.txt", "secret/deep/new.txt"]);
    asks[1]!.allow();
    await write;
    expect(decide(rules, "edit", asks[0]!.request.patterns)).toBe("deny");
    expect(decide(rules, "edit", asks[1]!.request.patterns)).toBe("deny");
    // A path without a link asks with one pattern, as before.
    await mkdir(join(t.session, "plain"));
    const plain = writeTool({ filePath: "plain/a.txt", content: "a\n" }, ctx);
    await asked(asks, 3);
    expect(asks[2]!.request.patterns).toEqual(["plain/a.txt"]);
    asks[2]!.allow();
    await plain;
  });
});

describe("writeConfined", () => {
  it("two writers creating one name at once (no lock): both succeed, the second overwrites and says the file existed", async () => {
    const path = join(t.session, "racy", "new.txt");
    const results = await Promise.all([writeConfined("filePath", path, "one\n"), writeConfined("filePath", path, "two\n")]);
    expect(results.map((r) => r.existed).sort()).toEqual([false, true]);
    expect(["one\n", "two\n"]).toContain(await readFile(path, "utf8"));
  });

  it("refuses a FIFO at the name without blocking", async () => {
    const path = join(t.session, "pipe");
    execFileSync("mkfifo", [path]);
    await expect(writeConfined("filePath", path, "x")).rejects.toThrow("is not a regular file");
  });
});

describe("the write tool's permission diff", () => {
  it("shows a replaced binary file as a note, never as a new file", async () => {
    await t.write("old.bin", Buffer.from([0, 1, 2, 3, 0]));
    await t.write("text.dat", "hello\n");
    const { ctx, asks } = askingContext();
    const binary = writeTool({ filePath: "old.bin", content: "new\n" }, ctx);
    await asked(asks, 1);
    expect(asks[0]!.request.metadata?.diff).toContain("-(a binary or non-UTF-8 file of 5 bytes)\n+new");
    asks[0]!.allow();
    expect((await binary).metadata?.exists).toBe(true);
    const text = writeTool({ filePath: "text.dat", content: "bye\n" }, ctx);
    await asked(asks, 2);
    expect(asks[1]!.request.metadata?.diff).toContain("-hello\n+bye");
    asks[1]!.allow();
    await text;
  });
});

describe("edit refuses what it would corrupt", () => {
  it("a binary file and a windows-1252 file are refused and left byte for byte; a UTF-8 BOM is kept", async () => {
    const binary = Buffer.from([0x41, 0x00, 0x01, 0x02, 0x41, 0x00, 0xff, 0xfe, 0x41]);
    const bin = await t.write("blob.dat", binary);
    await expect(editTool({ filePath: "blob.dat", oldString: "A", newString: "B", replaceAll: true }, t.ctx)).rejects.toThrow(
      `Cannot edit binary file: ${bin}`,
    );
    expect(await readFile(bin)).toEqual(binary);

    // By content, whatever the name: NUL bytes in a .txt are refused, a text model.obj is edited.
    const nul = await t.write("nul.txt", Buffer.from("A\0B\0", "latin1"));
    await expect(editTool({ filePath: "nul.txt", oldString: "A", newString: "B" }, t.ctx)).rejects.toThrow(
      `Cannot edit binary file: ${nul}`,
    );
    const obj = await t.write("model.obj", "v 0 0 0\n");
    await editTool({ filePath: "model.obj", oldString: "v 0", newString: "v 1" }, t.ctx);
    expect(await readFile(obj, "utf8")).toBe("v 1 0 0\n");

    const latin = Buffer.from("caf\xe9 hello\n", "latin1");
    const lat = await t.write("latin1.txt", latin);
    await expect(editTool({ filePath: "latin1.txt", oldString: "hello", newString: "bye" }, t.ctx)).rejects.toThrow(
      `Cannot edit ${lat}: it is not UTF-8 text (the edit tool writes UTF-8, which would change its other bytes)`,
    );
    expect(await readFile(lat)).toEqual(latin);

    const bom = await t.write("bom.txt", Buffer.from("\ufeffcafé hello\n", "utf8"));
    await editTool({ filePath: "bom.txt", oldString: "hello", newString: "bye" }, t.ctx);
    expect(await readFile(bom)).toEqual(Buffer.from("\ufeffcafé bye\n", "utf8"));
  });
});
