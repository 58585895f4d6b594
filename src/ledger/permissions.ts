import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { PermissionReply, PermissionRequestSchema, type PermissionRequest } from "../../gen/ledger/v1/permission_pb.js";
import { PermissionAction, PermissionRuleSchema, type PermissionRule } from "../../gen/ledger/v1/session_pb.js";
import { evaluate, sessionRules } from "../tools/permission.js";
import { PermissionNotFoundError, PreconditionError } from "../errors.js";
import { newId } from "../ids.js";
import { logger } from "../observe/log.js";
import {
  getPermission,
  listPendingPermissions,
  setPermissionReply,
  insertPermission,
  type StoredReply,
} from "../storage/permission-store.js";
import type { LedgerDeps } from "./deps.js";
import { getSession } from "./sessions.js";
import { writeSession, type WriterDeps } from "./writer.js";

/** How often (ms) a paused call re-reads its request besides waking on the session's events. */
export const PERMISSION_POLL_MS = 1000;

/** What a paused tool call asks: the tool, what the rules were matched against, facts for the user. */
export interface PermissionAsk {
  sessionId: string;
  /** The assistant message of the call. */
  messageId: string;
  callId: string;
  /** The tool's name (`write`, `edit`, `bash`, ...). */
  permission: string;
  /** The file paths (relative to the session directory) or the command matched against the rules. */
  patterns: string[];
  metadata: JsonObject;
}

/**
 * The user (or the server on their behalf: Abort, a restart) rejected a paused tool call. Not a
 * `LedgerError`: it ends the tool call with an error the model sees, never an RPC. Its message is
 * OpenCode's `PermissionNext.RejectedError` / `CorrectedError` text.
 */
export class PermissionRejectedError extends Error {
  constructor(readonly feedback: string) {
    super(
      feedback
        ? `The user rejected permission to use this specific tool call with the following feedback: ${feedback}`
        : "The user rejected permission to use this specific tool call. You may try again with different parameters.",
    );
    this.name = "PermissionRejectedError";
  }
}

/**
 * Stores a permission request and pauses until it is answered (OpenCode `PermissionNext.ask`):
 * one session write inserts the request and appends `permission_asked`; then the call waits,
 * woken by any event or hint of the session on the bus (a reply stored on another replica reaches
 * this one as a relay hint) and re-reading the row every {@link PERMISSION_POLL_MS} in case a hint
 * was lost. Resolves on ONCE or ALWAYS (ALWAYS's allow rules were added by the reply).
 *
 * @throws PermissionRejectedError on REJECT (with the user's feedback, if any).
 * @throws the signal's reason when `signal` aborts first; the request is then rejected (so it is
 *   not left pending) with the reason "the call was aborted".
 * @throws SessionNotFoundError (NOT_FOUND) when the session is gone.
 */
export async function askPermission(deps: WriterDeps, ask: PermissionAsk, signal: AbortSignal): Promise<void> {
  signal.throwIfAborted();
  const request = create(PermissionRequestSchema, {
    id: newId("per"),
    sessionId: ask.sessionId,
    messageId: ask.messageId,
    callId: ask.callId,
    permission: ask.permission,
    patterns: ask.patterns,
    metadata: ask.metadata,
    timeCreated: timestampNow(),
  });
  await writeSession(
    deps,
    ask.sessionId,
    async (w) => {
      await insertPermission(w.trx, request);
      w.emit({ case: "permissionAsked", value: { permission: request } });
    },
    { touch: false },
  );
  let reply: { reply: StoredReply; message: string };
  try {
    reply = await waitForReply(deps, request, signal);
  } catch (error) {
    await answer(deps, ask.sessionId, request.id, "reject", "the call was aborted").catch((e: unknown) =>
      logger.warn("could not reject an aborted permission request", { session_id: ask.sessionId, permission_id: request.id, error: e }),
    );
    throw error;
  }
  if (reply.reply === "reject") throw new PermissionRejectedError(reply.message);
}

/** Resolves with the stored answer of `request`; rejects with the signal's reason on abort. */
function waitForReply(deps: WriterDeps, request: PermissionRequest, signal: AbortSignal): Promise<{ reply: StoredReply; message: string }> {
  return new Promise((resolve, reject) => {
    let done = false;
    let checking = false;
    let again = false;
    const finish = (fn: () => void) => {
      if (done) return;
      done = true;
      unsubscribe();
      clearInterval(timer);
      signal.removeEventListener("abort", onAbort);
      fn();
    };
    const check = async (): Promise<void> => {
      if (done) return;
      if (checking) {
        again = true;
        return;
      }
      checking = true;
      try {
        do {
          again = false;
          const stored = await getPermission(deps.db, request.id);
          if (!stored) return finish(() => reject(new PermissionRejectedError("the request was removed")));
          if (stored.reply) {
            const answered = { reply: stored.reply, message: stored.replyMessage };
            return finish(() => resolve(answered));
          }
        } while (again && !done);
      } catch (error) {
        finish(() => reject(error));
      } finally {
        checking = false;
      }
    };
    const onAbort = () => finish(() => reject(signal.reason));
    const unsubscribe = deps.bus.subscribe(request.sessionId, () => void check());
    const timer = setInterval(() => void check(), PERMISSION_POLL_MS);
    signal.addEventListener("abort", onAbort, { once: true });
    void check();
  });
}

/**
 * The `ListPermissions` RPC: the session's pending requests, oldest first.
 * @throws SessionNotFoundError (NOT_FOUND).
 */
export async function listPermissions(deps: LedgerDeps, sessionId: string): Promise<PermissionRequest[]> {
  await getSession(deps, sessionId);
  return listPendingPermissions(deps.db, sessionId);
}

/**
 * The `ReplyPermission` RPC (OpenCode `PermissionNext.reply`), on any replica: in one session
 * write, records the answer, and for ALWAYS appends an allow rule `{permission, pattern}` per
 * pattern of the request to the session's rules (`session_updated`) and answers ONCE the
 * session's other pending requests those rules allow; appends `permission_replied` (then one per
 * request answered that way).
 * The paused call (here or on another replica) wakes on the event and runs (ONCE, ALWAYS) or ends
 * with a tool error (REJECT, with `message` as feedback for the model).
 *
 * @throws SessionNotFoundError (NOT_FOUND) for an unknown session.
 * @throws PermissionNotFoundError (NOT_FOUND, field `permission_id`) for an unknown id or one of another session.
 * @throws PreconditionError (FAILED_PRECONDITION, reason PERMISSION_ANSWERED) when it was already answered.
 */
export async function replyPermission(
  deps: LedgerDeps,
  sessionId: string,
  permissionId: string,
  reply: PermissionReply,
  message: string,
): Promise<void> {
  const stored: StoredReply = reply === PermissionReply.ALWAYS ? "always" : reply === PermissionReply.REJECT ? "reject" : "once";
  await answer(deps, sessionId, permissionId, stored, message, { strict: true });
}

/**
 * Rejects every pending request of the session (Abort, recovery after a restart), each with a
 * `permission_replied` REJECT carrying `why`. Returns how many it rejected.
 */
export async function rejectPendingPermissions(deps: WriterDeps, sessionId: string, why: string): Promise<number> {
  const pending = await listPendingPermissions(deps.db, sessionId);
  for (const request of pending) await answer(deps, sessionId, request.id, "reject", why);
  return pending.length;
}

/**
 * Whether the session's rules `approved` (its `tools` map and ALWAYS answers) allow every pattern
 * of `request` by a rule that matches it (no match is not allowed here; `edit` covers `write`
 * and `patch`), as OpenCode weighs its approved rules when an ALWAYS answer comes.
 */
function allows(approved: readonly PermissionRule[], request: PermissionRequest): boolean {
  const rules = [{ permission: "*", pattern: "*", action: "deny" as const }, ...sessionRules(approved)];
  return (request.patterns.length > 0 ? request.patterns : ["*"]).every(
    (pattern) => evaluate(rules, request.permission, pattern) === "allow",
  );
}

/** Records an answer in one session write; `strict` raises the RPC errors, otherwise an answered or missing request is left alone. */
async function answer(
  deps: WriterDeps,
  sessionId: string,
  permissionId: string,
  reply: StoredReply,
  message: string,
  options: { strict?: boolean } = {},
): Promise<void> {
  await writeSession(
    deps,
    sessionId,
    async (w) => {
      const stored = await getPermission(w.trx, permissionId);
      if (!stored || stored.request.sessionId !== sessionId) {
        if (options.strict) throw new PermissionNotFoundError(permissionId);
        return;
      }
      if (stored.reply || !(await setPermissionReply(w.trx, permissionId, reply, message, w.now))) {
        if (!options.strict) return;
        throw new PreconditionError(
          "PERMISSION_ANSWERED",
          `permission_id: permission request ${permissionId} was already answered (${stored.reply ?? "meanwhile"})`,
          { session_id: sessionId, permission_id: permissionId },
        );
      }
      const covered: string[] = [];
      if (reply === "always") {
        const added = (stored.request.patterns.length > 0 ? stored.request.patterns : ["*"]).map((pattern) =>
          create(PermissionRuleSchema, { permission: stored.request.permission, pattern, action: PermissionAction.ALLOW }),
        );
        w.session.permission.push(...added);
        w.emit({ case: "sessionUpdated", value: { session: w.session } });
        // The session's other pending requests that its rules now allow are answered with them
        // (OpenCode `PermissionNext.reply` "always"): the same command asked twice in one step
        // runs both times.
        for (const other of await listPendingPermissions(w.trx, sessionId))
          if (
            other.id !== permissionId &&
            allows(w.session.permission, other) &&
            (await setPermissionReply(w.trx, other.id, "once", "", w.now))
          )
            covered.push(other.id);
      }
      w.emit({
        case: "permissionReplied",
        value: {
          permissionId,
          reply: reply === "always" ? PermissionReply.ALWAYS : reply === "reject" ? PermissionReply.REJECT : PermissionReply.ONCE,
          message,
        },
      });
      for (const id of covered)
        w.emit({ case: "permissionReplied", value: { permissionId: id, reply: PermissionReply.ONCE, message: "" } });
    },
    { touch: reply === "always" },
  );
}
