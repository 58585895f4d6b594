import { create, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { MessageWithPartsSchema, type MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { conversationOrder, nextWork } from "../../src/agent/conversation.js";
import { toModelMessages, type HistoryTarget } from "../../src/agent/history.js";

// toModelMessages, conversationOrder and nextWork on hand-built stored messages.

type PartKind = NonNullable<MessageInitShape<typeof PartSchema>["kind"]>;

const SESSION = "ses_test";
const TEXT_ONLY: HistoryTarget = { providerId: "mock", inputModalities: ["text"] };
const VISION: HistoryTarget = { providerId: "mock", inputModalities: ["text", "image"] };
const PDF_READER: HistoryTarget = { providerId: "mock", inputModalities: ["text", "pdf"] };
const PNG = "data:image/png;base64,iVBORw0KGgo=";
const PDF = "data:application/pdf;base64,JVBERi0xLjQ=";

function parts(messageId: string, kinds: PartKind[]) {
  return kinds.map((kind, i) => ({ id: `prt_${messageId}_${i}`, sessionId: SESSION, messageId, kind }));
}

function userMsg(id: string, kinds: PartKind[], extra: { noReply?: boolean } = {}): MessageWithParts {
  return create(MessageWithPartsSchema, {
    message: {
      kind: {
        case: "user",
        value: { id, sessionId: SESSION, agent: "build", model: { providerId: "mock", modelId: "model" }, noReply: extra.noReply ?? false },
      },
    },
    parts: parts(id, kinds),
  });
}

interface AssistantExtra {
  providerId?: string;
  finish?: string;
  completed?: boolean;
  error?: boolean;
}

function assistantMsg(id: string, parentId: string, kinds: PartKind[], extra: AssistantExtra = {}): MessageWithParts {
  const completed = extra.completed ?? true;
  return create(MessageWithPartsSchema, {
    message: {
      kind: {
        case: "assistant",
        value: {
          id,
          sessionId: SESSION,
          parentId,
          agent: "build",
          model: { providerId: extra.providerId ?? "mock", modelId: "model" },
          finish: extra.finish ?? "stop",
          time: { created: timestampNow(), completed: completed ? timestampNow() : undefined },
          error: extra.error ? { message: "boom", kind: { case: "unknown", value: {} } } : undefined,
        },
      },
    },
    parts: parts(id, kinds),
  });
}

const text = (value: string, flags: { synthetic?: boolean; ignored?: boolean; metadata?: JsonObject } = {}): PartKind => ({
  case: "text",
  value: { text: value, ...flags },
});
const file = (url: string, mime: string, filename = ""): PartKind => ({ case: "file", value: { url, mime, filename } });
const reasoning = (value: string, metadata?: JsonObject): PartKind => ({ case: "reasoning", value: { text: value, metadata } });
const stepStart: PartKind = { case: "stepStart", value: {} };
const stepFinish = (reason: string): PartKind => ({ case: "stepFinish", value: { reason } });
type ToolStatus = "pending" | "running" | "completed" | "error";
function tool(callId: string, name: string, status: ToolStatus, input: JsonObject, result = "", metadata?: JsonObject): PartKind {
  const state =
    status === "pending"
      ? { case: "pending" as const, value: { input, raw: "" } }
      : status === "running"
        ? { case: "running" as const, value: { input, timeStart: timestampNow() } }
        : status === "completed"
          ? { case: "completed" as const, value: { input, output: result, title: "", timeStart: timestampNow(), timeEnd: timestampNow() } }
          : { case: "error" as const, value: { input, error: result, timeStart: timestampNow(), timeEnd: timestampNow() } };
  return { case: "tool", value: { callId, tool: name, state: { status: state }, metadata } };
}

const ids = (history: MessageWithParts[]) => history.map((m) => m.message!.kind.value!.id);

describe("toModelMessages: user messages", () => {
  it("sends text parts, synthetic included, ignored and empty ones left out", () => {
    const history = [
      userMsg("u1", [
        text("hello"),
        text("<file>synthetic read</file>", { synthetic: true }),
        text("not for the model", { ignored: true }),
        text(""),
      ]),
    ];
    expect(toModelMessages(history, TEXT_ONLY)).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "hello" },
          { type: "text", text: "<file>synthetic read</file>" },
        ],
      },
    ]);
  });

  it("replaces an agent part by the synthetic text that follows it", () => {
    const history = [
      userMsg("u1", [
        text("@explore find the parser"),
        { case: "agent", value: { name: "explore" } },
        text("Use the above message and context to generate a prompt and call the task tool with subagent: explore", { synthetic: true }),
      ]),
    ];
    expect(toModelMessages(history, TEXT_ONLY)).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "@explore find the parser" },
          { type: "text", text: "Use the above message and context to generate a prompt and call the task tool with subagent: explore" },
        ],
      },
    ]);
  });

  it("leaves out text/plain and directory file parts (their content is in the synthetic read text)", () => {
    const history = [
      userMsg("u1", [
        text("look"),
        text('Called the Read tool with the following input: {"filePath":"a.txt"}', { synthetic: true }),
        text("1: alpha", { synthetic: true }),
        file("file:///tmp/a.txt", "text/plain", "a.txt"),
        file("file:///tmp/dir", "application/x-directory", "dir"),
      ]),
    ];
    expect(toModelMessages(history, VISION)).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "look" },
          { type: "text", text: 'Called the Read tool with the following input: {"filePath":"a.txt"}' },
          { type: "text", text: "1: alpha" },
        ],
      },
    ]);
  });

  it("sends an image as a file only to a model that accepts images, else a notice", () => {
    const history = [userMsg("u1", [text("what is this?"), file(PNG, "image/png", "pic.png")])];
    expect(toModelMessages(history, VISION)).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "what is this?" },
          { type: "file", data: PNG, mediaType: "image/png", filename: "pic.png" },
        ],
      },
    ]);
    expect(toModelMessages(history, TEXT_ONLY)).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "what is this?" },
          { type: "text", text: "[Attached image pic.png (image/png) cannot be read by this model: it does not accept image input]" },
        ],
      },
    ]);
    expect(toModelMessages(history, PDF_READER)[0]!.content).toEqual([
      { type: "text", text: "what is this?" },
      { type: "text", text: "[Attached image pic.png (image/png) cannot be read by this model: it does not accept image input]" },
    ]);
  });

  it("sends an http(s) image as a URL", () => {
    const history = [userMsg("u1", [file("https://example.com/cat.jpg", "image/jpeg", "cat.jpg")])];
    expect(toModelMessages(history, VISION)).toEqual([
      {
        role: "user",
        content: [{ type: "file", data: new URL("https://example.com/cat.jpg"), mediaType: "image/jpeg", filename: "cat.jpg" }],
      },
    ]);
  });

  it("sends a PDF as a file only to a model that accepts PDFs, else a notice", () => {
    const history = [userMsg("u1", [text("summarize"), file(PDF, "application/pdf", "doc.pdf")])];
    expect(toModelMessages(history, PDF_READER)[0]!.content).toEqual([
      { type: "text", text: "summarize" },
      { type: "file", data: PDF, mediaType: "application/pdf", filename: "doc.pdf" },
    ]);
    expect(toModelMessages(history, VISION)[0]!.content).toEqual([
      { type: "text", text: "summarize" },
      { type: "text", text: "[Attached PDF doc.pdf (application/pdf) cannot be read by this model: it does not accept pdf input]" },
    ]);
  });

  it("sends a notice for another kind of file", () => {
    const history = [userMsg("u1", [file("data:application/zip;base64,UEsDBA==", "application/zip", "a.zip")])];
    expect(toModelMessages(history, VISION)).toEqual([
      { role: "user", content: [{ type: "text", text: "[Attached file a.zip (application/zip) is not shown to the model]" }] },
    ]);
  });

  it("names a stored image or PDF whose URL no provider takes instead of sending it (the step would fail on it, and every later one)", () => {
    const history = [
      userMsg("u1", [
        text("look"),
        file("https://", "image/png", "x.png"),
        file("http://exa mple.com/x.pdf", "application/pdf"),
        file("file:///tmp/y.png", "image/png", "y.png"),
      ]),
    ];
    expect(toModelMessages(history, { ...VISION, inputModalities: ["text", "image", "pdf"] })[0]!.content).toEqual([
      { type: "text", text: "look" },
      { type: "text", text: "[Attached file x.png (image/png) is not shown to the model]" },
      { type: "text", text: "[Attached file http://exa mple.com/x.pdf (application/pdf) is not shown to the model]" },
      { type: "text", text: "[Attached file y.png (image/png) is not shown to the model]" },
    ]);
  });

  it("leaves out a text data: URL (its body went in the synthetic texts before it), not a text file it cannot read", () => {
    const history = [
      userMsg("u1", [
        text("# Title", { synthetic: true }),
        file("data:text/markdown;base64,IyBUaXRsZQ==", "text/markdown", "README.md"),
        file("https://example.com/b.md", "text/markdown", "b.md"),
      ]),
    ];
    expect(toModelMessages(history, VISION)[0]!.content).toEqual([
      { type: "text", text: "# Title" },
      { type: "text", text: "[Attached file b.md (text/markdown) is not shown to the model]" },
    ]);
  });

  it("leaves out a user message with nothing to send", () => {
    const history = [userMsg("u1", [text("", {}), text("not for the model", { ignored: true })])];
    expect(toModelMessages(history, TEXT_ONLY)).toEqual([]);
  });

  it("sends a subtask part as OpenCode's 'executed by the user' text, so subtasks alone keep their user turn before the task calls", () => {
    const subtask: PartKind = { case: "subtask", value: { prompt: "do it", description: "d", agent: "general" } };
    const history = [
      userMsg("u1", [text("", {}), subtask]),
      assistantMsg(
        "a1",
        "u1",
        [tool("prt_sub", "task", "completed", { description: "d", prompt: "do it", subagent_type: "general" }, "done")],
        {
          finish: "tool-calls",
        },
      ),
    ];
    expect(toModelMessages(history, TEXT_ONLY)).toEqual([
      { role: "user", content: [{ type: "text", text: "The following tool was executed by the user" }] },
      {
        role: "assistant",
        content: [
          {
            type: "tool-call",
            toolCallId: "prt_sub",
            toolName: "task",
            input: { description: "d", prompt: "do it", subagent_type: "general" },
          },
        ],
      },
      {
        role: "tool",
        content: [{ type: "tool-result", toolCallId: "prt_sub", toolName: "task", output: { type: "text", value: "done" } }],
      },
    ]);
  });
});

describe("toModelMessages: a tool's attachments (images and PDFs read returned)", () => {
  const PNG_DATA = PNG.slice("data:image/png;base64,".length);
  const PDF_DATA = PDF.slice("data:application/pdf;base64,".length);
  /** A user question, then a step whose read call returned `attachments` with `output`. */
  function readWith(output: string, attachments: Array<{ url: string; mime: string; filename: string }>, compacted = false) {
    const completed = tool("c1", "read", "completed", { filePath: "logo.png" }, output) as Extract<PartKind, { case: "tool" }>;
    const state = completed.value.state!.status as { value: Record<string, unknown> };
    state.value.attachments = attachments;
    if (compacted) state.value.timeCompacted = timestampNow();
    return [userMsg("u1", [text("look")]), assistantMsg("a1", "u1", [completed], { finish: "tool-calls" })];
  }
  const call = { role: "assistant", content: [{ type: "tool-call", toolCallId: "c1", toolName: "read", input: { filePath: "logo.png" } }] };
  const result = (output: unknown) => ({ role: "tool", content: [{ type: "tool-result", toolCallId: "c1", toolName: "read", output }] });
  const logo = { url: PNG, mime: "image/png", filename: "logo.png" };
  const spec = { url: PDF, mime: "application/pdf", filename: "spec.pdf" };

  it("puts them inside the tool result when the provider takes media there (Anthropic, OpenAI Responses)", () => {
    const target = { ...VISION, inputModalities: ["text", "image", "pdf"], mediaInToolResults: true };
    expect(toModelMessages(readWith("Image read successfully", [logo, spec]), target).slice(1)).toEqual([
      call,
      result({
        type: "content",
        value: [
          { type: "text", text: "Image read successfully" },
          { type: "image-data", data: PNG_DATA, mediaType: "image/png" },
          { type: "file-data", data: PDF_DATA, mediaType: "application/pdf", filename: "spec.pdf" },
        ],
      }),
    ]);
  });

  it("sends them in a user message after the results when the provider takes only text there (OpenAI-compatible), as OpenCode does", () => {
    expect(toModelMessages(readWith("Image read successfully", [logo]), { ...VISION, mediaInToolResults: false }).slice(1)).toEqual([
      call,
      result({ type: "text", value: "Image read successfully" }),
      {
        role: "user",
        content: [
          { type: "text", text: "Attached image(s) from tool result:" },
          { type: "file", data: PNG, mediaType: "image/png", filename: "logo.png" },
        ],
      },
    ]);
  });

  it("tells a model that does not accept the kind, in the result's text, and sends it nothing else", () => {
    expect(toModelMessages(readWith("PDF read successfully", [spec]), { ...VISION, mediaInToolResults: true }).slice(1)).toEqual([
      call,
      result({
        type: "text",
        value:
          "PDF read successfully\n\n[Attached PDF spec.pdf (application/pdf) cannot be read by this model: it does not accept pdf input]",
      }),
    ]);
  });

  it("drops them with a pruned output", () => {
    const target = { ...VISION, mediaInToolResults: true };
    expect(toModelMessages(readWith("Image read successfully", [logo], true), target).slice(1)).toEqual([
      call,
      result({ type: "text", value: "[old tool output cleared]" }),
    ]);
  });
});

describe("toModelMessages: assistant messages", () => {
  it("sends text, reasoning and tool calls, then each tool's result in a tool message", () => {
    const history = [
      userMsg("u1", [text("read two files")]),
      assistantMsg(
        "a1",
        "u1",
        [
          stepStart,
          reasoning("I will read both."),
          tool("call_1", "read", "completed", { filePath: "a.txt" }, "1: alpha"),
          tool("call_2", "read", "error", { filePath: "b.txt" }, "File not found: b.txt"),
          stepFinish("tool-calls"),
        ],
        { finish: "tool-calls" },
      ),
      assistantMsg("a2", "u1", [stepStart, text("alpha only"), stepFinish("stop")]),
    ];
    expect(toModelMessages(history, TEXT_ONLY)).toEqual([
      { role: "user", content: [{ type: "text", text: "read two files" }] },
      {
        role: "assistant",
        content: [
          { type: "reasoning", text: "I will read both." },
          { type: "tool-call", toolCallId: "call_1", toolName: "read", input: { filePath: "a.txt" } },
          { type: "tool-call", toolCallId: "call_2", toolName: "read", input: { filePath: "b.txt" } },
        ],
      },
      {
        role: "tool",
        content: [
          { type: "tool-result", toolCallId: "call_1", toolName: "read", output: { type: "text", value: "1: alpha" } },
          { type: "tool-result", toolCallId: "call_2", toolName: "read", output: { type: "error-text", value: "File not found: b.txt" } },
        ],
      },
      { role: "assistant", content: [{ type: "text", text: "alpha only" }] },
    ]);
  });

  it("gives an interrupted (running or pending) tool call an error result", () => {
    const history = [
      userMsg("u1", [text("go")]),
      assistantMsg("a1", "u1", [stepStart, tool("call_1", "grep", "running", { pattern: "x" }), tool("call_2", "list", "pending", {})], {
        completed: false,
        finish: "",
      }),
    ];
    expect(toModelMessages(history, TEXT_ONLY).slice(1)).toEqual([
      {
        role: "assistant",
        content: [
          { type: "tool-call", toolCallId: "call_1", toolName: "grep", input: { pattern: "x" } },
          { type: "tool-call", toolCallId: "call_2", toolName: "list", input: {} },
        ],
      },
      {
        role: "tool",
        content: [
          {
            type: "tool-result",
            toolCallId: "call_1",
            toolName: "grep",
            output: { type: "error-text", value: "Tool execution was interrupted" },
          },
          {
            type: "tool-result",
            toolCallId: "call_2",
            toolName: "list",
            output: { type: "error-text", value: "Tool execution was interrupted" },
          },
        ],
      },
    ]);
  });

  it("skips an assistant message that produced nothing, and ignored or empty text", () => {
    const history = [
      userMsg("u1", [text("hi")]),
      assistantMsg("a1", "u1", [], { error: true, finish: "error" }),
      assistantMsg("a2", "u1", [stepStart, text(""), text("hidden", { ignored: true }), reasoning(""), stepFinish("stop")]),
    ];
    expect(toModelMessages(history, TEXT_ONLY)).toEqual([{ role: "user", content: [{ type: "text", text: "hi" }] }]);
  });

  it("keeps provider metadata for the same provider and drops it for another", () => {
    const signature = { mock: { signature: "sig" } };
    const history = [
      userMsg("u1", [text("hi")]),
      assistantMsg(
        "a1",
        "u1",
        [
          stepStart,
          reasoning("hmm", signature),
          tool("call_1", "read", "completed", { filePath: "a" }, "out", { mock: { itemId: "fc_1" } }),
          stepFinish("tool-calls"),
        ],
        {
          finish: "tool-calls",
        },
      ),
      assistantMsg("a2", "u1", [stepStart, text("done", { metadata: { mock: { id: "msg_1" } } }), stepFinish("stop")]),
    ];
    const same = toModelMessages(history, TEXT_ONLY);
    expect(same[1]).toEqual({
      role: "assistant",
      content: [
        { type: "reasoning", text: "hmm", providerOptions: signature },
        {
          type: "tool-call",
          toolCallId: "call_1",
          toolName: "read",
          input: { filePath: "a" },
          providerOptions: { mock: { itemId: "fc_1" } },
        },
      ],
    });
    expect(same[3]).toEqual({ role: "assistant", content: [{ type: "text", text: "done", providerOptions: { mock: { id: "msg_1" } } }] });

    const other = toModelMessages(history, { providerId: "other", inputModalities: ["text"] });
    expect(other[1]).toStrictEqual({
      role: "assistant",
      content: [
        { type: "reasoning", text: "hmm", providerOptions: undefined },
        { type: "tool-call", toolCallId: "call_1", toolName: "read", input: { filePath: "a" }, providerOptions: undefined },
      ],
    });
    expect(other[3]).toStrictEqual({ role: "assistant", content: [{ type: "text", text: "done", providerOptions: undefined }] });
    // Empty metadata is not sent either.
    const empty = toModelMessages([userMsg("u1", [text("hi")]), assistantMsg("a1", "u1", [text("x", { metadata: {} })])], TEXT_ONLY);
    expect(empty[1]).toEqual({ role: "assistant", content: [{ type: "text", text: "x" }] });
  });

  it("sends reasoning with empty text only with its metadata, so only to the same provider", () => {
    const redacted = { mock: { redactedData: "opaque" } };
    const history = [
      userMsg("u1", [text("hi")]),
      assistantMsg("a1", "u1", [stepStart, reasoning("", redacted), reasoning(""), text("ok"), stepFinish("stop")]),
    ];
    expect(toModelMessages(history, TEXT_ONLY)[1]).toEqual({
      role: "assistant",
      content: [
        { type: "reasoning", text: "", providerOptions: redacted },
        { type: "text", text: "ok" },
      ],
    });
    expect(toModelMessages(history, { providerId: "other", inputModalities: ["text"] })[1]).toStrictEqual({
      role: "assistant",
      content: [{ type: "text", text: "ok", providerOptions: undefined }],
    });
  });

  it("skips a step that produced only reasoning (cut off before its answer), signed or not", () => {
    const history = [
      userMsg("u1", [text("think")]),
      assistantMsg("a1", "u1", [stepStart, reasoning("Let me think"), reasoning("", { mock: { itemId: "rs_1" } })], {
        error: true,
        finish: "error",
      }),
      userMsg("u2", [text("again")]),
    ];
    expect(toModelMessages(history, TEXT_ONLY)).toEqual([
      { role: "user", content: [{ type: "text", text: "think" }] },
      { role: "user", content: [{ type: "text", text: "again" }] },
    ]);
  });
});

describe("conversationOrder", () => {
  it("puts each answer right after its question, even when a later user message was stored between its steps", () => {
    // Positions: u1, a1 (step 1 of u1), u2 (prompted while u1 was being answered), a1b (step 2 of u1), a2.
    const stored = [
      userMsg("u1", [text("one")]),
      assistantMsg("a1", "u1", [tool("call_1", "read", "completed", { filePath: "a" }, "x")], { finish: "tool-calls" }),
      userMsg("u2", [text("two")]),
      assistantMsg("a1b", "u1", [text("answer one")]),
      assistantMsg("a2", "u2", [text("answer two")]),
    ];
    expect(ids(conversationOrder(stored))).toEqual(["u1", "a1", "a1b", "u2", "a2"]);
    expect(toModelMessages(conversationOrder(stored), TEXT_ONLY).map((m) => m.role)).toEqual([
      "user",
      "assistant",
      "tool",
      "assistant",
      "user",
      "assistant",
    ]);
  });

  it("keeps user messages in stored order, each with its answers in stored order", () => {
    const stored = [
      userMsg("u1", [text("1")]),
      userMsg("u2", [text("2")]),
      assistantMsg("a2", "u2", []),
      assistantMsg("a1", "u1", []),
      assistantMsg("a1b", "u1", []),
    ];
    expect(ids(conversationOrder(stored))).toEqual(["u1", "a1", "a1b", "u2", "a2"]);
  });
});

describe("nextWork", () => {
  it("is the first unanswered user message, with the conversation up to it", () => {
    const stored = [
      userMsg("u1", [text("1")]),
      assistantMsg("a1", "u1", [text("one")]),
      userMsg("u2", [text("2")]),
      userMsg("u3", [text("3")]),
    ];
    const work = nextWork(stored)!;
    expect(work.user.id).toBe("u2");
    expect(ids(work.conversation)).toEqual(["u1", "a1", "u2"]);
    expect(work.steps).toBe(0);
    expect(work.mentioned).toEqual([]);
  });

  it("names the agents the user message mentions, in order (their task calls are not weighed)", () => {
    const mention = (name: string): PartKind => ({ case: "agent", value: { name } });
    const stored = [userMsg("u1", [text("1"), mention("explore")]), userMsg("u2", [mention("general"), text("2"), mention("explore")])];
    expect(nextWork(stored)!.mentioned).toEqual(["explore"]);
    expect(nextWork([stored[1]!])!.mentioned).toEqual(["general", "explore"]);
  });

  it("continues a user message whose last step finished with tool calls, counting its steps", () => {
    const stored = [
      userMsg("u1", [text("1")]),
      assistantMsg("a1", "u1", [tool("c1", "read", "completed", {}, "x")], { finish: "tool-calls" }),
      userMsg("u2", [text("2")]),
      assistantMsg("a1b", "u1", [tool("c2", "read", "completed", {}, "y")], { finish: "tool-calls" }),
    ];
    const work = nextWork(stored)!;
    expect(work.user.id).toBe("u1");
    expect(ids(work.conversation)).toEqual(["u1", "a1", "a1b"]);
    expect(work.steps).toBe(2);
  });

  it("counts a failed or incomplete (crashed) last step as an answer", () => {
    const failed = [userMsg("u1", [text("1")]), assistantMsg("a1", "u1", [], { finish: "tool-calls", error: true })];
    expect(nextWork(failed)).toBeUndefined();
    const crashed = [
      userMsg("u1", [text("1")]),
      assistantMsg("a1", "u1", [tool("c1", "read", "running", {})], { finish: "", completed: false }),
    ];
    expect(nextWork(crashed)).toBeUndefined();
    const crashedAfterTools = [userMsg("u1", [text("1")]), assistantMsg("a1", "u1", [], { finish: "tool-calls", completed: false })];
    expect(nextWork(crashedAfterTools)).toBeUndefined();
  });

  it("does not treat no_reply user messages as work, but sends them as context", () => {
    expect(nextWork([userMsg("u1", [text("note")], { noReply: true })])).toBeUndefined();
    const work = nextWork([userMsg("u1", [text("note")], { noReply: true }), userMsg("u2", [text("question")])])!;
    expect(work.user.id).toBe("u2");
    expect(ids(work.conversation)).toEqual(["u1", "u2"]);
    expect(toModelMessages(work.conversation, TEXT_ONLY)).toEqual([
      { role: "user", content: [{ type: "text", text: "note" }] },
      { role: "user", content: [{ type: "text", text: "question" }] },
    ]);
  });

  it("is undefined when every user message is answered", () => {
    expect(nextWork([])).toBeUndefined();
    expect(
      nextWork([userMsg("u1", [text("1")]), assistantMsg("a1", "u1", [text("one")], { finish: "length", error: true })]),
    ).toBeUndefined();
  });
});
