import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs, timestampNow } from "@bufbuild/protobuf/wkt";
import { describe, expect, it, onTestFinished, vi } from "vitest";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import type { MessageErrorSchema } from "../../gen/ledger/v1/error_pb.js";
import type { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { EXIT_ABORTED, EXIT_FAILED, EXIT_OK, PromptRenderer } from "../../src/cli/render.js";

// The renderer alone, fed hand-made events: no server, no database.

const SES = "ses_01M8N5N64AYAFYM716YNCVWCWC";
const USER = "msg_01M8N5N64AYAFYM716YNCVWCW0";
const A1 = "msg_01M8N5N64AYAFYM716YNCVWCW1";
const A2 = "msg_01M8N5N64AYAFYM716YNCVWCW2";

type Kind = MessageInitShape<typeof SessionEventSchema>["kind"];
const event = (kind: Kind): SessionEvent => create(SessionEventSchema, { sessionId: SES, kind });

function assistant(
  id: string,
  done?: { input?: bigint; output?: bigint; cost?: number; error?: MessageInitShape<typeof MessageErrorSchema> },
): SessionEvent {
  return event({
    case: "messageUpdated",
    value: {
      message: {
        kind: {
          case: "assistant",
          value: {
            id,
            sessionId: SES,
            parentId: USER,
            time: { created: timestampNow(), completed: done ? timestampNow() : undefined },
            tokens: done
              ? { input: done.input ?? 0n, output: done.output ?? 0n, reasoning: 0n, cache: { read: 0n, write: 0n } }
              : undefined,
            cost: done?.cost ?? 0,
            error: done?.error,
          },
        },
      },
    },
  });
}
const part = (id: string, messageId: string, kind: MessageInitShape<typeof PartSchema>["kind"]) =>
  event({ case: "partUpdated", value: { part: { id, sessionId: SES, messageId, kind } } });
const delta = (partId: string, messageId: string, text: string) =>
  event({ case: "partDelta", value: { messageId, partId, field: "text", delta: text } });

function render(events: SessionEvent[]) {
  let out = "";
  let err = "";
  const renderer = new PromptRenderer({
    out: (s) => (out += s),
    err: (s) => (err += s),
    spinner: { set() {}, clear() {}, stop() {} },
    dim: false,
  });
  for (const e of events) renderer.event(e);
  const outcome = renderer.finish();
  return { out, err, outcome };
}

describe("PromptRenderer", () => {
  it("shows a streamed text's control characters, and a CRLF split between two deltas as a line break", () => {
    const { out } = render([
      assistant(A1),
      part("prt_c", A1, { case: "text", value: { text: "" } }),
      delta("prt_c", A1, "one\r"),
      delta("prt_c", A1, "\ntwo \u001b[2J three\rfour"),
      part("prt_c", A1, { case: "text", value: { text: "one\r\ntwo \u001b[2J three\rfour", time: { end: timestampNow() } } }),
      assistant(A1, {}),
    ]);
    expect(out).toContain("one\r\ntwo ^[[2J three^Mfour");
  });

  it("prints the session line, text once (deltas or snapshots, in either order), tool lines and the summary", () => {
    // The retry's wait is rendered against the clock: frozen, so it reads 1.5s however slow the run.
    const now = Date.now();
    const clock = vi.spyOn(Date, "now").mockReturnValue(now);
    onTestFinished(() => clock.mockRestore());
    const { out, err, outcome } = render([
      event({ case: "messageUpdated", value: { message: { kind: { case: "user", value: { id: USER, sessionId: SES } } } } }),
      part("prt_u1", USER, { case: "text", value: { text: "what is in notes.txt?" } }),
      part("prt_u2", USER, { case: "text", value: { text: "hello from notes", synthetic: true } }),
      event({ case: "sessionStatus", value: { status: { case: "busy", value: {} } } }),
      assistant(A1),
      part("prt_r", A1, { case: "reasoning", value: { text: "" } }),
      delta("prt_r", A1, "let me look"),
      part("prt_r", A1, { case: "reasoning", value: { text: "let me look", time: { end: timestampNow() } } }),
      part("prt_t1", A1, { case: "tool", value: { callId: "c1", tool: "read", state: { status: { case: "pending", value: {} } } } }),
      part("prt_t1", A1, {
        case: "tool",
        value: { callId: "c1", tool: "read", state: { status: { case: "running", value: { input: { filePath: "notes.txt" } } } } },
      }),
      part("prt_t1", A1, {
        case: "tool",
        value: { callId: "c1", tool: "read", state: { status: { case: "running", value: { input: { filePath: "notes.txt" } } } } },
      }),
      part("prt_t1", A1, {
        case: "tool",
        value: {
          callId: "c1",
          tool: "read",
          state: { status: { case: "completed", value: { input: { filePath: "notes.txt" }, output: "1: hello" } } },
        },
      }),
      part("prt_t2", A1, {
        case: "tool",
        value: {
          callId: "c2",
          tool: "grep",
          state: { status: { case: "error", value: { input: { pattern: "x" }, error: "bad regex\nmore" } } },
        },
      }),
      assistant(A1, { input: 100n, output: 10n, cost: 0.001 }),
      event({
        case: "sessionStatus",
        value: { status: { case: "retry", value: { attempt: 1, message: "Rate limit", next: timestampFromMs(now + 1500) } } },
      }),
      assistant(A2),
      part("prt_x", A2, { case: "text", value: { text: "" } }),
      delta("prt_x", A2, "Hello, "),
      part("prt_x", A2, { case: "text", value: { text: "Hello, wor" } }), // snapshot ahead of the deltas
      delta("prt_x", A2, "wor"),
      delta("prt_x", A2, "ld"),
      part("prt_x", A2, { case: "text", value: { text: "Hello, world", time: { end: timestampNow() } } }),
      assistant(A2, { input: 200n, output: 20n, cost: 0.0012 }),
      event({ case: "sessionStatus", value: { status: { case: "idle", value: {} } } }),
    ]);
    expect(out).toBe(
      [
        `session ${SES}`,
        "→ read notes.txt … running",
        "✓ read notes.txt",
        "✗ grep x: bad regex",
        "Hello, world",
        "tokens: in 300, out 30, reasoning 0, cache r/w 0/0 · cost $0.0022 · steps 2",
        "",
      ].join("\n"),
    );
    expect(err).toBe("thinking: let me look\nretrying in 1.5s (attempt 1): Rate limit\n");
    expect(outcome.exitCode).toBe(EXIT_OK);
  });

  it("ends with the assistant's error: exit 1, or 130 when aborted; a session error of the run is not repeated", () => {
    const failed = render([
      assistant(A1),
      event({
        case: "sessionError",
        value: { messageId: A1, error: { message: "401 nope", kind: { case: "providerAuth", value: { providerId: "local" } } } },
      }),
      assistant(A1, { error: { message: "401 nope", kind: { case: "providerAuth", value: { providerId: "local" } } } }),
    ]);
    expect(failed.outcome.exitCode).toBe(EXIT_FAILED);
    expect(failed.err).toBe("error: provider_auth: 401 nope\n");
    expect(failed.out).toContain("steps 1");

    const aborted = render([
      assistant(A1),
      part("prt_x", A1, { case: "text", value: { text: "" } }),
      delta("prt_x", A1, "partial"),
      assistant(A1, { error: { message: "The run was aborted", kind: { case: "aborted", value: {} } } }),
    ]);
    expect(aborted.outcome.exitCode).toBe(EXIT_ABORTED);
    expect(aborted.out).toBe(`session ${SES}\npartial\ntokens: in 0, out 0, reasoning 0, cache r/w 0/0 · cost $0.0000 · steps 1\n`);
    expect(aborted.err).toBe("error: aborted: The run was aborted\n");
  });

  it("does not count a message whose model is not configured as a step (no model was called, /metrics counts none)", () => {
    const notFound = {
      message: "model fake/nope is not configured; configured models: local/qwen",
      kind: { case: "modelNotFound" as const, value: { providerId: "fake", modelId: "nope", available: ["local/qwen"] } },
    };
    const { out, err, outcome } = render([
      assistant(A1),
      event({ case: "sessionError", value: { messageId: A1, error: notFound } }),
      assistant(A1, { error: notFound }),
    ]);
    expect(outcome.exitCode).toBe(EXIT_FAILED);
    expect(err).toBe("error: model_not_found: model fake/nope is not configured; configured models: local/qwen\n");
    expect(out).toBe(`session ${SES}\ntokens: in 0, out 0, reasoning 0, cache r/w 0/0 · cost $0.0000 · steps 0\n`);
  });

  it("warns about errors of the prompt itself and fails when the stream ends without an answer", () => {
    const { err, outcome } = render([
      event({
        case: "sessionError",
        value: { messageId: USER, error: { message: "File not found: x", kind: { case: "fileRead", value: { path: "x" } } } },
      }),
    ]);
    expect(err).toBe("warning: File not found: x\nerror: the stream ended before the model answered\n");
    expect(outcome.exitCode).toBe(EXIT_FAILED);
  });
  it("prints the whole todo list on each todo_updated, ending a half-written line first; an empty list as none", () => {
    const todos = (list: Array<[string, string, string]>) =>
      event({ case: "todoUpdated", value: { todos: list.map(([id, status, content]) => ({ id, content, status, priority: "high" })) } });
    const { out } = render([
      assistant(A1),
      part("prt_x", A1, { case: "text", value: { text: "" } }),
      delta("prt_x", A1, "Planning"),
      todos([
        ["1", "pending", "one"],
        ["2", "in_progress", "two\nsecond line"],
        ["3", "completed", "three"],
        ["4", "cancelled", "four"],
      ]),
      todos([]),
      assistant(A1, {}),
    ]);
    expect(out).toBe(
      `session ${SES}\nPlanning\ntodos (1/4 done):\n  [ ] one  (high)\n  [~] two  (high)\n  [x] three  (high)\n  [-] four  (high)\n` +
        "todos: none\ntokens: in 0, out 0, reasoning 0, cache r/w 0/0 · cost $0.0000 · steps 1\n",
    );
  });
});
