import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { MessageErrorSchema } from "../../gen/ledger/v1/error_pb.js";
import { AssistantTimeSchema, type AssistantMessage } from "../../gen/ledger/v1/message_pb.js";
import { ToolStateSchema, type Part } from "../../gen/ledger/v1/part_pb.js";
import { sessionLedger } from "../ledger/session-ledger.js";
import { rejectPendingPermissions } from "../ledger/permissions.js";
import type { LedgerDeps } from "../ledger/deps.js";
import { withParts } from "../ledger/messages.js";
import { lastStatusEvents } from "../storage/event-store.js";
import { listOpenAnswerRows, listSessionsWithOpenAnswers } from "../storage/message-store.js";
import type { SessionLocks } from "./session-lock.js";

/** What recovery did. */
export interface RecoveryReport {
  /** Assistant messages closed with an `interrupted` error. */
  messages: number;
  /** Sessions returned to `idle`. */
  sessions: number;
}

/**
 * Brings work interrupted by a dead runner (`kill -9`, power loss) back into a sane state, for
 * every session whose loop lock is free (a live replica's sessions are left alone): assistant
 * messages without `time.completed` get an `interrupted` error and `time.completed`; their
 * pending/running tool parts end in `error`; streaming text and reasoning parts keep the text
 * stored so far and get `time.end`; a session whose last status is `busy`/`retry` returns to
 * `idle`; pending permission requests are rejected ("the process running this call stopped").
 * `ResumeSession` can then rerun the loop for the interrupted prompt.
 */
export async function recoverInterrupted(deps: LedgerDeps, locks: SessionLocks): Promise<RecoveryReport> {
  const report: RecoveryReport = { messages: 0, sessions: 0 };
  const sessions = new Set([...(await listSessionsWithOpenAnswers(deps.db)), ...(await stuckSessions(deps))]);
  for (const sessionId of sessions) {
    const release = await locks.tryAcquire(sessionId);
    if (!release) continue;
    try {
      const closed = await recoverSession(deps, sessionId);
      report.messages += closed.messages;
      report.sessions += closed.sessions;
    } finally {
      await release();
    }
  }
  return report;
}

/**
 * Recovers one session whose loop lock the caller holds (so no live runner can be writing it):
 * reads its open assistant messages and last status now, under the lock, and closes them as
 * `recoverInterrupted` describes. The runner calls it after taking a lock over from a dead holder,
 * and after its own loop failed (`why` then replaces "the process running this answer stopped").
 */
export async function recoverSession(
  deps: LedgerDeps,
  sessionId: string,
  why = "the process running this answer stopped",
): Promise<RecoveryReport> {
  // The calls that asked are interrupted with their answers: no request stays pending forever.
  await rejectPendingPermissions(deps, sessionId, "the process running this call stopped");
  const open = await listOpenAnswerRows(deps.db, sessionId);
  const busy = (await stuckSessions(deps, sessionId)).length > 0;
  if (open.length === 0 && !busy) return { messages: 0, sessions: 0 };
  const ledger = sessionLedger(deps, sessionId);
  for (const entry of await withParts(deps.db, open)) {
    for (const part of entry.parts) if (closePart(part)) await ledger.savePart(part, { existing: true });
    const message = entry.message!;
    const assistant = message.kind.value as AssistantMessage;
    assistant.error = create(MessageErrorSchema, {
      message: `Interrupted: ${why}`,
      kind: { case: "interrupted", value: {} },
    });
    assistant.time = create(AssistantTimeSchema, { created: assistant.time?.created, completed: timestampNow() });
    assistant.finish ||= "error";
    await ledger.saveMessage(message);
  }
  await ledger.setStatus({ case: "idle", value: {} });
  return { messages: open.length, sessions: 1 };
}

/** Sessions (or the one given) whose last `session_status` event is not `idle`. */
async function stuckSessions(deps: LedgerDeps, only?: string): Promise<string[]> {
  return (await lastStatusEvents(deps.db, only))
    .filter((e) => e.kind.case === "sessionStatus" && e.kind.value.status.case !== "idle")
    .map((e) => e.sessionId);
}

/** Ends an unfinished part in place; true when it changed. */
function closePart(part: Part): boolean {
  switch (part.kind.case) {
    case "text":
    case "reasoning": {
      const time = part.kind.value.time;
      if (time?.end || !time) return false;
      time.end = timestampNow();
      return true;
    }
    case "tool": {
      const state = part.kind.value.state?.status;
      if (state?.case !== "pending" && state?.case !== "running") return false;
      const input = state.value.input;
      const start = state.case === "running" ? state.value.timeStart : undefined;
      part.kind.value.state = create(ToolStateSchema, {
        status: {
          case: "error",
          value: {
            input,
            error: "Tool execution was interrupted: the process running it stopped",
            timeStart: start,
            timeEnd: timestampNow(),
          },
        },
      });
      return true;
    }
    default:
      return false;
  }
}
