import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import type { LanguageModelV3 } from "@ai-sdk/provider";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectError } from "../support/errors.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { mockResolver, scriptedModel, textReply, toolCallReply, type ModelKey } from "../support/mock-models.js";
import { file, shape, text } from "../support/prompt.js";

// A project reached through a symlink (macOS: /tmp → /private/tmp; a project directory that is
// itself a link): the client names files by the path it sees, the server stores the session
// directory resolved, and confinement compares canonical paths on both sides.

let base: string;
let real: string; // "<base>/realproj dir"
let link: string; // "<base>/linkproj" → real
let outside: string;
const models: Partial<Record<ModelKey, LanguageModelV3>> = {};
let t: TestLedger;

beforeAll(async () => {
  base = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-link-")));
  real = path.join(base, "realproj dir");
  link = path.join(base, "linkproj");
  outside = path.join(base, "elsewhere");
  await mkdir(path.join(real, "src"), { recursive: true });
  await mkdir(outside);
  await writeFile(path.join(real, "src", "a.txt"), "alpha\n");
  await writeFile(path.join(outside, "secret.txt"), "secret\n");
  await symlink(real, link);
  await symlink(outside, path.join(real, "src", "out"));
  await mkdir(path.join(base, "docs real"));
  await writeFile(path.join(base, "docs real", "guide.md"), "# guide\n");
  await symlink(path.join(base, "docs real"), path.join(base, "docs"));
  t = await startTestLedger({ model: "mock/model", roots: [path.join(base, "docs")] }, { models: mockResolver(models) });
});
afterAll(async () => {
  await t?.close();
  await rm(base, { recursive: true, force: true });
});

const read = (filePath: string) => `Called the Read tool with the following input: ${JSON.stringify({ filePath })}`;

describe("a session directory reached through a symlink", () => {
  it("is stored resolved, and its files are read by either spelling (the issue's example)", async () => {
    const { session } = await t.client.createSession({ directory: link });
    expect(session!.directory).toBe(real);
    const viaLink = `${pathToFileURL(link).href}/src/a.txt`;
    const viaReal = pathToFileURL(path.join(real, "src", "a.txt")).href;
    expect(viaReal).toContain("realproj%20dir");
    const res = await t.client.prompt({ sessionId: session!.id, noReply: true, parts: [text("look"), file(viaLink), file(viaReal)] });
    const target = path.join(real, "src", "a.txt");
    const body = `<path>${target}</path>\n<type>file</type>\n<content>\n1: alpha\n\n(End of file - total 1 lines)\n</content>`;
    expect(res.message!.parts.map(shape)).toEqual([
      { kind: "text", synthetic: false, text: "look" },
      { kind: "text", synthetic: true, text: read(target) },
      { kind: "text", synthetic: true, text: body },
      { kind: "file", mime: "text/plain", filename: "a.txt", url: viaLink },
      { kind: "text", synthetic: true, text: read(target) },
      { kind: "text", synthetic: true, text: body },
      { kind: "file", mime: "text/plain", filename: "a.txt", url: viaReal },
    ]);
  });

  it("still refuses an escape through a link inside the project, by either spelling", async () => {
    const { session } = await t.client.createSession({ directory: link });
    for (const dir of [link, real]) {
      const error = await connectError(
        t.client.prompt({
          sessionId: session!.id,
          noReply: true,
          parts: [text("x"), file(pathToFileURL(path.join(dir, "src", "out", "secret.txt")).href)],
        }),
      );
      expect(error.code).toBe(Code.PermissionDenied);
    }
    const plain = await connectError(
      t.client.prompt({
        sessionId: session!.id,
        noReply: true,
        parts: [text("x"), file(pathToFileURL(path.join(outside, "secret.txt")).href)],
      }),
    );
    expect([plain.code, plain.rawMessage]).toEqual([
      Code.PermissionDenied,
      `parts[1].file.url: ${path.join(outside, "secret.txt")} is outside the session directory and the configured roots`,
    ]);
  });

  it("a configured root that is a link accepts both spellings of its files", async () => {
    const { session } = await t.client.createSession({ directory: link });
    const res = await t.client.prompt({
      sessionId: session!.id,
      noReply: true,
      parts: [
        text("docs"),
        file(pathToFileURL(path.join(base, "docs", "guide.md")).href),
        file(pathToFileURL(path.join(base, "docs real", "guide.md")).href),
      ],
    });
    expect(res.message!.parts.filter((p) => p.kind.case === "text" && p.kind.value.synthetic).map((p) => shape(p).text)).toEqual([
      read(path.join(base, "docs real", "guide.md")),
      expect.stringContaining("1: # guide"),
      read(path.join(base, "docs real", "guide.md")),
      expect.stringContaining("1: # guide"),
    ]);
  });

  it("the model's read tool accepts the link spelling too, and refuses the escape", async () => {
    models["mock/model"] = scriptedModel([
      toolCallReply("call_1", "read", { filePath: path.join(link, "src", "a.txt") }),
      toolCallReply("call_2", "read", { filePath: path.join(link, "src", "out", "secret.txt") }),
      textReply("done"),
    ]);
    const { session } = await t.client.createSession({ directory: link });
    await t.client.prompt({ sessionId: session!.id, parts: [text("read it")] });
    const { messages } = await t.client.listMessages({ sessionId: session!.id });
    const tools = messages.flatMap((m) => m.parts).flatMap((p) => (p.kind.case === "tool" ? [p.kind.value.state?.status] : []));
    expect(tools.map((s) => s?.case)).toEqual(["completed", "error"]);
    expect(tools[0]?.case === "completed" && tools[0].value.output).toContain("1: alpha");
    expect(tools[1]?.case === "error" && tools[1].value.error).toContain("is outside the session directory and the configured roots");
  });
});
