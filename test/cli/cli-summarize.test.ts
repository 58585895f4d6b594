import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../support/cli.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";

// `ledger summarize` (issue 16) in-process against a running server (--url) answered by the fake model.

let t: FakeModelLedger;

beforeAll(async () => {
  t = await startFakeModelLedger({ retry: { attempts: 0 } });
});
afterAll(async () => {
  await t?.close();
});

const place = () => ({ cwd: t.dir, env: { PATH: process.env.PATH, HOME: t.dir } });

describe("ledger summarize", () => {
  it("prints the summary message, or one line of JSON with --json; a malformed --model is a usage error", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    t.fake.push({ kind: "stream", chunks: [{ text: "answer" }] }, { kind: "stream", chunks: [{ text: "THE NOTES" }] });
    await t.client.prompt({ sessionId, parts: [text("question")] });
    const run = await runCli(["summarize", sessionId, "--url", t.ledger.url], place());
    expect(run).toMatchObject({ code: 0, stderr: "" });
    expect(run.stdout).toContain("THE NOTES");

    t.fake.push({ kind: "stream", chunks: [{ text: "NOTES TWO" }] });
    const json = await runCli(["summarize", sessionId, "--url", t.ledger.url, "--model", "fake/m", "--json"], place());
    expect(json.code).toBe(0);
    const message = JSON.parse(json.stdout) as { message: { assistant: { summary: boolean } }; parts: Array<{ text?: { text: string } }> };
    expect(message.message.assistant.summary).toBe(true);
    expect(message.parts.map((p) => p.text?.text).filter(Boolean)).toEqual(["NOTES TWO"]);

    const bad = await runCli(["summarize", sessionId, "--url", t.ledger.url, "--model", "nomodel"], place());
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("--model");
  });
});
