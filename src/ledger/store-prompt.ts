import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { ModelRefSchema } from "../../gen/ledger/v1/model_pb.js";
import { MessageSchema, MessageWithPartsSchema, type Message, type MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import type { Span } from "@opentelemetry/api";
import { PermissionAction, PermissionRuleSchema, type Session } from "../../gen/ledger/v1/session_pb.js";
import { PromptRequestSchema, type PromptRequest } from "../../gen/ledger/v1/service_pb.js";
import { checkSessionStillAllowed, mcpRefusal, rootsForSession } from "./access.js";
import { isAnswered } from "./answer.js";
import { newId } from "../ids.js";
import { annotateActiveSpan, inSpan } from "../observe/spans.js";
import { requestPartField, resolveDrafts, type PartField, type ResolvedDrafts } from "../parts/resolve.js";
import { makeStorable } from "../storage/jsonb.js";
import { insertMessage } from "../storage/message-store.js";
import { insertParts } from "../storage/part-store.js";
import { duplicateId, isUniqueViolation } from "../storage/pg-errors.js";
import { knownSession, readKnownSession, sessionCache, type KnownSession } from "../storage/session-cache.js";
import type { RowChange } from "../storage/session-write.js";
import type { LedgerDeps } from "./deps.js";
import {
  AlreadyExistsError,
  InvalidArgumentError,
  LimitExceededError,
  PreconditionError,
  SessionNotFoundError,
  StoppedWaitingError,
} from "../errors.js";
import { checkTimestamps, jsonFieldSizes, limitJsonFields } from "./json-fields.js";
import { findStoredPrompt, type StoredPrompt } from "./prompt-replay.js";
import { promptFingerprint } from "./prompt-hash.js";
import { applyRevert } from "./revert.js";
import { resolveAgent, resolveModel, resolveVariant, sameModel, type ModelChoice } from "./selection.js";
import { writeSession, writeSessionOnce, type EventKind, type OnceEvent } from "./writer.js";

export type { StoredPrompt } from "./prompt-replay.js";

/** Extras of one `storePrompt` call. */
export interface StorePromptOptions {
  /**
   * Events to append in the prompt's transaction, after its parts' events and before
   * `prompted` (so a replayed `message_id` returns them too); given the new message's id.
   * E.g. `command` for the `Command` RPC. Not called for a replayed prompt.
   */
  extraEvents?: (messageId: string) => EventKind[];
  /**
   * Names the request's i-th draft in errors (default `parts[i]`). The `Command` RPC's drafts
   * are its template's and then the client's, so it names them as the client sent them.
   */
  partField?: PartField;
  /**
   * The call's signal (its deadline, its client going away): checked when the drafts are
   * resolved, after the wait for the session's earlier prompts and inside the write's transaction
   * (the one-statement write, once started, completes); when it has fired nothing is written and
   * `StoppedWaitingError` (`NOT_STORED`; DEADLINE_EXCEEDED or CANCELED) is thrown, so an ended
   * call does not store its prompt later, after a prompt sent after it.
   */
  signal?: AbortSignal;
}

/**
 * Stores a prompt as a user message with its parts (docs/design.md §3; OpenCode
 * `SessionPrompt.prompt` + `createUserMessage`), in this order: load the session; resolve
 * agent (`resolveAgent`: the request's, else the session's, else the default), model and variant; resolve every draft concurrently; run the `chatMessage` plugin
 * hooks; then ONE transaction: the session's pending revert (`applyRevert`: `message_removed`,
 * `part_removed`), agent/model switch, the message, its parts in order, the events
 * (`agent_switched`, `model_switched`, `message_updated`, `part_updated`..., `session_error`,
 * `synthetic`, `prompted`, `session_updated`) with gap-free `seq`, the session touch, and the
 * permission rules from the deprecated `tools` map (replacing the session's).
 *
 * Every string of `request` is made storable first (`makeStorable`: NUL and lone surrogates →
 * U+FFFD, non-finite numbers in Structs → null), in place.
 *
 * `message_id` is an idempotency key: the same id with the same content returns the stored
 * message (`replayed: true`, no new rows); with other content → `AlreadyExistsError`. Such a retry
 * skips `checkSessionStillAllowed` when it starts no run (`no_reply`, the answer is stored, or
 * this process runs the session's loop, which it joins).
 *
 * While tracing runs (docs/operations.md#tracing), the draft resolution and the write are the
 * spans `ledger.resolve_drafts` and `ledger.write` (attributes `ledger.session_id`,
 * `ledger.message_id`), and the active span gets the same two attributes.
 *
 * Throws `SessionNotFoundError`, `AgentNotFoundError` (NOT_FOUND), `InvalidArgumentError`,
 * `LimitExceededError`, `PathNotAllowedError` (also on `session_id` for a session outside
 * `session_directories`), `AlreadyExistsError`, `PluginError`, `StoppedWaitingError`
 * (`NOT_STORED`, when `options.signal` fired before the write); on any of them nothing is written.
 */
export async function storePrompt(deps: LedgerDeps, request: PromptRequest, options: StorePromptOptions = {}): Promise<StoredPrompt> {
  checkCounts(deps, request, options.partField ?? requestPartField);
  // The storage rule, applied up front: the fingerprint, plugins and drafts see what will be stored.
  makeStorable(request);
  return storeResolved(deps, request, options, await knownSession(deps.db, request.sessionId), false);
}

/**
 * `storePrompt` from step 2 on, against `known` (the session as cached or just read). Its write
 * is ONE statement (`writeSessionOnce`, checked against `known.version`) when the session has no
 * revert point to carry out; a session changed meanwhile is read again, and the prompt is
 * resolved again (`retried`, once) only when the agent or model it was resolved with changed.
 * The transaction path (`writeSession`) carries out revert points and is the fallback.
 */
async function storeResolved(
  deps: LedgerDeps,
  request: PromptRequest,
  options: StorePromptOptions,
  known: KnownSession | undefined,
  retried: boolean,
): Promise<StoredPrompt> {
  if (!known) throw new SessionNotFoundError(request.sessionId);
  const session = known.session;
  const fingerprint = promptFingerprint(request);
  // A retry of a stored prompt writes nothing: it is answered whatever became of the session's
  // directory, unless it would start a run (a reply wanted, not stored yet, and no run of this
  // process going on to join).
  const stored = request.messageId ? await findStoredPrompt(deps.db, request.sessionId, request.messageId, fingerprint) : undefined;
  const startsNoRun = async () =>
    request.noReply || deps.replier?.isRunning(session.id) === true || (await isAnswered(deps, session.id, request.messageId));
  if (stored && (await startsNoRun())) return stored;
  await checkSessionStillAllowed(deps, session);
  if (stored) return stored;

  const agent = resolveAgent(deps.config, request.agent, session.agent);
  const model = resolveModel(deps.config, agent, request.model, session.model);
  const variant = resolveVariant(deps.config, agent, model, request.variant);
  const messageId = request.messageId || newId("msg");
  // Tracing: the call storing the prompt (e.g. the Prompt RPC's span) names the message it stored.
  const spanAttributes = { "ledger.session_id": session.id, "ledger.message_id": messageId };
  annotateActiveSpan(spanAttributes);
  const roots = await rootsForSession(deps, session.id);
  const mcpRefused = await mcpRefusal(deps, session.id);
  const drafts = await inSpan("ledger.resolve_drafts", { ...spanAttributes, "ledger.parts": request.parts.length }, () =>
    resolveDrafts(
      {
        sessionId: session.id,
        messageId,
        directory: session.directory,
        roots,
        references: deps.config.references,
        limits: deps.config.limits,
        agent,
        agents: deps.config.agents,
        mcp: deps.mcp,
        mcpRefused,
      },
      request.parts,
      options.partField,
    ),
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
  throwIfEnded(options.signal, session.id, request.messageId);
  const input: PromptWrite = { request, options, agentName: agent.name, model, hooked, drafts, messageId, fingerprint };

  const written = await inSpan("ledger.write", spanAttributes, (span) => writePrompt(deps, session, known, input, span, retried));
  if (written !== "resolve again") return written;
  return await storeResolved(deps, request, options, sessionCache(deps.db).get(session.id), true);
}

/**
 * The write of a resolved prompt (see `storeResolved`); "resolve again" when the session's agent
 * or model changed since it was resolved (first attempt only). Sets `ledger.write_path` on
 * `span`: "statement" (`writeSessionOnce`) or "transaction" (`writeSession`).
 */
async function writePrompt(
  deps: LedgerDeps,
  session: Session,
  known: KnownSession,
  input: PromptWrite,
  span: Span | undefined,
  retried: boolean,
): Promise<StoredPrompt | "resolve again"> {
  const { request, hooked, fingerprint, messageId } = input;
  try {
    // One prompt at a time per session in this process: each is planned against the state the
    // previous one left in the cache, so concurrent prompts are not refused as stale.
    const fast = await oneAtATime(deps.db, session.id, async () => {
      // Checked again after the wait for the prompts before it: an ended call writes nothing.
      throwIfEnded(input.options.signal, session.id, request.messageId);
      let current: KnownSession | undefined = sessionCache(deps.db).get(session.id) ?? known;
      // At most twice: the state as known, then as read again after another process's write.
      for (let attempt = 0; attempt < 2; attempt++) {
        if (!current) throw new SessionNotFoundError(session.id);
        // Resolved with an agent or model that is no longer the session's: resolve again (once).
        if (current.session.agent !== session.agent || !sameModel(current.session.model, session.model)) return "resolve again";
        if (current.session.revert) return undefined;
        const events = await writeSessionOnce(deps, session.id, promptEvents(current.session, input), { touch: true, expect: current });
        if (events !== "stale") return events;
        current = await readKnownSession(deps.db, session.id);
      }
      return undefined;
    });
    if (fast === "resolve again" && !retried) return "resolve again";
    if (Array.isArray(fast)) {
      span?.setAttribute("ledger.write_path", "statement");
      return { message: storedMessage(hooked), events: fast, replayed: false };
    }
    span?.setAttribute("ledger.write_path", "transaction");
    const { result, events } = await writeSession(deps, session.id, async (w) => {
      // A concurrent request with the same message_id may have committed while we resolved.
      if (request.messageId) {
        const stored = await findStoredPrompt(w.trx, session.id, request.messageId, fingerprint);
        if (stored) return stored;
      }
      // And inside the transaction, before anything is written (throwing rolls it back).
      throwIfEnded(input.options.signal, session.id, request.messageId);
      for (const kind of switchEvents(w.session, input)) w.emit(kind);
      // A revert point set since the last prompt is carried out now, before the new message.
      await applyRevert(w);
      await insertMessage(w.trx, { message: hooked.message, position: w.nextPosition(), requestHash: fingerprint });
      w.session.messageCount += 1;
      await insertParts(
        w.trx,
        hooked.parts.map((part) => ({ part, position: w.nextPosition() })),
      );
      emitPromptEvents(w.emit, input);
      if (Object.keys(request.tools).length > 0) w.session.permission = permissionsFromTools(request.tools);
      w.emit({ case: "sessionUpdated", value: { session: w.session } });
      return undefined;
    });
    if (result) return result;
    return { message: storedMessage(hooked), events, replayed: false };
  } catch (error) {
    // A concurrent request with the same message_id committed first: same content → its message.
    if (request.messageId && isUniqueViolation(error, "message_pkey")) {
      const stored = await findStoredPrompt(deps.db, session.id, request.messageId, fingerprint);
      if (stored) return stored;
    }
    throw mapConflict(error, request, messageId, input.options.partField ?? requestPartField);
  }
}

/**
 * Throws `StoppedWaitingError` (`NOT_STORED`; DEADLINE_EXCEEDED or CANCELED by the signal's
 * reason) when `signal` has fired: the call ended (its deadline passed, its client went away)
 * before the prompt was written, so it is not written at all, then or later.
 */
function throwIfEnded(signal: AbortSignal | undefined, sessionId: string, messageId: string): void {
  if (!signal?.aborted) return;
  throw new StoppedWaitingError(
    "NOT_STORED",
    `the call ended (its deadline passed or it was cancelled) while the prompt was being prepared, before it was stored: nothing was stored; send it again${messageId ? ` (message_id ${messageId})` : ""}`,
    { session_id: sessionId, ...(messageId ? { message_id: messageId } : {}) },
    { cause: signal.reason },
  );
}

const queues = new WeakMap<object, Map<string, Promise<unknown>>>();

/** Runs `fn` after every earlier `oneAtATime` call for the same session and database has settled. */
async function oneAtATime<T>(db: object, sessionId: string, fn: () => Promise<T>): Promise<T> {
  let perDb = queues.get(db);
  if (!perDb) {
    perDb = new Map();
    queues.set(db, perDb);
  }
  const run = (perDb.get(sessionId) ?? Promise.resolve()).then(fn, fn);
  const tail = run.catch(() => undefined);
  perDb.set(sessionId, tail);
  try {
    return await run;
  } finally {
    if (perDb.get(sessionId) === tail) perDb.delete(sessionId);
  }
}

/** What a prompt writes, resolved: the same for the one-statement and the transaction path. */
interface PromptWrite {
  request: PromptRequest;
  options: StorePromptOptions;
  agentName: string;
  model: ModelChoice | undefined;
  hooked: { message: Message; parts: Part[] };
  drafts: ResolvedDrafts;
  messageId: string;
  fingerprint: string;
}

function storedMessage(hooked: { message: Message; parts: Part[] }): MessageWithParts {
  return create(MessageWithPartsSchema, { message: hooked.message, parts: hooked.parts });
}

/**
 * The agent and model switches (docs/design.md §3 step 8), applied to `session` in place, as
 * events. Only a prompt that names its agent (or the first one, on a session without) changes
 * the session's.
 */
function switchEvents(session: Session, input: PromptWrite): EventKind[] {
  const kinds: EventKind[] = [];
  if ((input.request.agent || !session.agent) && session.agent !== input.agentName) {
    kinds.push({ case: "agentSwitched", value: { previous: session.agent, current: input.agentName } });
    session.agent = input.agentName;
  }
  if (input.model && !sameModel(session.model, input.model)) {
    kinds.push({ case: "modelSwitched", value: { previous: session.model, current: input.model } });
    session.model = create(ModelRefSchema, input.model);
  }
  return kinds;
}

/** The whole prompt as the events of one statement (no revert point to carry out), applied to `session` in place. */
function promptEvents(session: Session, input: PromptWrite): OnceEvent[] {
  const out: OnceEvent[] = switchEvents(session, input).map((kind) => ({ kind }));
  session.messageCount += 1;
  emitPromptEvents((kind, row) => {
    out.push({ kind, row: row?.kind === "insertMessage" ? { kind: "insertMessage", requestHash: input.fingerprint } : row });
  }, input);
  if (Object.keys(input.request.tools).length > 0) session.permission = permissionsFromTools(input.request.tools);
  out.push({ kind: { case: "sessionUpdated", value: { session } }, row: { kind: "saveSession" } });
  return out;
}

/** The prompt's own events in order; `row` says which carry the message and the parts. */
function emitPromptEvents(emit: (kind: EventKind, row?: RowChange) => unknown, input: PromptWrite): void {
  const { message, parts } = input.hooked;
  const { drafts, messageId } = input;
  emit({ case: "messageUpdated", value: { message } }, { kind: "insertMessage" });
  for (const part of parts) emit({ case: "partUpdated", value: { part } }, { kind: "insertPart" });
  for (const problem of drafts.problems) {
    emit({
      case: "sessionError",
      value: { messageId, error: { message: problem.message, kind: { case: "fileRead", value: { path: problem.path } } } },
    });
  }
  const synthetic = drafts.syntheticIds.filter((id) => parts.some((p) => p.id === id));
  if (synthetic.length > 0) emit({ case: "synthetic", value: { messageId, partIds: synthetic } });
  for (const kind of input.options.extraEvents?.(messageId) ?? []) emit(kind);
  emit({ case: "prompted", value: { messageId, noReply: input.request.noReply } });
}

/**
 * OpenCode turns `tools: {name: bool}` into permission rules `{permission: name, pattern: "*", action}`
 * (stored as given; an `edit` rule also covers `write` and `patch` when weighed, `sessionRules` in
 * src/tools/permission.ts).
 */
function permissionsFromTools(tools: Record<string, boolean>) {
  return Object.entries(tools).map(([permission, enabled]) =>
    create(PermissionRuleSchema, { permission, pattern: "*", action: enabled ? PermissionAction.ALLOW : PermissionAction.DENY }),
  );
}

/**
 * At most `limits.parts_per_prompt` drafts, a `system` of at most `limits.text_part_bytes` and
 * `limits.metadata_bytes` of JSON in the drafts' metadata and the format's schema
 * (`LimitExceededError`), valid Timestamps (`checkTimestamps`), and no draft id given twice:
 * `InvalidArgumentError` on the later one's `parts[i].id` (the insert would otherwise refuse the
 * second as ALREADY_EXISTS naming the first).
 */
function checkCounts(deps: LedgerDeps, request: PromptRequest, partField: PartField): void {
  const max = deps.config.limits.parts_per_prompt;
  if (request.parts.length > max) throw new LimitExceededError("parts", "parts_per_prompt", max, request.parts.length, "parts");
  const textMax = deps.config.limits.text_part_bytes;
  const systemBytes = Buffer.byteLength(request.system, "utf8");
  if (systemBytes > textMax) throw new LimitExceededError("system", "text_part_bytes", textMax, systemBytes, "bytes");
  // Fields are named as the client sent the drafts (a Command's come after its template's).
  const draftPath = (path: string) => path.replace(/^parts\[(\d+)\]/, (_, i: string) => partField(Number(i)));
  const json = jsonFieldSizes(PromptRequestSchema, request);
  for (const field of json.fields) field.path = draftPath(field.path);
  limitJsonFields(json, deps.config.limits.metadata_bytes);
  checkTimestamps(PromptRequestSchema, request, "", draftPath);
  const first = new Map<string, number>();
  request.parts.forEach((part, i) => {
    const id = part.kind.value?.id;
    if (!id) return;
    const earlier = first.get(id);
    if (earlier !== undefined)
      throw new InvalidArgumentError(`${partField(i)}.id`, `repeats ${partField(earlier)}.id (${id}): each part needs its own id`);
    first.set(id, i);
  });
}

function mapConflict(error: unknown, request: PromptRequest, messageId: string, partField: PartField): unknown {
  if (isUniqueViolation(error, "message_pkey")) {
    return new AlreadyExistsError("message_id", messageId, "is already used by another session or prompt");
  }
  if (isUniqueViolation(error, "part_pkey")) {
    const id = duplicateId(error) ?? "";
    const index = request.parts.findIndex((p) => p.kind.value?.id === id);
    return new AlreadyExistsError(index >= 0 ? `${partField(index)}.id` : "parts", id, "is already used by another part");
  }
  return error;
}
