/**
 * A scripted, loopback-only fake of the OpenAI Responses API (`POST {url}/responses`,
 * `stream: true`), the API `@ai-sdk/openai` uses by default, for testing without network access.
 * Each request consumes the next queued {@link ResponsesReply} (a 500 when none is queued).
 *
 * Output items get ids issued here (`rs_fake_N`, `msg_fake_N`, `fc_fake_N`); an item is stored
 * (can be sent back as an `item_reference`) once its `response.output_item.done` was sent,
 * unless the request said `store: false`. When the request's `include` asks for
 * `reasoning.encrypted_content`, reasoning items carry encrypted content issued here.
 *
 * It checks every request's `input` like the real API and answers a broken one with its error
 * (`{"error":{"message","type":"invalid_request_error","param":"input","code"}}`):
 * - an `item_reference`, or an inline reasoning item without encrypted content, names an item
 *   stored here (404 "Item with id '…' not found. Items are not persisted when `store` is set to
 *   false. …"); an inline item's `id` is one issued here; inline encrypted reasoning carries
 *   exactly the content issued here ("The encrypted content for item … could not be verified.");
 * - a reasoning item is followed by the item it led to (a message or function call): "Item
 *   '…' of type 'reasoning' was provided without its required following item.";
 * - an item sent by id whose response had a reasoning item before it comes after that reasoning
 *   item: "Item '…' of type '…' was provided without its required 'reasoning' item: '…'.";
 * - each `function_call_output` answers an earlier `function_call` (same `call_id`), and each
 *   `function_call` has its output.
 *
 * Wire format: `response.created`, per item `response.output_item.added`, its deltas
 * (`response.reasoning_summary_part.added` / `…_text.delta` / `…_part.done`,
 * `response.output_text.delta`, `response.function_call_arguments.delta` in two pieces) and
 * `response.output_item.done`, then `response.completed` with usage (or `response.failed`).
 */
import { createHmac, randomBytes } from "node:crypto";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import { listenLoopback, openSse, readJsonObject, sendJson, type SseWriter } from "./fake-http.js";

/** One output item of a scripted reply, or a way the stream stops early. */
export type ResponsesItem =
  /** A reasoning item with these summary texts (`[]`: no summary, as reasoning models often send). */
  | { reasoning: string[] }
  | { text: string }
  | { functionCall: { callId: string; name: string; arguments: Record<string, unknown> } }
  /** Stop sending and keep the connection open until the client goes away. */
  | { hang: true }
  /** `response.failed` with this error, then the stream ends. */
  | { fail: { code: string; message: string } };

/** What the fake answers to one request. */
export type ResponsesReply =
  { kind: "stream"; items: ResponsesItem[]; delayMs?: number } | { kind: "error"; status: number; message: string; type?: string };

/** An output item this server issued. */
export interface IssuedItem {
  id: string;
  type: "reasoning" | "message" | "function_call";
  /** For messages and function calls: the reasoning item before it in the same response. */
  reasoning?: string;
  /** For reasoning items, when the request asked for it. */
  encrypted?: string;
}

/** One request the fake received. */
export interface ResponsesRequest {
  body: Record<string, unknown>;
  headers: IncomingHttpHeaders;
  /** The error message when the input broke a rule, else undefined. */
  rejected?: string;
}

/** A running fake; see {@link startFakeResponses}. */
export interface FakeResponses {
  /** Base URL for `createOpenAI({ baseURL })`: `http://127.0.0.1:PORT/v1`. */
  url: string;
  requests: ResponsesRequest[];
  /** Every item issued, in order. */
  issued: IssuedItem[];
  push(...replies: ResponsesReply[]): void;
  /** Drops queued replies. */
  reset(): void;
  close(): Promise<void>;
}

type Entry = Record<string, unknown>;
const NOT_PERSISTED =
  "Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.";

/** Starts the fake on 127.0.0.1 with an ephemeral port. */
export async function startFakeResponses(): Promise<FakeResponses> {
  const secret = randomBytes(16);
  const queue: ResponsesReply[] = [];
  const requests: ResponsesRequest[] = [];
  const issued: IssuedItem[] = [];
  const stored = new Map<string, IssuedItem>();
  const counters = { rs: 0, msg: 0, fc: 0, resp: 0 };
  const nextId = (kind: keyof typeof counters) => `${kind}_fake_${++counters[kind]}`;

  const server = await listenLoopback(async (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== "POST" || !(req.url ?? "").split("?")[0]!.endsWith("/responses")) {
      sendJson(res, 404, apiError(`fake Responses: no route ${req.method} ${req.url}`));
      return;
    }
    const record: ResponsesRequest = { body: await readJsonObject(req), headers: req.headers };
    requests.push(record);
    const broken = checkInput((record.body.input ?? []) as Entry[], { stored, issued: new Map(issued.map((i) => [i.id, i])) });
    if (broken) {
      record.rejected = broken.message;
      sendJson(res, broken.status, apiError(broken.message));
      return;
    }
    const reply = queue.shift() ?? {
      kind: "error",
      status: 500,
      message: "fake Responses: no scripted reply queued",
      type: "server_error",
    };
    if (reply.kind === "error") {
      sendJson(res, reply.status, apiError(reply.message, reply.type));
      return;
    }
    const include = Array.isArray(record.body.include) ? record.body.include : [];
    const keep = (item: IssuedItem) => {
      issued.push(item);
      if (record.body.store !== false) stored.set(item.id, item);
    };
    await stream(openSse(res, reply.delayMs), reply.items, {
      id: nextId("resp"),
      model: String(record.body.model),
      nextId,
      encrypt: include.includes("reasoning.encrypted_content")
        ? (id) => `enc_${createHmac("sha256", secret).update(id).digest("base64url")}`
        : undefined,
      keep,
    });
  });

  return {
    url: `${server.origin}/v1`,
    requests,
    issued,
    push: (...r) => void queue.push(...r),
    reset: () => void queue.splice(0),
    close: server.close,
  };
}

function apiError(message: string, type = "invalid_request_error") {
  return { error: { message, type, param: "input", code: null } };
}

/** The first rule `input` breaks, as the API words it, or undefined. */
function checkInput(
  input: Entry[],
  known: { stored: Map<string, IssuedItem>; issued: Map<string, IssuedItem> },
): { status: number; message: string } | undefined {
  const notFound = (id: string) => ({ status: 404, message: `Item with id '${id}' not found. ${NOT_PERSISTED}` });
  const seen = new Set<string>();
  const calls = new Set<string>();
  const answered = new Set<string>();
  const resolved: Array<{ kind: string; id?: string }> = [];
  for (const entry of input) {
    const id = typeof entry.id === "string" ? entry.id : undefined;
    let kind =
      entry.type === undefined || entry.type === "message" ? (entry.role === "assistant" ? "message" : "input") : String(entry.type);
    if (kind === "item_reference") {
      const item = id === undefined ? undefined : known.stored.get(id);
      if (!item) return notFound(String(id));
      kind = item.type;
    } else if (kind === "reasoning") {
      if (typeof entry.encrypted_content === "string") {
        const matches =
          id === undefined
            ? [...known.issued.values()].some((i) => i.encrypted === entry.encrypted_content)
            : known.issued.get(id)?.encrypted === entry.encrypted_content;
        if (!matches) return { status: 400, message: `The encrypted content for item ${id ?? "(no id)"} could not be verified.` };
      } else if (id === undefined || !known.stored.has(id)) return notFound(String(id));
      if (!Array.isArray(entry.summary))
        return { status: 400, message: `Missing required parameter: 'input[${resolved.length}].summary'.` };
    } else if (id !== undefined && !known.issued.has(id)) {
      return notFound(id);
    }
    if (kind === "function_call") calls.add(String(entry.call_id));
    if (kind === "function_call_output") {
      if (!calls.has(String(entry.call_id)))
        return { status: 400, message: `No tool call found for function call output with call_id ${String(entry.call_id)}.` };
      answered.add(String(entry.call_id));
    }
    const reasoning = id === undefined ? undefined : known.issued.get(id)?.reasoning;
    if (reasoning !== undefined && !seen.has(reasoning)) {
      return { status: 400, message: `Item '${id}' of type '${kind}' was provided without its required 'reasoning' item: '${reasoning}'.` };
    }
    if (id !== undefined) seen.add(id);
    resolved.push({ kind, id });
  }
  for (const [k, item] of resolved.entries()) {
    const next = resolved[k + 1]?.kind;
    if (item.kind === "reasoning" && next !== "message" && next !== "function_call") {
      return { status: 400, message: `Item '${item.id}' of type 'reasoning' was provided without its required following item.` };
    }
  }
  const unanswered = [...calls].find((c) => !answered.has(c));
  return unanswered === undefined ? undefined : { status: 400, message: `No tool output found for function call ${unanswered}.` };
}

interface StreamIds {
  id: string;
  model: string;
  nextId(kind: "rs" | "msg" | "fc"): string;
  encrypt?: (id: string) => string;
  keep(item: IssuedItem): void;
}

async function stream(sse: SseWriter, items: ResponsesItem[], ids: StreamIds): Promise<void> {
  let sequence = 0;
  const send = (data: { type: string; [key: string]: unknown }) => sse.send({ ...data, sequence_number: sequence++ }, data.type);
  const created = Math.floor(Date.now() / 1000);
  const response = { id: ids.id, object: "response", created_at: created, status: "in_progress", model: ids.model, output: [] };
  if (!(await send({ type: "response.created", response }))) return;
  let reasoning: string | undefined;
  for (const [output_index, item] of items.entries()) {
    if ("hang" in item) return sse.hang();
    if ("fail" in item) {
      await send({ type: "response.failed", response: { ...response, status: "failed", error: item.fail, incomplete_details: null } });
      return sse.end();
    }
    const events: Array<{ type: string; [key: string]: unknown }> = [];
    let done: IssuedItem;
    let doneItem: Entry;
    if ("reasoning" in item) {
      const id = ids.nextId("rs");
      const encrypted = ids.encrypt?.(id);
      reasoning = id;
      done = { id, type: "reasoning", encrypted };
      doneItem = {
        id,
        type: "reasoning",
        summary: item.reasoning.map((text) => ({ type: "summary_text", text })),
        ...(encrypted ? { encrypted_content: encrypted } : {}),
      };
      events.push({
        type: "response.output_item.added",
        output_index,
        item: { id, type: "reasoning", summary: [], ...(encrypted ? { encrypted_content: encrypted } : {}) },
      });
      for (const [summary_index, text] of item.reasoning.entries()) {
        const part = { type: "summary_text", text: "" };
        events.push({ type: "response.reasoning_summary_part.added", item_id: id, output_index, summary_index, part });
        for (const delta of text.match(/\S+\s*|\s+/g) ?? [])
          events.push({ type: "response.reasoning_summary_text.delta", item_id: id, output_index, summary_index, delta });
        events.push({ type: "response.reasoning_summary_text.done", item_id: id, output_index, summary_index, text });
        events.push({ type: "response.reasoning_summary_part.done", item_id: id, output_index, summary_index, part: { ...part, text } });
      }
    } else if ("text" in item) {
      const id = ids.nextId("msg");
      done = { id, type: "message", reasoning };
      doneItem = {
        id,
        type: "message",
        status: "completed",
        role: "assistant",
        content: [{ type: "output_text", text: item.text, annotations: [] }],
      };
      events.push({
        type: "response.output_item.added",
        output_index,
        item: { id, type: "message", status: "in_progress", role: "assistant", content: [] },
      });
      events.push({ type: "response.output_text.delta", item_id: id, output_index, content_index: 0, delta: item.text, logprobs: [] });
    } else {
      const id = ids.nextId("fc");
      const args = JSON.stringify(item.functionCall.arguments);
      const cut = Math.ceil(args.length / 2);
      const call = { id, type: "function_call", call_id: item.functionCall.callId, name: item.functionCall.name };
      done = { id, type: "function_call", reasoning };
      doneItem = { ...call, arguments: args, status: "completed" };
      events.push({ type: "response.output_item.added", output_index, item: { ...call, arguments: "", status: "in_progress" } });
      events.push({ type: "response.function_call_arguments.delta", item_id: id, output_index, delta: args.slice(0, cut) });
      events.push({ type: "response.function_call_arguments.delta", item_id: id, output_index, delta: args.slice(cut) });
      events.push({ type: "response.function_call_arguments.done", item_id: id, output_index, arguments: args });
    }
    for (const event of events) if (!(await send(event))) return;
    if (!(await send({ type: "response.output_item.done", output_index, item: doneItem }))) return;
    ids.keep(done);
  }
  const usage = {
    input_tokens: 10,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 5,
    output_tokens_details: { reasoning_tokens: 2 },
    total_tokens: 15,
  };
  if (!(await send({ type: "response.completed", response: { ...response, status: "completed", incomplete_details: null, usage } })))
    return;
  sse.end();
}
