#!/usr/bin/env node
// A scripted stand-in for a model, to try the permission loop of session-ledger without one
// (docs/walkthrough.md). It is not a model: it never reads what you ask beyond quoting it, and
// answers every conversation the same way.
//
// It serves an OpenAI-compatible `POST /v1/chat/completions` (and `GET /v1/models`) on
// 127.0.0.1, streamed as Server-Sent Events when the request says `stream: true` (the chunk
// format @ai-sdk/openai-compatible parses: deltas, a chunk with `finish_reason`, a usage chunk
// with `choices: []`, then `data: [DONE]`), else as one `chat.completion` JSON. Its script:
//
//   - the last message is not a tool result: it calls the `write` tool to create hello.txt,
//     whose content quotes the first line of the last user message;
//   - the last message is a tool result: it says "Wrote hello.txt." when the result is the
//     write tool's success, else that the write did not happen, quoting the result's first line
//     (a rejected permission request, for example);
//   - the last user message reads `call TOOL {json arguments}` (e.g. an MCP server's tool,
//     `call everything_echo {"message": "hi"}`): it calls that tool with those arguments, and
//     after its result says `TOOL answered: <the result's first line>`.
//
// Usage: node examples/scripted-model.mjs [--port 8089]   (0 picks a free port)
// Prints one line when ready: "scripted model on http://127.0.0.1:8089/v1"; a line per request
// on stderr. Zero dependencies (node:http only); stops on Ctrl-C.
import { createServer } from "node:http";

const MODEL = "demo";
const FILE = "hello.txt";
const WRITE_OK = "Wrote file successfully.";

const port = parsePort(process.argv.slice(2));
const server = createServer((req, res) => {
  handle(req, res).catch((error) => {
    process.stderr.write(`scripted model: ${error instanceof Error ? error.message : String(error)}\n`);
    if (!res.headersSent) sendJson(res, 500, { error: { message: "scripted model: internal error", type: "server_error" } });
    else res.end();
  });
});
server.listen(port, "127.0.0.1", () => {
  process.stdout.write(`scripted model on http://127.0.0.1:${server.address().port}/v1\n`);
});
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => server.close(() => process.exit(0)).closeAllConnections());

/** Answers one HTTP request. */
async function handle(req, res) {
  const path = (req.url ?? "").split("?")[0];
  if (req.method === "GET" && path === "/v1/models") {
    return sendJson(res, 200, { object: "list", data: [{ id: MODEL, object: "model", created: 0, owned_by: "scripted" }] });
  }
  if (req.method !== "POST" || path !== "/v1/chat/completions") {
    return sendJson(res, 404, { error: { message: `no route ${req.method} ${path}`, type: "invalid_request_error" } });
  }
  let body;
  try {
    body = JSON.parse(await readBody(req));
  } catch (error) {
    return sendJson(res, 400, { error: { message: `bad JSON body: ${error.message}`, type: "invalid_request_error" } });
  }
  const messages = Array.isArray(body?.messages) ? body.messages : [];
  const turn = nextTurn(messages, Array.isArray(body?.tools) ? body.tools : []);
  process.stderr.write(`${new Date().toISOString()} ${turn.call ? `calls ${turn.call.name}` : `says ${JSON.stringify(turn.text)}`}\n`);
  const model = typeof body.model === "string" ? body.model : MODEL;
  if (body.stream === true) streamTurn(res, turn, model);
  else completeTurn(res, turn, model);
}

/**
 * The script: `{ call: { id, name, arguments } }` to write hello.txt (or to call the tool a
 * `call TOOL {json}` message names), or `{ text }` once the conversation ends with a tool result
 * (or when the request does not offer the tool).
 */
function nextTurn(messages, tools) {
  const last = messages.at(-1);
  const user = messages.findLast((m) => m?.role === "user");
  const asked = contentText(user?.content).split("\n", 1)[0].trim() || "(nothing)";
  const named = /^call\s+(\S+)\s*(\{.*\})?\s*$/.exec(asked);
  if (last?.role === "tool") {
    const result = contentText(last.content);
    if (named) return { text: `${named[1]} answered: ${result.split("\n", 1)[0]}` };
    if (result.startsWith(WRITE_OK)) return { text: `Wrote ${FILE}.` };
    return { text: `I did not write ${FILE}: ${result.split("\n", 1)[0]}` };
  }
  if (named) {
    const [, name, args = "{}"] = named;
    if (!tools.some((t) => t?.function?.name === name)) return { text: `I am not offered a tool named ${name}.` };
    return { call: { id: `call_${Date.now().toString(36)}`, name, arguments: args } };
  }
  if (!tools.some((t) => t?.function?.name === "write")) {
    return { text: `This agent has no write tool, so I cannot create ${FILE}.` };
  }
  const content = `Hello from the scripted model.\nYou asked: ${asked}\n`;
  return { call: { id: `call_${Date.now().toString(36)}`, name: "write", arguments: JSON.stringify({ filePath: FILE, content }) } };
}

/** The text of a message's `content`: a string, or an array of `{type: "text", text}` parts. */
function contentText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (typeof p?.text === "string" ? p.text : "")).join("");
  return "";
}

/** Streams the turn as `chat.completion.chunk` events, then a usage chunk and `[DONE]`. */
function streamTurn(res, turn, model) {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  const id = `chatcmpl-scripted-${Date.now()}`;
  const created = Math.floor(Date.now() / 1000);
  const send = (choices, extra = {}) =>
    res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices, ...extra })}\n\n`);
  const delta = (d, finish = null) => send([{ index: 0, delta: d, finish_reason: finish }]);
  if (turn.call) {
    const { id: callId, name, arguments: args } = turn.call;
    const cut = Math.ceil(args.length / 2);
    delta({
      role: "assistant",
      content: null,
      tool_calls: [{ index: 0, id: callId, type: "function", function: { name, arguments: args.slice(0, cut) } }],
    });
    delta({ tool_calls: [{ index: 0, function: { arguments: args.slice(cut) } }] });
    delta({}, "tool_calls");
  } else {
    delta({ role: "assistant", content: turn.text });
    delta({}, "stop");
  }
  send([], { usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } });
  res.end("data: [DONE]\n\n");
}

/** Answers the turn as one `chat.completion` JSON. */
function completeTurn(res, turn, model) {
  const message = turn.call
    ? {
        role: "assistant",
        content: null,
        tool_calls: [{ id: turn.call.id, type: "function", function: { name: turn.call.name, arguments: turn.call.arguments } }],
      }
    : { role: "assistant", content: turn.text };
  sendJson(res, 200, {
    id: `chatcmpl-scripted-${Date.now()}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message, finish_reason: turn.call ? "tool_calls" : "stop" }],
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
  });
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

function sendJson(res, status, value) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(value));
}

/** `--port N` or `--port=N` (default 8089; 0 = a free port); anything else ends the process with a usage line. */
function parsePort(args) {
  let value = "8089";
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--port" && i + 1 < args.length) value = args[++i];
    else if (arg.startsWith("--port=")) value = arg.slice("--port=".length);
    else usage(arg === "--help" || arg === "-h" ? 0 : 2);
  }
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) usage(2, `--port: ${value} is not a port number (0-65535)`);
  return n;
}

function usage(code, problem) {
  if (problem) process.stderr.write(`${problem}\n`);
  (code === 0 ? process.stdout : process.stderr).write("usage: node examples/scripted-model.mjs [--port 8089]   (0 picks a free port)\n");
  process.exit(code);
}
