import { writeFile } from "node:fs/promises";
import path from "node:path";
import sharp from "sharp";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import { startFakeAnthropic, type FakeAnthropic } from "../support/anthropic-server.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { NO_RETRY, compatibleProvider } from "../support/mock-models.js";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { startFakeResponses, type FakeResponses } from "../support/openai-responses-server.js";
import { text } from "../support/prompt.js";
import { assistantOf, storedMessages } from "../support/stored.js";

// What the model's own `read` returns besides text (an image, a PDF) reaches the model on the
// next step, through the real service and each provider package we ship, against local servers
// speaking their protocols: inside the tool result where the API takes media there (Anthropic
// Messages, OpenAI Responses), in a user message after the results where it takes only text
// (OpenAI-compatible chat completions), and as a notice to a model that does not accept it.

let t: TestLedger;
let claude: FakeAnthropic;
let openai: FakeResponses;
let local: FakeOpenAI;
let png: string;

const VISION = { modalities: { input: ["text", "image", "pdf"] } };
// A PDF as file-type sniffs it: the %PDF- header, then a body.
const PDF_BYTES = Buffer.from("%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n");
const PDF = PDF_BYTES.toString("base64");

beforeAll(async () => {
  [claude, openai, local] = await Promise.all([startFakeAnthropic(), startFakeResponses(), startFakeOpenAI()]);
  t = await startTestLedger({
    model: "claude/sonnet",
    provider: {
      claude: { npm: "@ai-sdk/anthropic", options: { baseURL: claude.url, apiKey: "test" }, models: { sonnet: VISION } },
      openai: { npm: "@ai-sdk/openai", options: { baseURL: openai.url, apiKey: "test" }, models: { "gpt-5": VISION } },
      local: compatibleProvider(local.url, { "qwen-vl": { modalities: { input: ["text", "image"] } }, qwen: {} }, "test"),
    },
    retry: NO_RETRY,
  });
  const bytes = await sharp({ create: { width: 4, height: 3, channels: 3, background: "#c00" } })
    .png()
    .toBuffer();
  png = bytes.toString("base64");
  await writeFile(path.join(t.dir, "logo.png"), bytes);
  await writeFile(path.join(t.dir, "spec.pdf"), PDF_BYTES);
});
afterEach(() => {
  claude.reset();
  openai.reset();
  local.reset();
});
afterAll(async () => {
  await t?.close();
  await Promise.all([claude?.close(), openai?.close(), local?.close()]);
});

/** An OpenAI-compatible reply calling `read` on logo.png. */
const READ_LOGO = {
  kind: "stream" as const,
  chunks: [{ toolCall: { id: "call_1", name: "read", arguments: JSON.stringify({ filePath: "logo.png" }) } }],
};

async function ask(model: { providerId: string; modelId: string }) {
  const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  const res = await t.client.prompt({ sessionId, model, parts: [text("what is in logo.png?")] });
  expect(assistantOf(res.message)?.error).toBeUndefined();
  return storedMessages(t.client, sessionId);
}

/** The completed read call's stored attachments. */
function attachmentsOf(parts: Part[]) {
  const tool = parts.find((p) => p.kind.case === "tool")!;
  const status = tool.kind.case === "tool" ? tool.kind.value.state?.status : undefined;
  expect(status?.case).toBe("completed");
  return status?.case === "completed" ? status.value.attachments.map(({ mime, filename, url }) => ({ mime, filename, url })) : [];
}

describe("a tool's images and PDFs reach the model on the next step", () => {
  it("Anthropic: inside the tool_result, as image and document blocks", async () => {
    const before = claude.requests.length;
    claude.push(
      { kind: "stream", blocks: [{ toolUse: { id: "toolu_1", name: "read", input: { filePath: "logo.png" } } }] },
      { kind: "stream", blocks: [{ toolUse: { id: "toolu_2", name: "read", input: { filePath: "spec.pdf" } } }] },
      { kind: "stream", blocks: [{ text: "A red rectangle and a PDF." }] },
    );
    const messages = await ask({ providerId: "claude", modelId: "sonnet" });
    expect(claude.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined, undefined]);
    expect(attachmentsOf(messages[1]!.parts)).toEqual([{ mime: "image/png", filename: "logo.png", url: `data:image/png;base64,${png}` }]);
    expect(attachmentsOf(messages[2]!.parts)).toEqual([
      { mime: "application/pdf", filename: "spec.pdf", url: `data:application/pdf;base64,${PDF}` },
    ]);
    const sent = claude.requests[before + 2]!.body.messages as Array<{ role: string; content: Array<Record<string, unknown>> }>;
    const results = sent.flatMap((m) => m.content.filter((b) => b.type === "tool_result"));
    expect(results).toEqual([
      {
        type: "tool_result",
        tool_use_id: "toolu_1",
        content: [
          { type: "text", text: "Image read successfully" },
          { type: "image", source: { type: "base64", media_type: "image/png", data: png } },
        ],
      },
      {
        type: "tool_result",
        tool_use_id: "toolu_2",
        content: [
          { type: "text", text: "PDF read successfully" },
          { type: "document", source: { type: "base64", media_type: "application/pdf", data: PDF } },
        ],
      },
    ]);
  });

  it("OpenAI Responses: inside the function_call_output, as input_image", async () => {
    const before = openai.requests.length;
    openai.push(
      { kind: "stream", items: [{ functionCall: { callId: "call_1", name: "read", arguments: { filePath: "logo.png" } } }] },
      { kind: "stream", items: [{ text: "A red rectangle." }] },
    );
    await ask({ providerId: "openai", modelId: "gpt-5" });
    expect(openai.requests.slice(before).map((r) => r.rejected)).toEqual([undefined, undefined]);
    const input = openai.requests[before + 1]!.body.input as Array<Record<string, unknown>>;
    expect(input.find((e) => e.type === "function_call_output")).toEqual({
      type: "function_call_output",
      call_id: "call_1",
      output: [
        { type: "input_text", text: "Image read successfully" },
        { type: "input_image", image_url: `data:image/png;base64,${png}` },
      ],
    });
  });

  it("OpenAI-compatible: the tool message keeps its text, a user message after it carries the image", async () => {
    const before = local.requests.length;
    local.push(READ_LOGO, { kind: "stream", chunks: [{ text: "A red rectangle." }] });
    await ask({ providerId: "local", modelId: "qwen-vl" });
    const sent = local.requests[before + 1]!.body.messages as Array<Record<string, unknown>>;
    expect(sent.slice(-2)).toEqual([
      { role: "tool", tool_call_id: "call_1", content: "Image read successfully" },
      {
        role: "user",
        content: [
          { type: "text", text: "Attached image(s) from tool result:" },
          { type: "image_url", image_url: { url: `data:image/png;base64,${png}` } },
        ],
      },
    ]);
  });

  it("a model that takes no images gets a notice in the result's text and no image", async () => {
    const before = local.requests.length;
    local.push(READ_LOGO, { kind: "stream", chunks: [{ text: "I cannot see it." }] });
    await ask({ providerId: "local", modelId: "qwen" });
    const sent = local.requests[before + 1]!.body.messages as Array<Record<string, unknown>>;
    expect(sent.slice(-1)).toEqual([
      {
        role: "tool",
        tool_call_id: "call_1",
        content:
          "Image read successfully\n\n[Attached image logo.png (image/png) cannot be read by this model: it does not accept image input]",
      },
    ]);
  });
});
