import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { MessageWithPartsSchema } from "../../gen/ledger/v1/message_pb.js";
import { MessageErrorSchema } from "../../gen/ledger/v1/error_pb.js";
import { ModelRefSchema } from "../../gen/ledger/v1/model_pb.js";
import { callErrorHint, errorHint, formatMessage, terminalSafe } from "../../src/cli/print.js";

// `ledger messages` output for the part kinds the end-to-end test does not produce.

const SES = "ses_01M8N5N64AYAFYM716YNCVWCWC";
const MSG = "msg_01M8N5N64AYAFYM716YNCVWCW1";

describe("formatMessage", () => {
  it("shows a failed tool with its error, a failed answer's error, patches, snapshots and compactions", () => {
    const entry = create(MessageWithPartsSchema, {
      message: {
        kind: {
          case: "assistant",
          value: {
            id: MSG,
            sessionId: SES,
            agent: "build",
            model: { providerId: "local", modelId: "qwen" },
            error: { message: "boom\nmore", kind: { case: "api", value: { statusCode: 500 } } },
          },
        },
      },
      parts: [
        {
          id: "prt_1",
          kind: {
            case: "tool",
            value: {
              tool: "grep",
              state: { status: { case: "error", value: { input: { pattern: "TODO" }, error: "denied by permission\nstack" } } },
            },
          },
        },
        { id: "prt_2", kind: { case: "tool", value: { tool: "list", state: { status: { case: "running", value: {} } } } } },
        { id: "prt_3", kind: { case: "patch", value: { hash: "abc123", files: ["a.ts", "b.ts"] } } },
        { id: "prt_4", kind: { case: "snapshot", value: { snapshot: "snap1" } } },
        { id: "prt_5", kind: { case: "compaction", value: { auto: true, overflow: true } } },
        {
          id: "prt_6",
          kind: {
            case: "stepFinish",
            value: { reason: "length", cost: 0.00001, tokens: { input: 5n, output: 7n, reasoning: 2n, cache: { read: 1n, write: 3n } } },
          },
        },
        { id: "prt_7", kind: { case: "reasoning", value: { text: "first\nsecond" } } },
      ],
    });
    expect(formatMessage(entry).split("\n")).toEqual([
      `message ${MSG}  assistant  agent=build  model=local/qwen  error=api: boom`,
      "  1. prt_1  tool      grep  error  TODO: denied by permission",
      "  2. prt_2  tool      list  running",
      "  3. prt_3  patch     abc123  a.ts, b.ts",
      "  4. prt_4  snapshot  snap1",
      "  5. prt_5  compaction auto, context overflow",
      "  6. prt_6  stepFinish reason=length  tokens in 5, out 7, reasoning 2, cache r/w 1/3  cost $0.000010",
      "  7. prt_7  reasoning first",
      "                      second",
    ]);
  });

  // A trial, 2026-12-03: a file name holding a newline broke `ledger messages`' columns.
  it("keeps a file part on one line, a line break in its name shown as \\n", () => {
    const entry = create(MessageWithPartsSchema, {
      message: { kind: { case: "user", value: { id: MSG, agent: "build" } } },
      parts: [
        {
          id: "prt_1",
          kind: { case: "file", value: { mime: "text/plain", filename: "new\nline.txt", url: "file:///tmp/new%0Aline.txt" } },
        },
      ],
    });
    expect(formatMessage(entry).split("\n")[1]).toBe("  1. prt_1  file      text/plain  new\\nline.txt  file:///tmp/new%0Aline.txt");
  });

  it("prints an assistant message without a model as model=(none), like a user message", () => {
    const entry = create(MessageWithPartsSchema, {
      message: { kind: { case: "assistant", value: { id: MSG, agent: "build", finish: "stop" } } },
    });
    expect(formatMessage(entry)).toBe(`message ${MSG}  assistant  agent=build  model=(none)  finish=stop`);
  });
});

describe("terminalSafe", () => {
  it("shows C0 controls but tab and newline in caret notation, a lone CR as ^M, DEL and C1 as JSON escapes", () => {
    expect(terminalSafe("a\tb\nc\r\nd")).toBe("a\tb\nc\r\nd");
    expect(terminalSafe("\u001b[2J\u0007x\ry\u0000\u007f\u009b31m")).toBe("^[[2J^Gx^My^@\\u007f\\u009b31m");
  });

  // A trial, 2026-12-03: `ledger sessions` passed U+202E (right-to-left override) to the terminal.
  it("shows the bidirectional overrides and isolates as JSON escapes", () => {
    expect(terminalSafe("title \u202Efdp.exe\u202C \u2066x\u2069")).toBe("title \\u202efdp.exe\\u202c \\u2066x\\u2069");
  });

  it("leaves a JSON line's value unchanged (JSON.stringify keeps DEL, C1 and bidi controls raw)", () => {
    const value = { text: "a\u007fb\u009bc\u001bd\re\u202ef" };
    const line = terminalSafe(JSON.stringify(value));
    expect(line).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
    expect(JSON.parse(line)).toEqual(value);
  });
});

describe("errorHint", () => {
  const model = create(ModelRefSchema, { providerId: "local", modelId: "qwen" });
  const api = (message: string, statusCode = 0) => create(MessageErrorSchema, { message, kind: { case: "api", value: { statusCode } } });

  it("names the model and its baseURL when the connection failed, and nothing for an answer the server gave", () => {
    const expected =
      "hint: nothing answered for local/qwen: is its model server running and reachable (provider.local.options.baseURL in ledger.json, if set)?";
    expect(errorHint(api("Cannot connect to API: connect ECONNREFUSED 127.0.0.1:11434"), model)).toBe(expected);
    expect(errorHint(api("Cannot connect to API: getaddrinfo ENOTFOUND ollama.lan"), model)).toBe(expected);
    // The server answered: its status and body say what is wrong.
    expect(errorHint(api("Cannot connect to API: ECONNREFUSED", 503), model)).toBeUndefined();
    expect(errorHint(api("Bad Request", 400), model)).toBeUndefined();
    expect(errorHint(create(MessageErrorSchema, { message: "ECONNREFUSED", kind: { case: "unknown", value: {} } }), model)).toBeUndefined();
  });
});

describe("callErrorHint", () => {
  const withInfo = (code: Code, reason: string, metadata: Record<string, string>) =>
    new ConnectError("m", code, undefined, [{ desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason, metadata }) }]);

  it("says what to do in the CLI's terms: LEDGER_TOKEN for a token, ledger watch --after for a run that goes on", () => {
    expect(callErrorHint(new ConnectError("a bearer token is required", Code.Unauthenticated), {})).toBe(
      "the server wants a token: set LEDGER_TOKEN to its auth.token (or to a JWT, e.g. from ledger token --sub NAME)",
    );
    // With LEDGER_TOKEN set the server's own message (invalid, expired) is the whole story.
    expect(callErrorHint(new ConnectError("bad token", Code.Unauthenticated), { LEDGER_TOKEN: "x".repeat(16) })).toBeUndefined();
    for (const reason of ["RUN_CONTINUES", "DRAINING"])
      expect(callErrorHint(withInfo(Code.Unavailable, reason, { session_id: "ses_1", after_seq: "13" }), {})).toBe(
        "follow the run with: ledger watch ses_1 --after 13 --url <the ledger serve that runs it>",
      );
    expect(callErrorHint(withInfo(Code.NotFound, "SESSION_NOT_FOUND", { session_id: "ses_1" }), {})).toBeUndefined();
  });
});
