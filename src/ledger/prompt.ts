import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { ModelRefSchema } from "../../gen/ledger/v1/model_pb.js";
import { MessageSchema, MessageWithPartsSchema, type Message, type MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import { PermissionAction, PermissionRuleSchema } from "../../gen/ledger/v1/session_pb.js";
import type { PromptRequest } from "../../gen/ledger/v1/service_pb.js";
import { newId } from "../ids.js";
import { resolveDrafts, type ResolvedDrafts } from "../parts/resolve.js";
import { insertMessage, insertParts } from "../storage/message-store.js";
import { getSession, rowToSession } from "../storage/session-store.js";
import { subscribe } from "../events/subscription.js";
import { finalAnswer } from "./answers.js";
import type { LedgerDeps, Replier } from "./deps.js";
import { AlreadyExistsError, LimitExceededError, PreconditionError, SessionNotFoundError } from "../errors.js";
import { findStoredPrompt, type StoredPrompt } from "./prompt-replay.js";
import { promptFingerprint } from "./prompt-hash.js";
import { resolveAgent, resolveModel, resolveVariant, sameModel } from "./selection.js";
import { isUniqueViolation, writeSession, type EventKind } from "./writer.js";

export type { StoredPrompt } from "./prompt-replay.js";

/**
 * Stores a prompt as a user message with its parts (design.md §3; OpenCode
 * `SessionPrompt.prompt` + `createUserMessage`), in this order: load the session; resolve
 * agent, model and variant; resolve every draft concurrently; run the `chatMessage` plugin
 * hooks; then ONE transaction: agent/model switch, the message, its parts in order, the events
 * (`agent_switched`, `model_switched`, `message_updated`, `part_updated`..., `session_error`,
 * `synthetic`, `prompted`, `session_updated`) with gap-free `seq`, the session touch, and the
 * permission rules from the deprecated `tools` map (replacing the session's).
 *
 * `message_id` is an idempotency key: the same id with the same content returns the stored
 * message (`replayed: true`, no new rows); with other content → `AlreadyExistsError`.
 *
 * Throws `SessionNotFoundError`, `AgentNotFoundError` (NOT_FOUND), `InvalidArgumentError`,
 * `LimitExceededError`, `PathNotAllowedError`, `AlreadyExistsError`, `PluginError`; on any of
 * them nothing is written.
 */
export async function storePrompt(deps: LedgerDeps, request: PromptRequest): Promise<StoredPrompt> {
  checkCounts(deps, request);
  const row = await getSession(deps.db, request.sessionId);
  if (!row) throw new SessionNotFoundError(request.sessionId);
  const session = rowToSession(row);
  const fingerprint = promptFingerprint(request);
  if (request.messageId) {
    const stored = await findStoredPrompt(deps.db, request.sessionId, request.messageId, fingerprint);
    if (stored) return stored;
  }

  const agent = resolveAgent(deps.config, request.agent);
  const model = resolveModel(deps.config, agent, request.model, session.model);
  const variant = resolveVariant(deps.config, agent, model, request.variant);
  const messageId = request.messageId || newId("msg");
  const drafts = await resolveDrafts(
    { sessionId: session.id, messageId, directory: session.directory, roots: deps.config.roots, limits: deps.config.limits, agent },
    request.parts,
  );
  const draftMessage = create(MessageSchema, {
    kind: {
      case: "user",
      value: {
        id: messageId,
        sessionId: session.id,
        timeCreated: timestampFromDate(new Date()),
        agent: agent.name,
        model,
        variant,
        system: request.system || undefined,
        format: request.format,
        tools: request.tools,
        noReply: request.noReply,
      },
    },
  });
  const hooked = await deps.plugins.chatMessage(draftMessage, drafts.parts);

  try {
    const { result, events } = await writeSession(deps, session.id, async (w) => {
      // A concurrent request with the same message_id may have committed while we resolved.
      if (request.messageId) {
        const stored = await findStoredPrompt(w.trx, session.id, request.messageId, fingerprint);
        if (stored) return stored;
      }
      if (w.session.agent !== agent.name) {
        w.emit({ case: "agentSwitched", value: { previous: w.session.agent, current: agent.name } });
        w.session.agent = agent.name;
      }
      if (model && !sameModel(w.session.model, model)) {
        w.emit({ case: "modelSwitched", value: { previous: w.session.model, current: model } });
        w.session.model = create(ModelRefSchema, model);
      }
      await insertMessage(w.trx, { message: hooked.message, position: w.nextPosition(), requestHash: fingerprint });
      await insertParts(w.trx, hooked.parts.map((part) => ({ part, position: w.nextPosition() })));
      emitPromptEvents(w.emit, hooked.message, hooked.parts, drafts, messageId, request.noReply);
      if (Object.keys(request.tools).length > 0) w.session.permission = permissionsFromTools(request.tools);
      w.emit({ case: "sessionUpdated", value: { session: w.session } });
      return undefined;
    });
    if (result) return result;
    return { message: create(MessageWithPartsSchema, { message: hooked.message, parts: hooked.parts }), events, replayed: false };
  } catch (error) {
    throw mapConflict(error, request, messageId);
  }
}

/**
 * The `Prompt` RPC: stores the prompt; with `no_reply` returns the user message, otherwise runs
 * (or joins) the session's agent loop and returns the final assistant message answering it.
 * Without a configured model provider it throws `PreconditionError` (FAILED_PRECONDITION,
 * reason `NO_MODEL_PROVIDER`) whose metadata names the stored `message_id`. Same errors as
 * `storePrompt` otherwise.
 */
export async function prompt(deps: LedgerDeps, request: PromptRequest): Promise<MessageWithParts> {
  const stored = await storePrompt(deps, request);
  if (request.noReply) return stored.message;
  const replier = requireReplier(deps, stored);
  const userId = stored.message.message!.kind.value!.id;
  await replier.run(request.sessionId);
  const answer = await finalAnswer(deps, request.sessionId, userId);
  if (!answer) throw new PreconditionError("NOT_ANSWERED", `the agent loop stopped before answering message ${userId}`, { message_id: userId });
  return answer;
}

/**
 * The `PromptStream` RPC: stores the prompt and yields the events of its transaction (the user
 * message and each part, with their `seq`) first, then every event of the loop run live
 * (`message_updated`, `part_updated`, `part_delta`, `session_status`...), ending after the final
 * assistant message answering it and the `idle` status. A client that goes away (`signal`) stops
 * only its stream, never the run. On a replayed `message_id` it yields the original events and
 * ends if the message was already answered.
 */
export async function* promptStream(deps: LedgerDeps, request: PromptRequest, signal?: AbortSignal): AsyncGenerator<SessionEvent> {
  const live = subscribe(deps.bus, request.sessionId, signal);
  try {
    const stored = await storePrompt(deps, request);
    yield* stored.events;
    if (request.noReply) return;
    const replier = requireReplier(deps, stored);
    const userId = stored.message.message!.kind.value!.id;
    if (stored.replayed && (await finalAnswer(deps, request.sessionId, userId))) return;
    const lastSeq = stored.events.at(-1)?.seq ?? 0n;
    void replier.run(request.sessionId);
    let answered = false;
    for await (const event of live) {
      if (event.kind.case !== "partDelta" && event.seq <= lastSeq) continue;
      yield event;
      if (isFinalAnswer(event, userId)) answered = true;
      if (answered && event.kind.case === "sessionStatus" && event.kind.value.status.case === "idle") return;
    }
  } finally {
    live.close();
  }
}

/**
 * The `PromptAsync` RPC: answers with the user message once it is committed (durable); the loop
 * runs in the background (unless `no_reply`). Throws like `storePrompt`, and
 * `NO_MODEL_PROVIDER` when a reply is wanted but no provider is configured (the message stays stored).
 */
export async function promptAsync(deps: LedgerDeps, request: PromptRequest): Promise<MessageWithParts> {
  const stored = await storePrompt(deps, request);
  if (!request.noReply) void requireReplier(deps, stored).run(request.sessionId);
  return stored.message;
}

/** The `Abort` RPC: cancels the session's running loop; false when none ran. Throws `SessionNotFoundError`. */
export async function abortSession(deps: LedgerDeps, sessionId: string): Promise<boolean> {
  if (!(await getSession(deps.db, sessionId))) throw new SessionNotFoundError(sessionId);
  return (await deps.replier?.abort(sessionId)) ?? false;
}

/** True for the `message_updated` of a completed assistant message that ends the answer to `userId`. */
function isFinalAnswer(event: SessionEvent, userId: string): boolean {
  if (event.kind.case !== "messageUpdated") return false;
  const message = event.kind.value.message?.kind;
  if (message?.case !== "assistant" || message.value.parentId !== userId || !message.value.time?.completed) return false;
  return message.value.error !== undefined || message.value.finish !== "tool-calls";
}

function emitPromptEvents(
  emit: (kind: EventKind) => SessionEvent,
  message: Message,
  parts: Part[],
  drafts: ResolvedDrafts,
  messageId: string,
  noReply: boolean,
): void {
  emit({ case: "messageUpdated", value: { message } });
  for (const part of parts) emit({ case: "partUpdated", value: { part } });
  for (const problem of drafts.problems) {
    emit({
      case: "sessionError",
      value: { messageId, error: { message: problem.message, kind: { case: "fileRead", value: { path: problem.path } } } },
    });
  }
  const synthetic = drafts.syntheticIds.filter((id) => parts.some((p) => p.id === id));
  if (synthetic.length > 0) emit({ case: "synthetic", value: { messageId, partIds: synthetic } });
  emit({ case: "prompted", value: { messageId, noReply } });
}

/** OpenCode turns `tools: {name: bool}` into permission rules `{permission: name, pattern: "*", action}`. */
function permissionsFromTools(tools: Record<string, boolean>) {
  return Object.entries(tools).map(([permission, enabled]) =>
    create(PermissionRuleSchema, { permission, pattern: "*", action: enabled ? PermissionAction.ALLOW : PermissionAction.DENY }),
  );
}

function checkCounts(deps: LedgerDeps, request: PromptRequest): void {
  const max = deps.config.limits.parts_per_prompt;
  if (request.parts.length > max) throw new LimitExceededError("parts", "parts_per_prompt", max, request.parts.length, "parts");
}

function mapConflict(error: unknown, request: PromptRequest, messageId: string): unknown {
  if (isUniqueViolation(error, "message_pkey")) {
    return new AlreadyExistsError("message_id", messageId, "is already used by another session or prompt");
  }
  if (isUniqueViolation(error, "part_pkey")) {
    const id = /\(id\)=\(([^)]+)\)/.exec(String((error as { detail?: unknown }).detail))?.[1] ?? "";
    const index = request.parts.findIndex((p) => p.kind.value?.id === id);
    return new AlreadyExistsError(index >= 0 ? `parts[${index}].id` : "parts", id, "is already used by another part");
  }
  return error;
}

function requireReplier(deps: LedgerDeps, stored: StoredPrompt): Replier {
  if (deps.replier?.available) return deps.replier;
  const user = stored.message.message?.kind.value;
  throw new PreconditionError(
    "NO_MODEL_PROVIDER",
    `no_reply: the message ${user?.id} was stored, but no model provider is configured to answer it; add a provider to ledger.json or send no_reply`,
    { message_id: user?.id ?? "", session_id: user?.sessionId ?? "" },
  );
}
