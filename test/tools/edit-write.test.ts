import { mkdir, readFile, symlink } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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
    await asked(asks, 1);
    expect(asks[0]!.request.metadata).toMatchObject({ diff: expect.stringContaining("+ALPHA") });
    asks[0]!.allow();
    await first;
    await asked(asks, 2);
    // The second diff is made from the file the first wrote.
    expect(asks[1]!.request.metadata).toMatchObject({ diff: expect.stringMatching(/ ALPHA\n-beta\n\+BETA/) });
    asks[1]!.allow();
    await second;
    expect(await readFile(path, "utf8")).toBe("ALPHA\nBETA\n");
  });

  it("two writes creating one new file at once both succeed; the file holds the later one's content", async () => {
    const results = await Promise.all([
      writeTool({ filePath: "new/one.txt", content: "first\n" }, t.ctx),
      writeTool({ filePath: "new/one.txt", content: "second\n" }, t.ctx),
    ]);
    expect(results.map((r) => [r.output, r.metadata?.exists])).toEqual([
      ["Wrote file successfully.", false],
      ["Wrote file successfully.", true],
    ]);
    expect(await readFile(join(t.session, "new/one.txt"), "utf8")).toBe("second\n");
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

describe("edit refuses what it would corrupt", () => {
  it("a binary file and a windows-1252 file are refused and left byte for byte; a UTF-8 BOM is kept", async () => {
    const binary = Buffer.from([0x41, 0x00, 0x01, 0x02, 0x41, 0x00, 0xff, 0xfe, 0x41]);
    const bin = await t.write("blob.dat", binary);
    await expect(editTool({ filePath: "blob.dat", oldString: "A", newString: "B", replaceAll: true }, t.ctx)).rejects.toThrow(
      `Cannot edit binary file: ${bin}`,
    );
    expect(await readFile(bin)).toEqual(binary);

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
