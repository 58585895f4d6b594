import { create } from "@bufbuild/protobuf";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { ModelRefSchema } from "../../gen/ledger/v1/model_pb.js";
import type { SummarizeRequest } from "../../gen/ledger/v1/service_pb.js";
import { PreconditionError } from "../errors.js";
import type { LedgerDeps } from "./deps.js";
import { resolveAgent, resolveModel } from "./selection.js";
import { getSession } from "./sessions.js";
import { getSessionRow } from "../storage/session-store.js";
import { startGate, untilDone } from "./answer.js";

/**
 * The `Summarize` RPC (OpenCode `session.summarize` → `SessionCompaction.create`): compacts the
 * session through the runner (`Replier.summarize`, holding the session as a loop run), so that
 * from then on the model is sent the summary and the messages after it. The model is the
 * request's, else the session's agent's or last model, else the default (`resolveModel`); the
 * agent is the session's (`resolveAgent`). The stored messages and their events are those of
 * `compactSession` (docs/compaction.md); a failed summary comes back with its `error` set.
 *
 * @returns the summary: the assistant message (`summary` set) with its parts.
 * @throws SessionNotFoundError (NOT_FOUND); AgentNotFoundError (NOT_FOUND) when the session's
 *   agent is no longer configured; InvalidArgumentError (INVALID_ARGUMENT) for a malformed
 *   `model`; SessionBusyError (FAILED_PRECONDITION, SESSION_BUSY) while a loop or Shell runs the
 *   session on any replica; PreconditionError NO_MODEL_PROVIDER when no model provider is configured,
 *   NOTHING_TO_SUMMARIZE (FAILED_PRECONDITION) for a session without messages;
 *   StoppedWaitingError RUN_CONTINUES (DEADLINE_EXCEEDED on the client's deadline) when `signal`
 *   fires before the summary is written: it goes on (`untilDone`); NOT_STORED when it fires before
 *   the summary started: nothing was stored.
 */
export async function summarizeSession(deps: LedgerDeps, request: SummarizeRequest, signal?: AbortSignal): Promise<MessageWithParts> {
  const session = await getSession(deps, request.sessionId);
  // A summary of nothing would still cost a model call and store a summary (a trial, 2026-12-04).
  if (session.messageCount === 0)
    throw new PreconditionError("NOTHING_TO_SUMMARIZE", `session_id: session ${session.id} has no messages to summarize`, {
      session_id: session.id,
    });
  const agent = resolveAgent(deps.config, undefined, session.agent);
  const model = resolveModel(deps.config, agent, request.model, session.model);
  const replier = deps.replier;
  if (!replier?.available || !model)
    throw new PreconditionError(
      "NO_MODEL_PROVIDER",
      `no model provider is configured to summarize session ${session.id}; add one to ledger.json`,
      {
        session_id: session.id,
      },
    );
  const afterSeq = BigInt((await getSessionRow(deps.db, session.id))?.last_seq ?? 0);
  const gate = startGate(signal, { sessionId: session.id, name: "summary" });
  const work = replier.summarize(session.id, { model: create(ModelRefSchema, model), agent: agent.name, enter: gate.enter });
  return untilDone(work, signal, { sessionId: session.id, afterSeq, name: "summary" }, gate);
}
