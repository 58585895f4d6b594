/**
 * A scripted, loopback-only fake of the Anthropic Messages API (`POST {url}/messages`,
 * `stream: true`), for testing `@ai-sdk/anthropic` without network access. Each request consumes
 * the next queued {@link AnthropicReply} (a 500 when none is queued).
 *
 * It enforces the rules of the real API on every request and answers a broken history the way
 * Anthropic does (400 `{"type":"error","error":{"type":"invalid_request_error","message":...}}`):
 * - every message has non-empty content, and text blocks are non-empty;
 * - each `tool_use` of an assistant message has a `tool_result` in the next message, and each
 *   `tool_result` answers a `tool_use` of the previous message;
 * - a `thinking` block carries the `signature` this server issued for exactly that text; a
 *   `redacted_thinking` block carries `data` this server issued, verbatim;
 * - with `thinking` enabled, when the last message carries tool results (the request continues a
 *   tool loop), the first assistant message after the last plain user message starts with a
 *   `thinking` or `redacted_thinking` block ("a final `assistant` message must start with a
 *   thinking block").
 *
 * Wire format (what `@ai-sdk/anthropic@3.0.140` parses): `message_start`, per block
 * `content_block_start` / `content_block_delta` (`thinking_delta` then one `signature_delta`,
 * `text_delta`, `input_json_delta` in two pieces) / `content_block_stop`, `message_delta` with the
 * stop reason and usage, `message_stop`; each as `event: <type>` + `data: <JSON>`.
 */
import { createHmac, randomBytes } from "node:crypto";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import { listenLoopback, openSse, readJsonObject, sendJson, type SseWriter } from "./fake-http.js";

/** One content block of a scripted reply, or a way the stream stops early. */
export type AnthropicBlock =
  /** A thinking block; the server signs it. `cut`: stop after the text, before the signature, and hang. */
  | { thinking: string; cut?: boolean }
  /** A `redacted_thinking` block with opaque `data` the server issues. */
  | { redacted: true }
  | { text: string }
  | { toolUse: { id: string; name: string; input: Record<string, unknown> } }
  /** Stop sending and keep the connection open until the client goes away. */
  | { hang: true }
  /** A mid-stream `error` event (e.g. `overloaded_error`), then the stream ends. */
  | { error: { type: string; message: string } };

/** What the fake answers to one request. */
export type AnthropicReply =
  /** `delayMs`: wait between SSE events. */
  | { kind: "stream"; blocks: AnthropicBlock[]; usage?: { input_tokens: number; output_tokens: number }; delayMs?: number }
  | { kind: "error"; status: number; type: string; message: string };

/** One request the fake received. */
export interface AnthropicRequest {
  body: Record<string, unknown>;
  headers: IncomingHttpHeaders;
  /** The 400 message when the request broke a rule, else undefined. */
  rejected?: string;
}

/** A running fake; see {@link startFakeAnthropic}. */
export interface FakeAnthropic {
  /** Base URL for `createAnthropic({ baseURL })`: `http://127.0.0.1:PORT/v1`. */
  url: string;
  requests: AnthropicRequest[];
  /** Queues replies, one per request in order. */
  push(...replies: AnthropicReply[]): void;
  /** Drops queued replies (so a failed test's leftovers never answer the next test). */
  reset(): void;
  /** The signature this server issues for a thinking text. */
  signature(thinking: string): string;
  /** `data` of every redacted_thinking block issued, in order. */
  redacted: string[];
  close(): Promise<void>;
}

type Block = { type: string; [key: string]: unknown };
type Message = { role: string; content: string | Block[] };

/** Starts the fake on 127.0.0.1 with an ephemeral port. */
export async function startFakeAnthropic(): Promise<FakeAnthropic> {
  const secret = randomBytes(16);
  const queue: AnthropicReply[] = [];
  const requests: AnthropicRequest[] = [];
  const redacted: string[] = [];
  let messages = 0;
  const signature = (thinking: string) => `sig_${createHmac("sha256", secret).update(thinking).digest("base64url")}`;

  const server = await listenLoopback(async (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== "POST" || !(req.url ?? "").split("?")[0]!.endsWith("/messages")) {
      sendJson(res, 404, apiError("not_found_error", `fake Anthropic: no route ${req.method} ${req.url}`));
      return;
    }
    const record: AnthropicRequest = { body: await readJsonObject(req), headers: req.headers };
    requests.push(record);
    record.rejected = checkRequest(record.body, { signature, redacted: new Set(redacted) });
    if (record.rejected) {
      sendJson(res, 400, apiError("invalid_request_error", record.rejected));
      return;
    }
    const reply = queue.shift() ?? { kind: "error", status: 500, type: "api_error", message: "fake Anthropic: no scripted reply queued" };
    if (reply.kind === "error") {
      sendJson(res, reply.status, apiError(reply.type, reply.message));
      return;
    }
    const model = typeof record.body.model === "string" ? record.body.model : "claude-fake";
    await stream(openSse(res, reply.delayMs), reply, { id: `msg_fake_${++messages}`, model, signature, redact: () => issueRedacted() });
  });

  function issueRedacted(): string {
    const data = `EmwKAhgB${createHmac("sha256", secret).update(`redacted:${redacted.length}`).digest("base64")}`;
    redacted.push(data);
    return data;
  }

  return {
    url: `${server.origin}/v1`,
    requests,
    push: (...replies) => void queue.push(...replies),
    reset: () => void queue.splice(0),
    signature,
    redacted,
    close: server.close,
  };
}

function apiError(type: string, message: string) {
  return { type: "error", error: { type, message }, request_id: `req_fake_${randomBytes(6).toString("hex")}` };
}

const THINKING_TYPES = new Set(["thinking", "redacted_thinking"]);

/** The rule a request breaks, as Anthropic words it, or undefined. */
function checkRequest(
  body: Record<string, unknown>,
  issued: { signature(text: string): string; redacted: Set<string> },
): string | undefined {
  const messages = (Array.isArray(body.messages) ? body.messages : []) as Message[];
  const blocks = (m: Message | undefined): Block[] =>
    m === undefined ? [] : typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
  for (const [i, m] of messages.entries()) {
    const content = blocks(m);
    if (content.length === 0 && !(m.role === "assistant" && i === messages.length - 1)) {
      return `messages.${i}: all messages must have non-empty content except for the optional final assistant message`;
    }
    for (const [j, block] of content.entries()) {
      if (block.type === "text" && block.text === "") return "messages: text content blocks must be non-empty";
      if (block.type === "thinking" && block.signature !== issued.signature(String(block.thinking)))
        return `messages.${i}.content.${j}: Invalid \`signature\` in \`thinking\` block`;
      if (block.type === "redacted_thinking" && !issued.redacted.has(String(block.data)))
        return `messages.${i}.content.${j}: Invalid \`data\` in \`redacted_thinking\` block`;
    }
    const uses = content.filter((b) => b.type === "tool_use").map((b) => String(b.id));
    const answered = new Set(
      blocks(messages[i + 1])
        .filter((b) => b.type === "tool_result")
        .map((b) => String(b.tool_use_id)),
    );
    const missing = uses.filter((id) => !answered.has(id));
    if (m.role === "assistant" && missing.length > 0) {
      return `messages.${i}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(", ")}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`;
    }
    const previous = new Set(
      blocks(messages[i - 1])
        .filter((b) => b.type === "tool_use")
        .map((b) => String(b.id)),
    );
    const j = content.findIndex((b) => b.type === "tool_result" && !previous.has(String(b.tool_use_id)));
    if (j >= 0) {
      return `messages.${i}.content.${j}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${String(content[j]!.tool_use_id)}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`;
    }
  }
  const thinking = (body.thinking as { type?: string } | undefined)?.type;
  const last = messages.at(-1);
  if ((thinking === "enabled" || thinking === "adaptive") && last?.role === "user" && blocks(last).some((b) => b.type === "tool_result")) {
    let start = messages.length - 2;
    while (start >= 0 && !(messages[start]!.role === "user" && !blocks(messages[start]).some((b) => b.type === "tool_result"))) start--;
    const first = messages.findIndex((m, i) => i > start && m.role === "assistant");
    const found = blocks(messages[first])[0]?.type;
    if (first >= 0 && !THINKING_TYPES.has(found ?? "")) {
      return (
        `messages.${first}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${found}\`. When \`thinking\` is enabled, a final \`assistant\` message ` +
        "must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. " +
        "To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
      );
    }
  }
  return undefined;
}

async function stream(
  sse: SseWriter,
  reply: Extract<AnthropicReply, { kind: "stream" }>,
  ids: { id: string; model: string; signature(text: string): string; redact(): string },
): Promise<void> {
  const usage = reply.usage ?? { input_tokens: 10, output_tokens: 5 };
  const send = (data: { type: string; [key: string]: unknown }) => sse.send(data, data.type);
  const message = {
    id: ids.id,
    type: "message",
    role: "assistant",
    model: ids.model,
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: usage.input_tokens, output_tokens: 1 },
  };
  if (!(await send({ type: "message_start", message }))) return;
  for (const [index, block] of reply.blocks.entries()) {
    if ("hang" in block) return sse.hang();
    if ("error" in block) {
      await send({ type: "error", error: block.error });
      return sse.end();
    }
    const start = (content_block: Block) => send({ type: "content_block_start", index, content_block });
    const delta = (d: Block) => send({ type: "content_block_delta", index, delta: d });
    let events: Array<() => Promise<boolean>>;
    if ("thinking" in block) {
      const words = block.thinking.match(/\S+\s*|\s+/g) ?? [];
      events = [
        () => start({ type: "thinking", thinking: "", signature: "" }),
        ...words.map((w) => () => delta({ type: "thinking_delta", thinking: w })),
      ];
      if (block.cut) {
        for (const event of events) if (!(await event())) return;
        return sse.hang();
      }
      events.push(() => delta({ type: "signature_delta", signature: ids.signature(block.thinking) }));
    } else if ("redacted" in block) {
      events = [() => start({ type: "redacted_thinking", data: ids.redact() })];
    } else if ("text" in block) {
      events = [() => start({ type: "text", text: "" }), () => delta({ type: "text_delta", text: block.text })];
    } else {
      const json = JSON.stringify(block.toolUse.input);
      const cut = Math.ceil(json.length / 2);
      events = [
        () => start({ type: "tool_use", id: block.toolUse.id, name: block.toolUse.name, input: {} }),
        () => delta({ type: "input_json_delta", partial_json: json.slice(0, cut) }),
        () => delta({ type: "input_json_delta", partial_json: json.slice(cut) }),
      ];
    }
    events.push(() => send({ type: "content_block_stop", index }));
    for (const event of events) if (!(await event())) return;
  }
  const stopReason = reply.blocks.some((b) => "toolUse" in b) ? "tool_use" : "end_turn";
  if (
    !(await send({
      type: "message_delta",
      delta: { stop_reason: stopReason, stop_sequence: null },
      usage: { output_tokens: usage.output_tokens },
    }))
  )
    return;
  if (!(await send({ type: "message_stop" }))) return;
  sse.end();
}
