import { mkdir, mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { allowedRoots, buildConfig, configFileSchema } from "../../src/config/config.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { file, promptOnce, shape, text } from "../support/prompt.js";

// Configured references (`reference: {alias: path}`, OpenCode `referenceContextFromFilePart`):
// a `file:` draft inside one is readable and gets a leading synthetic note with metadata.reference.

const HINT =
  "For targeted context, inspect the reference path directly with Read, Glob, and Grep. For broader research, call the task tool with subagent explore and include this reference path.";

let t: TestLedger;
let refDir: string;
let outside: string;
beforeAll(async () => {
  refDir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-ref-")));
  outside = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-outside-")));
  await mkdir(path.join(refDir, "guide"));
  await writeFile(path.join(refDir, "guide", "intro.md"), "# Intro\n");
  await writeFile(path.join(outside, "secret.txt"), "no\n");
  t = await startTestLedger({ reference: { docs: refDir } });
});
afterAll(async () => {
  await t?.close();
  await rm(refDir, { recursive: true, force: true });
  await rm(outside, { recursive: true, force: true });
});

const call = (input: Record<string, unknown>) => `Called the Read tool with the following input: ${JSON.stringify(input)}`;

describe("configured references", () => {
  it("reads a file inside a reference outside the session directory, with a leading reference note", async () => {
    const filePath = path.join(refDir, "guide", "intro.md");
    const { sessionId, message } = await promptOnce(t.client, t.dir, [
      text("look"),
      file(pathToFileURL(filePath).href, "text/plain", "docs/guide/intro.md"),
    ]);
    const parts = message.parts.slice(1);
    expect(parts.map(shape)).toEqual([
      {
        kind: "text",
        synthetic: true,
        text: [
          "Referenced configured reference @docs/guide/intro.md.",
          "Kind: local directory",
          `Reference root: ${refDir}`,
          `Resolved path: ${filePath}`,
          HINT,
        ].join("\n"),
      },
      { kind: "text", synthetic: true, text: call({ filePath }) },
      {
        kind: "text",
        synthetic: true,
        text: `<path>${filePath}</path>\n<type>file</type>\n<content>\n1: # Intro\n\n(End of file - total 1 lines)\n</content>`,
      },
      { kind: "file", mime: "text/plain", filename: "docs/guide/intro.md", url: pathToFileURL(filePath).href },
    ]);
    const note = parts[0]!;
    expect(note.kind.case === "text" && note.kind.value.metadata).toEqual({
      reference: {
        name: "docs",
        kind: "local",
        path: refDir,
        target: "guide/intro.md",
        targetPath: filePath,
        source: { value: "@docs/guide/intro.md", start: 0, end: "@docs/guide/intro.md".length },
      },
    });
    const listed = await t.client.listMessages({ sessionId });
    expect(listed.messages[0]).toEqual(message);
  });

  it("adds the note for a path inside a reference even without an alias filename", async () => {
    const filePath = path.join(refDir, "guide", "intro.md");
    const { message } = await promptOnce(t.client, t.dir, [file(pathToFileURL(filePath).href)]);
    expect(message.parts.map((p) => p.kind.case)).toEqual(["text", "text", "text", "file"]);
    const note = message.parts[0]!;
    expect(note.kind.case === "text" && note.kind.value.text).toMatch(/^Referenced configured reference @docs\/guide\/intro\.md\.\n/);
    expect(note.kind.case === "text" && note.kind.value.synthetic).toBe(true);
  });

  it("adds no note for a file in the session directory", async () => {
    await writeFile(path.join(t.dir, "local.txt"), "here\n");
    const { message } = await promptOnce(t.client, t.dir, [
      file(pathToFileURL(path.join(t.dir, "local.txt")).href, "text/plain", "docs/local.txt"),
    ]);
    expect(message.parts.map((p) => p.kind.case)).toEqual(["text", "text", "file"]);
    expect(message.parts[0]!.kind.case === "text" && message.parts[0]!.kind.value.text).toMatch(/^Called the Read tool/);
  });

  it("still refuses a file outside the session directory and every reference", async () => {
    const error = await promptOnce(t.client, t.dir, [
      file(pathToFileURL(path.join(outside, "secret.txt")).href, "text/plain", "docs/secret.txt"),
    ]).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(error?.code).toBe(Code.PermissionDenied);
  });
});

describe("reference config", () => {
  it("resolves reference paths against the config directory and adds them to the allowed roots", () => {
    const config = buildConfig(
      configFileSchema.parse({ roots: ["shared"], reference: { docs: "../docs", abs: "/srv/ref" } }),
      undefined,
      "/etc/ledger",
    );
    expect(config.references).toEqual({ docs: "/etc/docs", abs: "/srv/ref" });
    expect(allowedRoots(config)).toEqual(["/etc/ledger/shared", "/etc/docs", "/srv/ref"]);
  });

  it("refuses an alias with a slash", () => {
    expect(() => configFileSchema.parse({ reference: { "a/b": "/x" } })).toThrow();
  });
});
