/**
 * A scripted, loopback-only fake of the OpenAI chat-completions API, for testing code built on
 * `@ai-sdk/openai-compatible` without network access.
 *
 * It serves `POST {url}/chat/completions` only. Each request consumes the next queued
 * {@link ScriptedReply} (or the fallback) and answers it either as an SSE stream of
 * `chat.completion.chunk` events (request body `stream: true`) or as one `chat.completion` JSON.
 *
 * Wire format (what `@ai-sdk/openai-compatible@2.0.92` parses, see its `chunkBaseSchema`):
 * - text: `choices[0].delta.content`
 * - reasoning: `choices[0].delta.reasoning_content`
 * - tool calls: `choices[0].delta.tool_calls[{ index, id, type: "function", function: { name, arguments } }]`;
 *   the arguments are split over two chunks, the second carrying only `index` and the rest of `arguments`
 * - then a chunk with empty delta and `finish_reason`, then a usage chunk (`choices: []`), then `data: [DONE]`.
 *
 * The usage chunk is always sent, whether or not the request asked for `stream_options.include_usage`
 * (the client only asks when `createOpenAICompatible({ includeUsage: true })`, but parses usage either way).
 *
 * With `{ thinking: true }` it enforces DeepSeek's thinking-mode rule for tool calls: every
 * assistant message with `tool_calls` must carry `reasoning_content` (else 400 "Missing
 * `reasoning_content` field in the assistant message at message index N. …", as DeepSeek answers).
 */
import { once } from "node:events";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import { listenLoopback, readJsonObject, sendJson } from "./fake-http.js";
import { sleep } from "./wait.js";

/** Token counts reported for a reply; mapped to OpenAI's `usage` object. */
export interface ScriptedUsage {
  prompt_tokens: number;
  completion_tokens: number;
  /** Sent as `usage.completion_tokens_details.reasoning_tokens`. */
  reasoning_tokens?: number;
  /** Sent as `usage.prompt_tokens_details.cached_tokens`. */
  cached_tokens?: number;
}

/** One piece of a scripted streaming reply. */
export type ReplyChunk =
  | { text: string }
  | { reasoning: string }
  /** `arguments` is a JSON string; the server splits it over two SSE chunks. */
  | { toolCall: { id: string; name: string; arguments: string } }
  /** Stop sending and keep the connection open until the client goes away (e.g. aborts). */
  | { hang: true };

/** What the fake answers to one `/chat/completions` request. */
export type ScriptedReply =
  | {
      kind: "stream";
      chunks: ReplyChunk[];
      /** Defaults to `"tool_calls"` if the script has a tool call, else `"stop"`. */
      finish?: "stop" | "tool_calls" | "length";
      /** Defaults to `{ prompt_tokens: 0, completion_tokens: 0 }`. */
      usage?: ScriptedUsage;
      /** Milliseconds to wait between SSE chunks. */
      delayMs?: number;
    }
  | {
      kind: "error";
      status: number;
      /** Response JSON; defaults to an OpenAI-style `{ error: { message, type, code } }`. */
      body?: unknown;
      /** Extra response headers, e.g. `{ "retry-after": "1" }`. */
      headers?: Record<string, string>;
    };

/** One `/chat/completions` request the fake received. */
export interface RecordedRequest {
  /** The parsed JSON body (model, messages, tools, stream, ...). */
  body: Record<string, unknown>;
  headers: IncomingHttpHeaders;
  /** The 400 message when the request broke the `thinking` rule, else undefined. */
  rejected?: string;
  /**
   * How the response ended: undefined while it is still open, `"finished"` when the fake sent
   * all of it, `"aborted"` when the client went away first (e.g. a hung reply the client aborted).
   */
  end?: "finished" | "aborted";
}

/** A running fake server; see {@link startFakeOpenAI}. */
export interface FakeOpenAI {
  /** Base URL for `createOpenAICompatible({ baseURL })`, e.g. `http://127.0.0.1:PORT/v1`. */
  url: string;
  /** Every `/chat/completions` request received, in order. */
  requests: RecordedRequest[];
  /** Queues replies, consumed one per request in order. */
  push(...replies: ScriptedReply[]): void;
  /** Drops queued replies (so a failed test's leftovers never answer the next test). */
  reset(): void;
  /** The reply used when the queue is empty (default: a 500 error, so tests notice). */
  setFallback(reply: ScriptedReply): void;
  /** Stops listening and destroys every open connection (including hung ones). */
  close(): Promise<void>;
}

const MODEL = "fake-model";

const DEFAULT_FALLBACK: ScriptedReply = {
  kind: "error",
  status: 500,
  body: { error: { message: "fake OpenAI: no scripted reply queued", type: "server_error", code: "no_script" } },
};

/**
 * Starts a fake OpenAI chat-completions server on 127.0.0.1 with an ephemeral port.
 * `options.thinking`: enforce the thinking-mode rule described above.
 */
export async function startFakeOpenAI(options: { thinking?: boolean } = {}): Promise<FakeOpenAI> {
  const queue: ScriptedReply[] = [];
  let fallback: ScriptedReply = DEFAULT_FALLBACK;
  const requests: RecordedRequest[] = [];
  let counter = 0;

  const server = await listenLoopback(async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? "").split("?")[0];
    if (req.method !== "POST" || !path.endsWith("/chat/completions")) {
      sendJson(res, 404, { error: { message: `fake OpenAI: no route ${req.method} ${path}`, type: "invalid_request_error", code: null } });
      return;
    }
    let body: Record<string, unknown>;
    try {
      body = await readJsonObject(req);
    } catch (error) {
      sendJson(res, 400, { error: { message: `fake OpenAI: bad JSON body: ${String(error)}`, type: "invalid_request_error", code: null } });
      return;
    }
    const record: RecordedRequest = { body, headers: req.headers };
    requests.push(record);
    record.rejected = options.thinking ? missingReasoning(body) : undefined;
    if (record.rejected) {
      sendJson(res, 400, {
        error: { message: record.rejected, type: "invalid_request_error", param: null, code: "invalid_request_error" },
      });
      return;
    }
    res.once("close", () => (record.end = res.writableFinished ? "finished" : "aborted"));
    const reply = queue.shift() ?? fallback;
    const id = `chatcmpl-fake-${++counter}`;
    const model = typeof body.model === "string" ? body.model : MODEL;
    if (reply.kind === "error") {
      sendJson(res, reply.status, reply.body ?? defaultErrorBody(reply.status), reply.headers);
    } else if (body.stream === true) {
      await streamReply(res, reply, id, model);
    } else {
      completeReply(res, reply, id, model);
    }
  });

  return {
    url: `${server.origin}/v1`,
    requests,
    push: (...replies) => void queue.push(...replies),
    reset: () => void queue.splice(0),
    setFallback: (reply) => {
      fallback = reply;
    },
    close: server.close,
  };
}

/** DeepSeek's thinking-mode error for an assistant tool-call message sent back without its reasoning. */
function missingReasoning(body: Record<string, unknown>): string | undefined {
  const messages = (Array.isArray(body.messages) ? body.messages : []) as Array<{
    role?: string;
    tool_calls?: unknown[];
    reasoning_content?: unknown;
  }>;
  const index = messages.findIndex(
    (m) => m.role === "assistant" && (m.tool_calls?.length ?? 0) > 0 && typeof m.reasoning_content !== "string",
  );
  if (index < 0) return undefined;
  return `Missing \`reasoning_content\` field in the assistant message at message index ${index}. For more information, please refer to https://api-docs.deepseek.com/guides/thinking_mode#tool-calls`;
}

function defaultErrorBody(status: number): unknown {
  const [type, code, message] =
    status === 401
      ? ["invalid_request_error", "invalid_api_key", "Incorrect API key provided."]
      : status === 429
        ? ["rate_limit_error", "rate_limit_exceeded", "Rate limit reached. Please try again later."]
        : status >= 500
          ? ["server_error", null, "The server had an error while processing your request."]
          : ["invalid_request_error", null, `Request failed with status ${status}.`];
  return { error: { message, type, code } };
}

function hasToolCall(chunks: ReplyChunk[]): boolean {
  return chunks.some((c) => "toolCall" in c);
}

function usageJson(usage: ScriptedUsage | undefined): Record<string, unknown> {
  const u = usage ?? { prompt_tokens: 0, completion_tokens: 0 };
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens,
    ...(u.cached_tokens !== undefined ? { prompt_tokens_details: { cached_tokens: u.cached_tokens } } : {}),
    ...(u.reasoning_tokens !== undefined ? { completion_tokens_details: { reasoning_tokens: u.reasoning_tokens } } : {}),
  };
}

async function streamReply(
  res: ServerResponse,
  reply: Extract<ScriptedReply, { kind: "stream" }>,
  id: string,
  model: string,
): Promise<void> {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  res.flushHeaders();
  const created = Math.floor(Date.now() / 1000);
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}): Record<string, unknown> => ({
    id,
    object: "chat.completion.chunk",
    created,
    model,
    choices,
    ...extra,
  });
  const delta = (d: Record<string, unknown>, finish: string | null = null): Record<string, unknown> =>
    chunk([{ index: 0, delta: d, finish_reason: finish }]);

  let first = true;
  let sent = 0;
  const send = async (event: Record<string, unknown> | "[DONE]"): Promise<boolean> => {
    if (res.destroyed || res.writableEnded) return false;
    if (sent++ > 0 && reply.delayMs) {
      await sleep(reply.delayMs);
      if (res.destroyed) return false;
    }
    res.write(`data: ${event === "[DONE]" ? event : JSON.stringify(event)}\n\n`);
    return true;
  };
  // OpenAI's first delta carries the role.
  const role = (): Record<string, unknown> => (first ? ((first = false), { role: "assistant" }) : {});

  let toolIndex = 0;
  for (const c of reply.chunks) {
    if ("hang" in c) {
      // Keep the socket open; the client aborts (or close() destroys it).
      if (!res.destroyed) await once(res, "close");
      return;
    }
    let events: Record<string, unknown>[];
    if ("text" in c) events = [delta({ ...role(), content: c.text })];
    else if ("reasoning" in c) events = [delta({ ...role(), content: null, reasoning_content: c.reasoning })];
    else {
      const index = toolIndex++;
      const args = c.toolCall.arguments;
      const cut = Math.ceil(args.length / 2);
      events = [
        delta({
          ...role(),
          content: null,
          tool_calls: [{ index, id: c.toolCall.id, type: "function", function: { name: c.toolCall.name, arguments: args.slice(0, cut) } }],
        }),
        delta({ tool_calls: [{ index, function: { arguments: args.slice(cut) } }] }),
      ];
    }
    for (const e of events) if (!(await send(e))) return;
  }
  const finish = reply.finish ?? (hasToolCall(reply.chunks) ? "tool_calls" : "stop");
  if (!(await send(delta({}, finish)))) return;
  if (!(await send(chunk([], { usage: usageJson(reply.usage) })))) return;
  if (!(await send("[DONE]"))) return;
  res.end();
}

function completeReply(res: ServerResponse, reply: Extract<ScriptedReply, { kind: "stream" }>, id: string, model: string): void {
  if (reply.chunks.some((c) => "hang" in c)) return; // never answer; the client aborts or close() destroys the socket
  let text = "";
  let reasoning = "";
  const toolCalls: unknown[] = [];
  for (const c of reply.chunks) {
    if ("text" in c) text += c.text;
    else if ("reasoning" in c) reasoning += c.reasoning;
    else if ("toolCall" in c)
      toolCalls.push({ id: c.toolCall.id, type: "function", function: { name: c.toolCall.name, arguments: c.toolCall.arguments } });
  }
  const finish = reply.finish ?? (toolCalls.length > 0 ? "tool_calls" : "stop");
  sendJson(res, 200, {
    id,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: text.length > 0 ? text : null,
          ...(reasoning.length > 0 ? { reasoning_content: reasoning } : {}),
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        },
        finish_reason: finish,
      },
    ],
    usage: usageJson(reply.usage),
  });
}
