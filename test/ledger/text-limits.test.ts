import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { connectError } from "../support/errors.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { shape, text, type Draft } from "../support/prompt.js";
import { storedEvents } from "../support/stored.js";

// limits.text_part_bytes bounds every text a prompt stores, not only text drafts: a subtask's
// prompt, description and command, and the prompt's `system` (a trial found them stored at any
// size up to request_bytes, 2026-12-02).

const MAX = 100;
let t: TestLedger;
let sessionId: string;
beforeAll(async () => {
  t = await startTestLedger({
    limits: { text_part_bytes: MAX },
    command: { count: { template: "Count $ARGUMENTS", description: "count", agent: "explore", subtask: true } },
  });
  sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
});
afterAll(() => t?.close());

const subtask = (fields: { prompt?: string; description?: string; command?: string }): Draft => ({
  kind: { case: "subtask", value: { prompt: "p", agent: "explore", ...fields } },
});

/** The call must fail with RESOURCE_EXHAUSTED on `field` (limit text_part_bytes, `actual` bytes), storing nothing. */
async function overLimit(call: () => Promise<unknown>, field: string, actual: number): Promise<void> {
  const before = await storedEvents(t.ledger.deps.db, sessionId);
  const error = await connectError(call());
  expect([error.code, error.rawMessage]).toEqual([
    Code.ResourceExhausted,
    `${field}: ${actual} bytes exceeds limit text_part_bytes (${MAX} bytes)`,
  ]);
  expect(error.findDetails(ErrorInfoSchema)[0]?.metadata).toMatchObject({ field, limit: "text_part_bytes" });
  expect(await storedEvents(t.ledger.deps.db, sessionId)).toEqual(before);
}

describe("text_part_bytes", () => {
  const at = "é".repeat(MAX / 2); // MAX bytes of UTF-8
  const over = `${at}x`;

  it("stores texts of exactly the limit: a text draft, a subtask's prompt, description and command, and system", async () => {
    const res = await t.client.prompt({
      sessionId,
      noReply: true,
      system: at,
      parts: [text(at), subtask({ prompt: at, description: at, command: at })],
    });
    expect(res.message!.parts.map(shape)).toEqual([
      { kind: "text", synthetic: false, text: at },
      { kind: "subtask", agent: "explore", prompt: at },
    ]);
    const part = res.message!.parts[1]!.kind;
    expect(part.case === "subtask" && [part.value.description, part.value.command]).toEqual([at, at]);
    const user = res.message!.message!.kind;
    expect(user.case === "user" && user.value.system).toBe(at);
  });

  it.each([
    ["a text draft", [text(over)], "parts[0].text.text"],
    ["a subtask's prompt", [text("a"), subtask({ prompt: over })], "parts[1].subtask.prompt"],
    ["a subtask's description", [subtask({ description: over })], "parts[0].subtask.description"],
    ["a subtask's command", [subtask({ command: over })], "parts[0].subtask.command"],
  ])("refuses %s over it, naming the field; nothing stored", async (_name, parts, field) => {
    await overLimit(() => t.client.prompt({ sessionId, noReply: true, parts }), field, MAX + 1);
  });

  it("refuses a system over it (Prompt, PromptAsync), naming system; nothing stored", async () => {
    await overLimit(() => t.client.prompt({ sessionId, noReply: true, system: over, parts: [text("a")] }), "system", MAX + 1);
    await overLimit(() => t.client.promptAsync({ sessionId, noReply: true, system: over, parts: [text("a")] }), "system", MAX + 1);
  });

  it("refuses a subtask Command whose expanded template is over it, naming the template's draft", async () => {
    const args = "x".repeat(MAX);
    await overLimit(
      () => t.client.command({ sessionId, command: "count", arguments: args, noReply: true }),
      "command.template.parts[0].subtask.prompt",
      Buffer.byteLength(`Count ${args}`),
    );
  });
});
