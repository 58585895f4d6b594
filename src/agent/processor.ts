import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import {
  FilePartSchema,
  PartSchema,
  PatchPartSchema,
  SnapshotPartSchema,
  ReasoningPartSchema,
  StepFinishPartSchema,
  StepStartPartSchema,
  TextPartSchema,
  ToolPartSchema,
  ToolStateSchema,
  type FilePart,
  type Part,
  type ReasoningPart,
  type TextPart,
  type ToolPart,
} from "../../gen/ledger/v1/part_pb.js";
import { newId } from "../ids.js";
import { logger } from "../observe/log.js";
import type { SessionLedger } from "../ledger/session-ledger.js";
import { tokens, type LoopEvent, type StepUsage } from "./ai-sdk-events.js";

/** Longest time (ms) a streaming text/reasoning part goes without its full text being stored. */
export const SNAPSHOT_INTERVAL_MS = 100;

/** How one model step ended. */
export interface StepResult {
  finishReason?: string;
  usage?: StepUsage;
  /** The stream's error, when it failed. */
  error?: unknown;
  aborted: boolean;
  /** True when the step produced any part besides step_start (text, reasoning, tool). */
  produced: boolean;
  /** The step's structured output (JSON matching the requested schema), when it produced one. */
  structured?: unknown;
  /** Why a requested structured output is missing or invalid. */
  structuredError?: unknown;
}

/**
 * Carries the progress of running tool calls (bash output so far) from the tools to the step
 * processor, which stores it on the call's running tool part. One per loop; `emit` is handed to
 * the tools (`createTools({ progress })`), `attach` is called by `processStep`.
 */
export class ToolProgress {
  #handler?: (callId: string, update: { title?: string; metadata: Record<string, unknown> }) => void;
  /** Reports progress of the call `callId`; dropped when no step is attached. */
  readonly emit = (callId: string, update: { title?: string; metadata: Record<string, unknown> }): void => this.#handler?.(callId, update);
  /** Routes progress to `handler` until the returned function is called. */
  attach(handler: (callId: string, update: { title?: string; metadata: Record<string, unknown> }) => void): () => void {
    this.#handler = handler;
    return () => {
      if (this.#handler === handler) this.#handler = undefined;
    };
  }
}

/** Snapshots around a step (see src/snapshot): the tree before it, and what it changed. */
export interface StepSnapshots {
  /** Records the session directory now; the snapshot id, or undefined when none was taken. */
  start(): Promise<string | undefined>;
  /** Records it again after the step: the new snapshot id and the files changed since `before`. */
  finish(before: string): Promise<{ after?: string; files: string[] }>;
}

/**
 * The snapshot before a step, taken lazily (OpenCode takes one at every step start): just before
 * the step's first call of a tool that may change files (`ensure`, which the registry calls), so
 * a step that calls none costs no git run. Files cannot change before a tool runs.
 */
export class StepSnapshot {
  #before?: string;
  #pending?: Promise<void>;

  constructor(readonly snapshots: StepSnapshots) {}

  /** Takes the snapshot once (later calls wait for the same one); never rejects. */
  readonly ensure = (): Promise<void> =>
    (this.#pending ??= this.snapshots.start().then(
      (hash) => void (this.#before = hash),
      () => undefined,
    ));

  /** The snapshot id once taken. */
  get before(): string | undefined {
    return this.#before;
  }
}

/** Where the step's parts go: the session ledger and the assistant message they belong to. */
export interface StepTarget {
  ledger: SessionLedger;
  sessionId: string;
  messageId: string;
  /** Turns usage into USD for the step_finish part. */
  cost(usage: StepUsage): number;
  /** Progress of running tool calls, stored on their running parts (throttled to one write per 100 ms). */
  progress?: ToolProgress;
  /**
   * The step's lazy snapshot: once taken (a tool that may change files ran), it goes on
   * `step_start`, the snapshot after the step on `step_finish`, and a `patch` part lists the
   * files the step changed.
   */
  snapshot?: StepSnapshot;
}

interface Streaming {
  part: Part;
  value: TextPart | ReasoningPart;
  /**
   * The text as the provider sent it. Each snapshot stores a copy of it in `value.text`, which
   * storage cleans in place (NUL, lone surrogates → U+FFFD), so a surrogate pair split across two
   * deltas is whole again in the next snapshot.
   */
  raw: string;
  seq: bigint;
  storedAt: number;
  /** Length of `value.text` in Unicode code points (delta offsets count these). */
  length: number;
  /** The trailing snapshot due `SNAPSHOT_INTERVAL_MS` after the last one, when deltas arrived since. */
  timer?: NodeJS.Timeout;
  /** A snapshot the timer started; awaited before the next delta is published or the block ends, so writes and deltas stay in order. */
  writing?: Promise<void>;
}

/**
 * Writes one model step into the ledger as it streams (OpenCode `SessionProcessor`): a
 * `step_start` part when the provider starts the step (a request refused up front writes none); `text`/`reasoning` parts created on start, extended by live `part_delta`
 * events and stored in full at most every `SNAPSHOT_INTERVAL_MS` (a write started at most one
 * interval after their latest delta, even while the model is silent) and at their end; `tool` parts
 * moving pending → running → completed | error; and a `step_finish` part with reason, tokens and
 * cost. Whatever way the stream ends (finish, error, abort, a thrown iterator), open text parts
 * keep what they have and get `time.end`, and unfinished tool parts end in `error`.
 *
 * Provider metadata (`metadata` of text, reasoning and tool parts; e.g. `{ anthropic: { signature } }`,
 * `{ openai: { itemId, reasoningEncryptedContent } }`) is taken from the start, delta and end
 * events of a text/reasoning block, the latest one replacing earlier ones (as the AI SDK does
 * when it sends a step back itself; OpenCode's `SessionProcessor` does the same), and from the
 * tool-call event. A text/reasoning part cut off before its end event keeps its text but loses
 * its metadata: a signature or item id of an unfinished block is not valid provider state.
 */
export async function processStep(target: StepTarget, events: AsyncIterable<LoopEvent>): Promise<StepResult> {
  const { ledger } = target;
  const streaming = new Map<string, Streaming>();
  const tools = new Map<string, { part: Part; value: ToolPart }>();
  const result: StepResult = { aborted: false, produced: false };
  const newPart = (kind: Part["kind"]) =>
    create(PartSchema, { id: newId("prt"), sessionId: target.sessionId, messageId: target.messageId, kind });
  let stepStart: Part | undefined;
  let stepFinish: Part | undefined;
  // Progress writes of running calls, one at a time; a call's final state waits for them.
  let progressChain: Promise<unknown> = Promise.resolve();
  const progressTimers = new Map<string, { last: number; timer?: NodeJS.Timeout }>();
  const saveProgress = (callId: string) => {
    const tool = tools.get(callId);
    if (!tool || tool.value.state?.status.case !== "running") return;
    progressChain = progressChain.then(() => ledger.savePart(tool.part)).catch(() => undefined);
  };
  const detach = target.progress?.attach((callId, update) => {
    const tool = tools.get(callId);
    const state = tool?.value.state?.status;
    if (!tool || state?.case !== "running") return;
    if (update.title !== undefined) state.value.title = update.title;
    state.value.metadata = asObject(update.metadata);
    const entry = progressTimers.get(callId) ?? { last: 0 };
    progressTimers.set(callId, entry);
    if (entry.timer) return;
    const wait = entry.last + SNAPSHOT_INTERVAL_MS - Date.now();
    const save = () => {
      entry.timer = undefined;
      entry.last = Date.now();
      saveProgress(callId);
    };
    if (wait <= 0) save();
    else entry.timer = setTimeout(save, wait);
  });
  const settleProgress = async (callId: string) => {
    const entry = progressTimers.get(callId);
    if (entry?.timer) clearTimeout(entry.timer);
    progressTimers.delete(callId);
    await progressChain;
  };

  try {
    for await (const event of events) {
      switch (event.type) {
        case "step-start":
          stepStart = newPart({ case: "stepStart", value: create(StepStartPartSchema) });
          await ledger.savePart(stepStart);
          break;
        case "text-start":
        case "reasoning-start": {
          const part =
            event.type === "text-start"
              ? newPart({
                  case: "text",
                  value: create(TextPartSchema, { time: { start: timestampNow() }, metadata: event.metadata && asObject(event.metadata) }),
                })
              : newPart({
                  case: "reasoning",
                  value: create(ReasoningPartSchema, {
                    time: { start: timestampNow() },
                    metadata: event.metadata && asObject(event.metadata),
                  }),
                });
          const value = part.kind.value as TextPart | ReasoningPart;
          // A block started again under the same id replaces the open one, which ends as a block cut
          // off does (its text kept, its provider state dropped), not left half-stored.
          const replaced = streaming.get(event.id);
          if (replaced) {
            streaming.delete(event.id);
            await settled(replaced);
            replaced.value.metadata = undefined;
            await finishStreaming(ledger, replaced);
          }
          const saved = await ledger.savePart(part);
          streaming.set(event.id, { part, value, raw: "", seq: saved.seq, storedAt: Date.now(), length: 0 });
          result.produced = true;
          break;
        }
        case "text-delta":
        case "reasoning-delta": {
          const open = streaming.get(event.id);
          if (!open) break;
          // The latest metadata replaces earlier metadata, as the AI SDK does for its own steps.
          if (event.metadata) open.value.metadata = asObject(event.metadata);
          if (event.text === "") break;
          await written(open);
          open.raw += event.text;
          ledger.publishDelta({
            messageId: target.messageId,
            partId: open.part.id,
            field: "text",
            delta: event.text,
            seq: open.seq,
            offset: BigInt(open.length),
          });
          open.length += codePoints(event.text);
          const wait = open.storedAt + SNAPSHOT_INTERVAL_MS - Date.now();
          if (wait <= 0) {
            clearTimeout(open.timer);
            open.timer = undefined;
            await snapshot(ledger, open);
          } else open.timer ??= setTimeout(() => trailingSnapshot(ledger, open), wait);
          break;
        }
        case "text-end":
        case "reasoning-end": {
          const open = streaming.get(event.id);
          if (!open) break;
          streaming.delete(event.id);
          await settled(open);
          if (event.metadata) open.value.metadata = asObject(event.metadata);
          await finishStreaming(ledger, open);
          break;
        }
        case "tool-input-start": {
          const tool = toolPart(tools, newPart, event.callId, event.tool);
          tool.value.state = create(ToolStateSchema, { status: { case: "pending", value: { input: {}, raw: "" } } });
          await ledger.savePart(tool.part);
          result.produced = true;
          break;
        }
        case "tool-call": {
          const tool = toolPart(tools, newPart, event.callId, event.tool);
          if (event.metadata) tool.value.metadata = asObject(event.metadata);
          tool.value.state = create(ToolStateSchema, {
            status: { case: "running", value: { input: asObject(event.input), title: "", timeStart: timestampNow() } },
          });
          await ledger.savePart(tool.part);
          result.produced = true;
          break;
        }
        case "tool-result":
        case "tool-error": {
          await settleProgress(event.callId);
          const tool = toolPart(tools, newPart, event.callId, event.tool);
          const running = tool.value.state?.status.case === "running" ? tool.value.state.status.value : undefined;
          const started = running ? running.timeStart : timestampNow();
          tool.value.state = create(ToolStateSchema, {
            status:
              event.type === "tool-result"
                ? {
                    case: "completed",
                    value: { input: asObject(event.input), ...toolOutput(event.output), timeStart: started, timeEnd: timestampNow() },
                  }
                : {
                    case: "error",
                    // The progress a running call reported (bash: its output so far) stays.
                    value: {
                      input: asObject(event.input),
                      error: errorText(event.error),
                      metadata: running?.metadata,
                      timeStart: started,
                      timeEnd: timestampNow(),
                    },
                  },
          });
          tools.delete(event.callId);
          await ledger.savePart(tool.part);
          break;
        }
        case "step-finish": {
          result.finishReason = event.finishReason;
          result.usage = event.usage;
          const u = event.usage;
          stepFinish = newPart({
            case: "stepFinish",
            value: create(StepFinishPartSchema, {
              reason: event.finishReason,
              cost: target.cost(u),
              tokens: tokens(u),
            }),
          });
          await ledger.savePart(stepFinish);
          break;
        }
        case "error":
          result.error = event.error;
          break;
        case "abort":
          result.aborted = true;
          break;
        case "structured":
          if (event.error === undefined) result.structured = event.value;
          else result.structuredError = event.error;
          break;
      }
    }
  } catch (error) {
    result.error ??= error;
  } finally {
    detach?.();
    // No trailing snapshot may fire once the step is over, whatever the writes below do.
    for (const open of streaming.values()) clearTimeout(open.timer);
    for (const callId of [...progressTimers.keys()]) await settleProgress(callId);
    for (const open of streaming.values()) await settled(open);
    for (const open of streaming.values()) {
      // Cut off before its end: the provider never finished this item, so its state is not kept.
      open.value.metadata = undefined;
      // One block's failed write does not leave the others (and the tools below) unfinished.
      await finishStreaming(ledger, open).catch((error: unknown) => {
        result.error ??= error;
      });
    }
    const why = result.aborted ? "aborted" : "Tool execution was interrupted";
    for (const tool of tools.values()) {
      const state = tool.value.state?.status;
      const input = state?.value && "input" in state.value ? state.value.input : undefined;
      const running = state?.case === "running" ? state.value : undefined;
      tool.value.state = create(ToolStateSchema, {
        status: {
          case: "error",
          value: { input, error: why, metadata: running?.metadata, timeStart: running?.timeStart, timeEnd: timestampNow() },
        },
      });
      await ledger.savePart(tool.part);
    }
    // Tools may finish after the provider's finish-step: the files are compared once the step is over.
    // Taken only when a tool that may change files ran: record what the step changed.
    const before = target.snapshot?.before;
    if (before)
      await recordPatch(target, before, stepStart, stepFinish, newPart).catch((error: unknown) =>
        logger.warn("could not record the step's patch", { session_id: target.sessionId, message_id: target.messageId, error }),
      );
  }
  return result;
}

/**
 * After a step that took a snapshot: it goes on the `step_start` part, the snapshot after the step
 * on its `step_finish` part, and a `patch` part (hash = the snapshot before) lists the files it
 * changed, when it changed any. A step cut short before its finish (aborted, or a provider error
 * after a tool ran) has no `step_finish`: the snapshot after it goes on a `snapshot` part instead,
 * so the turn's diff (`snapshotRange`) still reaches what it changed.
 */
async function recordPatch(
  target: StepTarget,
  before: string,
  stepStart: Part | undefined,
  stepFinish: Part | undefined,
  newPart: (kind: Part["kind"]) => Part,
): Promise<void> {
  if (stepStart?.kind.case === "stepStart") {
    stepStart.kind.value.snapshot = before;
    await target.ledger.savePart(stepStart);
  }
  const changed = await target.snapshot!.snapshots.finish(before);
  if (stepFinish?.kind.case === "stepFinish" && changed.after) {
    stepFinish.kind.value.snapshot = changed.after;
    await target.ledger.savePart(stepFinish);
  } else if (changed.after) {
    await target.ledger.savePart(newPart({ case: "snapshot", value: create(SnapshotPartSchema, { snapshot: changed.after }) }));
  }
  if (changed.files.length > 0)
    await target.ledger.savePart(newPart({ case: "patch", value: create(PatchPartSchema, { hash: before, files: changed.files }) }));
}

/**
 * Stores the text that arrived since the last snapshot once `SNAPSHOT_INTERVAL_MS` has passed,
 * without waiting for another delta: a model that goes quiet mid-block (thinking, a stalled
 * connection) has the write of its stored part started at most one interval after its last
 * delta. A failed write is logged and fails nothing: it changes neither the part's stored seq nor
 * its length, so the next write (a snapshot, or the block's end) stores the whole text again.
 */
function trailingSnapshot(ledger: SessionLedger, open: Streaming): void {
  open.timer = undefined;
  open.writing = snapshot(ledger, open).catch((error: unknown) =>
    logger.warn("could not store a streaming part's snapshot; its next write stores the whole text", {
      session_id: open.part.sessionId,
      part_id: open.part.id,
      error,
    }),
  );
}

/** Waits for a trailing snapshot in flight (it never rejects). */
async function written(open: Streaming): Promise<void> {
  const writing = open.writing;
  open.writing = undefined;
  await writing;
}

/** Cancels a pending trailing snapshot and waits for one in flight: the block's last write follows. */
async function settled(open: Streaming): Promise<void> {
  clearTimeout(open.timer);
  open.timer = undefined;
  await written(open);
}

async function snapshot(ledger: SessionLedger, open: Streaming): Promise<void> {
  open.value.text = open.raw;
  const saved = await ledger.savePart(open.part);
  open.seq = saved.seq;
  open.storedAt = Date.now();
}

async function finishStreaming(ledger: SessionLedger, open: Streaming): Promise<void> {
  open.value.time = { $typeName: "ledger.v1.PartTime", start: open.value.time?.start, end: timestampNow() };
  await snapshot(ledger, open);
}

function toolPart(
  tools: Map<string, { part: Part; value: ToolPart }>,
  newPart: (kind: Part["kind"]) => Part,
  callId: string,
  tool: string,
) {
  let entry = tools.get(callId);
  if (!entry) {
    const part = newPart({ case: "tool", value: create(ToolPartSchema, { callId, tool }) });
    entry = { part, value: part.kind.value as ToolPart };
    tools.set(callId, entry);
  }
  return entry;
}

/**
 * A tool's return value: `{ title, output, metadata, attachments }` (see src/tools/tool-context.ts;
 * `read` attaches images and PDFs as `{ mime, url, filename }`, stored as file parts of the
 * completed state, OpenCode `attachments`), or anything else as text.
 */
function toolOutput(output: unknown): { output: string; title: string; metadata: JsonObject; attachments: FilePart[] } {
  if (output && typeof output === "object" && "output" in output) {
    const o = output as { output: unknown; title?: unknown; metadata?: unknown; attachments?: unknown };
    const attachments = Array.isArray(o.attachments)
      ? o.attachments.flatMap((a: { mime?: unknown; url?: unknown; filename?: unknown }) =>
          typeof a?.mime === "string" && typeof a.url === "string"
            ? [create(FilePartSchema, { mime: a.mime, url: a.url, filename: typeof a.filename === "string" ? a.filename : "" })]
            : [],
        )
      : [];
    return { output: String(o.output), title: typeof o.title === "string" ? o.title : "", metadata: asObject(o.metadata), attachments };
  }
  return { output: typeof output === "string" ? output : JSON.stringify(output), title: "", metadata: {}, attachments: [] };
}

function asObject(value: unknown): JsonObject {
  return value && typeof value === "object" && !Array.isArray(value) ? (JSON.parse(JSON.stringify(value)) as JsonObject) : {};
}

function codePoints(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
