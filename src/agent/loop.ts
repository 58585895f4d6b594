import { create, equals, type JsonObject } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { type AssistantMessage, type UserMessage, UserMessageSummarySchema } from "../../gen/ledger/v1/message_pb.js";
import { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { commandsAllowed, mcpRefusal, rootsForSession, tenantRootsOf } from "../ledger/access.js";
import { newId } from "../ids.js";
import { sessionLedger, type SessionLedger } from "../ledger/session-ledger.js";
import type { LedgerDeps } from "../ledger/deps.js";
import { withParts } from "../ledger/messages.js";
import { getSession } from "../ledger/sessions.js";
import { getMessageRow, listMessageRows } from "../storage/message-store.js";
import type { LoopEvent } from "./ai-sdk-events.js";
import { finishAssistant, startAssistant } from "./assistant-message.js";
import { isOverflow, modelHistory } from "./compacted-history.js";
import { compactSession, pruneSession } from "./compaction.js";
import { nextWork, type Work } from "./conversation.js";
import { historyTarget, toModelMessages } from "./history.js";
import { toMessageError, type MessageErrorInit } from "./message-error.js";
import type { ResolvedModel } from "./providers.js";
import type { LoopDeps } from "./loop-deps.js";
import { processStep, StepSnapshot, ToolProgress, type StepResult, type StepSnapshots } from "./processor.js";
import { askPermission } from "../ledger/permissions.js";
import { diffRange, snapshotRange } from "../ledger/diff.js";
import { namesTool, type Rule } from "../tools/permission.js";
import { runStep } from "./step.js";
import { instructionSections } from "./instructions.js";
import { systemPrompt } from "./system.js";
import { permissionRules } from "../tools/permission.js";
import { mcpToolDefinitions } from "../tools/mcp-tools.js";
import { BUILTIN_TOOLS, createTools } from "../tools/registry.js";
import type { ToolDefinition } from "../tools/tool-context.js";
import { sessionTodoList } from "./todo-list.js";
import { turnText } from "./summary.js";
import { stepCost } from "./usage.js";

/** Retries of a `json_schema` answer when the request sets `retry_count` 0 (OpenCode's default). */
export const DEFAULT_STRUCTURED_RETRIES = 2;
/** Most retries of a structured output, whatever `retry_count` says (the proto's bound). */
export const MAX_STRUCTURED_RETRIES = 10;

/** `finish` of an answer's last message when the agent's step limit cut it short. */
export const STEP_LIMIT_FINISH = "step-limit";

/** Steps per user message when the agent sets no `steps` limit. */
export const DEFAULT_MAX_STEPS = 25;

/**
 * Runs a session's agent loop until every user message is answered (OpenCode
 * `SessionPrompt.loop`): for the earliest unanswered user message, one assistant message per
 * model step (`parent_id` = the user message, its agent, model, variant, `path`), repeating
 * while the model calls tools, up to the agent's step limit (the last allowed step runs without
 * tools). Emits `session_status` busy at the start and idle at the end (only when there was
 * work). Errors end up on the assistant message; an unknown model also emits `session_error`.
 * A step whose input plus the model's output reserve passes its context limit (`isOverflow`,
 * with `compaction.auto` on) makes the loop compact the session (`compactSession`, OpenCode
 * `SessionCompaction`): before the next step when the turn goes on (which then continues from
 * the summary), else right after the turn. Before going idle it prunes old tool outputs
 * (`pruneSession`, OpenCode `SessionCompaction.prune`).
 * Stops early when `signal` aborts: the current message gets an aborted error (`interrupted`
 * when the reason is a hand-over at shutdown, `LoopHandedOver`) and `time.completed`. `resume`
 * (ResumeSession) continues that user message's interrupted answer.
 */
export async function runLoop(deps: LoopDeps, sessionId: string, signal: AbortSignal, options: { resume?: string } = {}): Promise<void> {
  const ledger = sessionLedger(deps, sessionId);
  let busy = false;
  let turn: string | undefined;
  // The user message whose last step passed its model's context limit: compact before going on.
  let overflowed: UserMessage | undefined;
  try {
    while (!signal.aborted) {
      const work = await findWork(deps, sessionId, options.resume);
      if (turn && work?.user.id !== turn) await summarizeTurn(deps, ledger, sessionId, turn);
      if (overflowed?.model) {
        // OpenCode compacts before the next step when the turn goes on (then continues it), or once it ended.
        await compactSession(deps, ledger, sessionId, {
          model: overflowed.model,
          agent: overflowed.agent,
          variant: overflowed.variant,
          auto: true,
          signal,
        });
        overflowed = undefined;
        if (work?.user.id !== turn) turn = undefined; // summarized above
        continue;
      }
      turn = work?.user.id;
      if (!work) break;
      if (!busy) await ledger.setStatus({ case: "busy", value: {} });
      busy = true;
      const outcome = await answerStep(deps, ledger, sessionId, work, signal);
      if (outcome === "overflow") overflowed = work.user;
      if (outcome === "stop") break;
    }
    if (turn) await summarizeTurn(deps, ledger, sessionId, turn);
    if (busy && !signal.aborted) await pruneSession(deps, ledger, sessionId);
  } finally {
    if (busy) await ledger.setStatus({ case: "idle", value: {} });
  }
}

/**
 * When a turn ends: stores on its user message its `summary` (OpenCode
 * `SessionSummary.summarize`): `title` and `body` derived from the stored text ({@link turnText},
 * no model call, unlike OpenCode), and `diffs`, the files its steps changed (none when they took
 * no snapshots). Saves nothing when the summary is empty or already stored as it is.
 */
async function summarizeTurn(deps: LoopDeps, ledger: SessionLedger, sessionId: string, userId: string): Promise<void> {
  // The turn only: the user message and what came after it (not the whole session each turn).
  const userRow = await getMessageRow(deps.db, sessionId, userId);
  if (!userRow) return;
  const messages = await withParts(deps.db, await listMessageRows(deps.db, sessionId, { afterPosition: Number(userRow.position) - 1 }));
  const entry = messages.find((m) => m.message?.kind.case === "user" && m.message.kind.value.id === userId);
  if (entry?.message?.kind.case !== "user") return;
  const range = deps.snapshots ? snapshotRange(messages, userId) : undefined;
  const diffs = range ? await diffRange(deps, (await getSession(deps, sessionId)).directory, range) : [];
  const summary = create(UserMessageSummarySchema, { ...turnText(messages, userId), diffs });
  const user = entry.message.kind.value;
  if (!summary.title && !summary.body && diffs.length === 0 && !user.summary) return;
  if (user.summary && equals(UserMessageSummarySchema, user.summary, summary)) return;
  user.summary = summary;
  await ledger.saveMessage(entry.message);
}

/** The built-in tools that may change files (`changesFiles`: write, edit, bash). */
const FILE_CHANGING_TOOLS = BUILTIN_TOOLS.filter((d) => d.changesFiles).map((d) => d.id);

/**
 * Whether a step with these rules may change files: some call of a tool that changes files
 * (write, edit, bash) could be allowed or asked (not every rule for them denies).
 */
export function mayChangeFiles(rules: readonly Rule[]): boolean {
  return FILE_CHANGING_TOOLS.some((tool) => {
    let possible = true; // no rule: allowed
    for (const rule of rules) {
      if (!namesTool(rule, tool)) continue;
      if (rule.pattern === "*") possible = rule.action !== "deny";
      else if (rule.action !== "deny") possible = true;
    }
    return possible;
  });
}

/**
 * The snapshots of one step (`step_start.snapshot`, `patch`): the session directory before the
 * step and after it. A tree over the snapshot limits gets none, and a `session_error` says why.
 */
function stepSnapshots(deps: LoopDeps, ledger: SessionLedger, directory: string, messageId: string): StepSnapshots | undefined {
  const snapshots = deps.snapshots;
  if (!snapshots) return undefined;
  const track = async () => {
    const result = await snapshots.track(directory);
    if (result.skipped) {
      await ledger.reportError({
        case: "sessionError",
        value: { messageId, error: { message: result.skipped, kind: { case: "unknown", value: {} } } },
      });
    }
    return result.hash;
  };
  return {
    start: track,
    async finish(before) {
      const after = await track();
      return { after, files: after ? await snapshots.changedFiles(directory, before, after) : [] };
    },
  };
}

/** The next user message to answer, or undefined. */
export async function findWork(deps: LedgerDeps, sessionId: string, resume?: string): Promise<Work | undefined> {
  const maxSteps = (user: UserMessage) => deps.config.agents.get(user.agent)?.steps ?? DEFAULT_MAX_STEPS;
  return nextWork(await withParts(deps.db, await listMessageRows(deps.db, sessionId, {})), { maxSteps, resume });
}

async function answerStep(
  deps: LoopDeps,
  ledger: SessionLedger,
  sessionId: string,
  work: Work,
  signal: AbortSignal,
): Promise<"continue" | "overflow" | "stop"> {
  const session = await getSession(deps, sessionId);
  const user = work.user;
  const agent = deps.config.agents.get(user.agent) ?? deps.config.agents.get(deps.config.defaultAgent)!;
  const assistant = await startAssistant(ledger, session.directory, user);
  const subtask = work.subtasks[0];
  if (subtask) return runSubtask(deps, ledger, sessionId, assistant, subtask, signal);
  let model: ResolvedModel;
  try {
    if (!user.model) throw new Error("the user message names no model and none is configured");
    model = await deps.models.resolve(user.model);
  } catch (error) {
    const messageError = toMessageError(error, user.model?.providerId ?? "", false);
    await ledger.reportError({ case: "sessionError", value: { messageId: assistant.id, error: messageError } });
    await finishAssistant(ledger, assistant, { error: messageError });
    return "stop";
  }
  const maxSteps = agent.steps ?? DEFAULT_MAX_STEPS;
  const lastStep = work.steps + 1 >= maxSteps;
  // Hidden subagents are offered only when the user names them (an agent mention may name one).
  const subagents = [...deps.config.agents.values()]
    .filter((a) => a.mode !== "primary" && (!a.hidden || work.mentioned.includes(a.name)))
    .map((a) => a.name);
  const schema = user.format?.kind.case === "jsonSchema" ? (user.format.kind.value.schema ?? {}) : undefined;
  // A prompt stored before retry_count was bounded (protovalidate: at most 10) is held to it too.
  const tries =
    schema && user.format?.kind.case === "jsonSchema"
      ? Math.min(user.format.kind.value.retryCount || DEFAULT_STRUCTURED_RETRIES, MAX_STRUCTURED_RETRIES) + 1
      : 1;
  // Read at every step, as OpenCode does: an edited AGENTS.md counts from the next step on.
  const instructions = await instructionSections({
    directory: session.directory,
    instructions: deps.config.instructions,
    ceilings: await tenantRootsOf(deps, session.id),
  });
  const base =
    systemPrompt(agent, session.directory, user.system, instructions) +
    (lastStep ? "\n\nThis is your last step: answer now with text only, no more tool calls." : "");
  let hint = "";
  let result: StepResult;
  const progress = new ToolProgress();
  const snapshots =
    lastStep || !mayChangeFiles(permissionRules(agent, session.permission))
      ? undefined
      : stepSnapshots(deps, ledger, session.directory, assistant.id);
  const snapshot = snapshots && new StepSnapshot(snapshots);
  const roots = await rootsForSession(deps, session.id);
  const withoutCommands = !(await commandsAllowed(deps, session.id));
  const mcpTools = lastStep ? [] : await mcpToolsFor(deps, session.id, signal);
  for (let attempt = 1; ; attempt++) {
    result = await runStep({
      ledger,
      sessionId,
      messageId: assistant.id,
      model,
      variant: user.variant,
      agent: { temperature: agent.temperature, topP: agent.topP, options: agent.options },
      system: base + hint,
      recordContent: deps.config.telemetry.recordContent,
      messages: toModelMessages(modelHistory(work.conversation, { continuing: true }), historyTarget(model)),
      tools: lastStep
        ? undefined
        : createTools({
            agent,
            rules: session.permission,
            context: { directory: session.directory, roots, limits: deps.config.limits },
            withoutCommands,
            mcpTools,
            subagents,
            mentioned: work.mentioned,
            runTask: deps.runTask?.(sessionId),
            todos: sessionTodoList(deps, sessionId),
            asker: (request, callSignal) =>
              askPermission(
                deps,
                {
                  sessionId,
                  messageId: assistant.id,
                  callId: request.callId,
                  permission: request.permission,
                  patterns: request.patterns,
                  metadata: JSON.parse(JSON.stringify(request.metadata)) as JsonObject,
                },
                callSignal,
              ),
            progress: progress.emit,
            beforeChange: snapshot?.ensure,
          }),
      progress,
      snapshot,
      signal,
      retry: deps.config.retry,
      schema,
    });
    deps.metrics?.observeStep(model, result);
    const wantsRetry =
      schema && !result.error && !result.aborted && result.finishReason !== "tool-calls" && result.structured === undefined;
    if (!wantsRetry || attempt >= tries) break;
    const why = result.structuredError instanceof Error ? result.structuredError.message : "no JSON output";
    await ledger.savePart(
      create(PartSchema, {
        id: newId("prt"),
        sessionId,
        messageId: assistant.id,
        kind: {
          case: "retry",
          value: {
            attempt,
            error: { message: why, kind: { case: "structuredOutput", value: { retries: attempt } } },
            timeCreated: timestampNow(),
          },
        },
      }),
    );
    hint = `\n\nYour previous answer did not match the required JSON schema (${why}). Answer again with JSON only.`;
  }
  const aborted = result.aborted || signal.aborted;
  let error: MessageErrorInit | undefined =
    result.error || aborted ? toMessageError(result.error, model.providerId, aborted, signal.reason) : undefined;
  if (!error && result.finishReason === "length")
    error = { message: "The model stopped at its output token limit", kind: { case: "outputLength", value: {} } };
  if (!error && schema && result.finishReason !== "tool-calls" && result.structured === undefined) {
    error = {
      message: `The model did not produce JSON matching the schema after ${tries} attempts`,
      kind: { case: "structuredOutput", value: { retries: tries - 1 } },
    };
  }
  // The last allowed step may still call tools: it ends the answer all the same.
  const finishReason = lastStep && result.finishReason === "tool-calls" ? STEP_LIMIT_FINISH : result.finishReason;
  await finishAssistant(ledger, assistant, {
    error,
    finish: finishReason,
    usage: result.usage,
    cost: result.usage ? stepCost(model.config, result.usage) : 0,
    structured: result.structured,
  });
  if (error) return "stop";
  return deps.config.compaction.auto && isOverflow(result.usage, model.config.limit) ? "overflow" : "continue";
}

/**
 * The MCP servers' tools for a step of session `sessionId` (none without MCP servers, or for a
 * tenant's session without `tenants.<name>.mcp`); starts the servers not running yet.
 */
async function mcpToolsFor(deps: LoopDeps, sessionId: string, signal: AbortSignal): Promise<ToolDefinition<unknown>[]> {
  if (!deps.mcp || Object.keys(deps.config.mcp).length === 0 || (await mcpRefusal(deps, sessionId)) !== undefined) return [];
  return mcpToolDefinitions(await deps.mcp.tools(signal), deps.mcp, deps.config.limits.mcp_item_bytes) as ToolDefinition<unknown>[];
}

/**
 * Runs one subtask part of the user message as a `task` tool call (call id = the part id) in its
 * own assistant message, finishing with `tool-calls` so the loop goes on to the next subtask and
 * then to the model. OpenCode runs only the last subtask; we run all of them, in order.
 */
async function runSubtask(
  deps: LoopDeps,
  ledger: SessionLedger,
  sessionId: string,
  assistant: AssistantMessage,
  subtask: Work["subtasks"][number],
  signal: AbortSignal,
): Promise<"continue" | "stop"> {
  const input = { description: subtask.description, prompt: subtask.prompt, subagent_type: subtask.agent };
  const events = (async function* (): AsyncIterable<LoopEvent> {
    yield { type: "step-start" };
    yield { type: "tool-call", callId: subtask.partId, tool: "task", input };
    try {
      const runTask = deps.runTask?.(sessionId);
      if (!runTask) throw new Error("subagents are not available here");
      const output = await runTask(
        { description: subtask.description, prompt: subtask.prompt, agent: subtask.agent, model: subtask.model },
        signal,
      );
      yield { type: "tool-result", callId: subtask.partId, tool: "task", input, output };
    } catch (error) {
      yield { type: "tool-error", callId: subtask.partId, tool: "task", input, error };
    }
  })();
  const result = await processStep({ ledger, sessionId, messageId: assistant.id, cost: () => 0 }, events);
  const error = signal.aborted ? toMessageError(undefined, "", true, signal.reason) : undefined;
  await finishAssistant(ledger, assistant, { error, finish: "tool-calls" });
  return error || result.error ? "stop" : "continue";
}
