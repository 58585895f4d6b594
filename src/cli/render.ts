import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { SessionEvent, StatusRetry } from "../../gen/ledger/v1/event_pb.js";
import type { MessageError } from "../../gen/ledger/v1/error_pb.js";
import type { AssistantMessage } from "../../gen/ledger/v1/message_pb.js";
import type { Part, ToolPart } from "../../gen/ledger/v1/part_pb.js";
import { describeInput, finalErrorText, formatTodos, summary, terminalSafe } from "./print.js";
import type { Spinner } from "./spinner.js";

/** `ledger prompt` exit code: the prompt was answered (or stored with `--no-reply`). */
export const EXIT_OK = 0;
/** `ledger prompt` exit code: the request failed, or the answer ended with an error (provider, auth, API...). */
export const EXIT_FAILED = 1;
/** `ledger prompt` exit code: the run was aborted (Ctrl-C, or `ledger abort` from elsewhere); 128 + SIGINT. */
export const EXIT_ABORTED = 130;

/** Where a {@link PromptRenderer} writes. */
export interface RenderOutput {
  /** The reply: session line, text, tool lines, summary. */
  out(text: string): void;
  /** Notices: reasoning, retries, warnings, the final error. */
  err(text: string): void;
  /** Progress while waiting; `clear()`ed before anything is written. */
  spinner: Spinner;
  /** Dim the reasoning (stderr is a terminal). */
  dim: boolean;
}

/** How a streamed prompt ended. */
export interface RunOutcome {
  /** {@link EXIT_OK}, {@link EXIT_FAILED} or {@link EXIT_ABORTED}. */
  exitCode: number;
  /** The error of the last assistant message, if any. */
  error?: MessageError;
}

interface StreamedText {
  /** What is on screen (always a prefix of the part's text). */
  printed: string;
  /** The deltas received so far. */
  streamed: string;
}

/**
 * Renders the events of a `PromptStream` for a terminal: the `session ses_...` line first, the
 * assistant's text as its deltas arrive (each character once, whether it came as a delta or
 * only in a snapshot), reasoning on stderr once complete (`thinking: ...`), one line per tool
 * state change (`→ read notes.txt … running`, `✓ read notes.txt`, `✗ read notes.txt: error`;
 * pending only shows in the spinner), the todo list whenever the model changes it
 * (`todo_updated`: {@link formatTodos}), retry notices, and, from {@link finish}, the token/cost
 * summary and the final error. User-message parts (the prompt, synthetic file reads) are not shown.
 */
export class PromptRenderer {
  private readonly assistants = new Map<string, AssistantMessage>();
  private readonly texts = new Map<string, StreamedText>();
  /** Reasoning parts by id: their text so far, and whether it was shown. */
  private readonly reasoning = new Map<string, { text: string; shown: boolean }>();
  /** The last state shown per tool part, and the tools running now (for the spinner). */
  private readonly toolStates = new Map<string, string>();
  private readonly running = new Map<string, string>();
  private sessionShown = false;
  private lineOpen = false;

  constructor(private readonly output: RenderOutput) {}

  /** Whether stdout is mid-line (streaming text), where a spinner must not draw. */
  get midLine(): boolean {
    return this.lineOpen;
  }

  /** Handles one stream event. */
  event(event: SessionEvent): void {
    if (!this.sessionShown) {
      this.sessionShown = true;
      this.line(`session ${event.sessionId}`);
      this.output.spinner.set("sending");
    }
    const kind = event.kind;
    switch (kind.case) {
      case "messageUpdated": {
        const message = kind.value.message?.kind;
        if (message?.case !== "assistant") return;
        const fresh = !this.assistants.has(message.value.id);
        this.assistants.set(message.value.id, message.value);
        if (fresh) this.output.spinner.set("waiting for the model");
        return;
      }
      case "partUpdated":
        if (kind.value.part && this.assistants.has(kind.value.part.messageId)) this.part(kind.value.part);
        return;
      case "partDelta": {
        const text = this.texts.get(kind.value.partId);
        if (text && kind.value.field === "text") {
          text.streamed += kind.value.delta;
          this.catchUp(text, text.streamed);
        } else {
          const thought = this.reasoning.get(kind.value.partId);
          if (thought) thought.text += kind.value.delta;
        }
        return;
      }
      case "sessionStatus": {
        const status = kind.value.status;
        if (status.case === "retry") this.retry(status.value);
        else this.output.spinner.set(status.case === "busy" ? "working" : undefined);
        return;
      }
      case "todoUpdated":
        for (const line of formatTodos(kind.value.todos)) this.line(line);
        return;
      case "sessionError":
        // Errors of an assistant message are reported once, from its `error`, by finish().
        if (!this.assistants.has(kind.value.messageId)) this.notice(`warning: ${kind.value.error?.message ?? "unknown error"}\n`);
        return;
      default:
        return;
    }
  }

  /** Ends the output: the token/cost summary and the final error, if any; returns the exit code. */
  finish(): RunOutcome {
    this.close();
    const all = [...this.assistants.values()];
    const last = all.at(-1);
    if (!last) {
      this.output.err("error: the stream ended before the model answered\n");
      return { exitCode: EXIT_FAILED };
    }
    this.line(summary(all));
    const error = last.error;
    if (!error) return { exitCode: EXIT_OK };
    this.output.err(finalErrorText(error, last.model));
    return { exitCode: error.kind.case === "aborted" ? EXIT_ABORTED : EXIT_FAILED, error };
  }

  /** Stops the spinner and ends a half-written line (also done by {@link finish}). */
  close(): void {
    this.output.spinner.stop();
    this.endLine();
  }

  private part(part: Part): void {
    const kind = part.kind;
    switch (kind.case) {
      case "text": {
        if (kind.value.synthetic || kind.value.ignored) return;
        let text = this.texts.get(part.id);
        if (!text) {
          text = { printed: "", streamed: "" };
          this.texts.set(part.id, text);
          this.output.spinner.set(undefined);
        }
        this.catchUp(text, kind.value.text);
        if (kind.value.time?.end) this.endLine();
        return;
      }
      case "reasoning": {
        let thought = this.reasoning.get(part.id);
        if (!thought) {
          thought = { text: "", shown: false };
          this.reasoning.set(part.id, thought);
          this.output.spinner.set("thinking");
        }
        if (kind.value.text.length >= thought.text.length) thought.text = kind.value.text;
        if (!kind.value.time?.end || thought.shown || !thought.text.trim()) return;
        thought.shown = true;
        const body = thought.text.trim().replaceAll("\n", "\n          ");
        this.notice(`thinking: ${body}\n`, true);
        this.output.spinner.set("waiting for the model");
        return;
      }
      case "tool":
        this.tool(part.id, kind.value);
        return;
      default:
        return;
    }
  }

  private tool(partId: string, tool: ToolPart): void {
    const state = tool.state?.status;
    if (!state?.case || this.toolStates.get(partId) === state.case) return;
    this.toolStates.set(partId, state.case);
    const label = [tool.tool, describeInput(state.value.input)].filter(Boolean).join(" ");
    switch (state.case) {
      case "pending":
        this.output.spinner.set(`preparing ${tool.tool}`);
        return;
      case "running":
        this.line(`→ ${label} … running`);
        this.running.set(partId, tool.tool);
        break;
      case "completed":
        this.line(`✓ ${label}`);
        this.running.delete(partId);
        break;
      case "error":
        this.line(`✗ ${label}: ${firstLine(state.value.error)}`);
        this.running.delete(partId);
        break;
    }
    const busy = [...new Set(this.running.values())];
    this.output.spinner.set(busy.length > 0 ? `running ${busy.join(", ")}` : "waiting for the model");
  }

  private retry(status: StatusRetry): void {
    // Tenths under 10 s: a 200 ms wait read "1s" when rounded up to whole seconds.
    const ms = status.next ? Math.max(0, timestampMs(status.next) - Date.now()) : 0;
    const wait = ms < 10_000 ? (ms / 1000).toFixed(1) : String(Math.round(ms / 1000));
    this.notice(`retrying in ${wait}s (attempt ${status.attempt}): ${firstLine(status.message)}\n`);
    this.output.spinner.set(`retrying (attempt ${status.attempt})`);
  }

  /** Prints what `full` adds to what is on screen, if `full` extends it. */
  private catchUp(text: StreamedText, full: string): void {
    if (full.length <= text.printed.length || !full.startsWith(text.printed)) return;
    // A carriage return at the end waits for the next delta: "\r\n" split in two is a newline, not ^M.
    const upTo = full.endsWith("\r") ? full.length - 1 : full.length;
    const more = full.slice(text.printed.length, upTo);
    if (!more) return;
    text.printed = full.slice(0, upTo);
    this.output.spinner.clear();
    this.output.out(terminalSafe(more));
    this.lineOpen = !more.endsWith("\n");
  }

  private line(text: string): void {
    this.endLine();
    this.output.spinner.clear();
    this.output.out(`${terminalSafe(text)}\n`);
  }

  /**
   * Writes a notice on stderr (its control characters shown, `terminalSafe`), ending a
   * half-written stdout line first; `dim` draws it dimmed on a terminal.
   */
  notice(text: string, dim = false): void {
    this.endLine();
    this.output.spinner.clear();
    const safe = terminalSafe(text);
    this.output.err(dim && this.output.dim ? `\x1b[2m${safe.trimEnd()}\x1b[0m\n` : safe);
  }

  private endLine(): void {
    if (!this.lineOpen) return;
    this.lineOpen = false;
    this.output.out("\n");
  }
}

function firstLine(text: string): string {
  const line = text.split("\n", 1)[0] ?? "";
  return line.length > 200 ? `${line.slice(0, 199)}…` : line;
}
