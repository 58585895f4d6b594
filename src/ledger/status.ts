import type { Kysely } from "kysely";
import type { SessionStatus } from "../../gen/ledger/v1/event_pb.js";
import { SessionBusyError } from "../errors.js";
import { lastStatusEvents } from "../storage/event-store.js";
import type { DB } from "../storage/schema.js";
import type { LedgerDeps } from "./deps.js";

/**
 * Throws `SessionBusyError` (FAILED_PRECONDITION) when the session's loop runs in this process
 * (`replier.isRunning`) or its last `session_status` event is busy or retry (a loop on another
 * replica). Call inside the session's write transaction (`db` = `w.trx`) so no loop can start
 * its status write in between.
 */
export async function assertIdle(deps: LedgerDeps, db: Kysely<DB>, sessionId: string): Promise<void> {
  if (deps.replier?.isRunning(sessionId)) throw new SessionBusyError(sessionId);
  const [last] = await lastStatusEvents(db, sessionId);
  if (last?.kind.case === "sessionStatus" && last.kind.value.status.case !== "idle") throw new SessionBusyError(sessionId);
}

/**
 * The status of every session whose loop is not idle (busy or retry, with attempt and next
 * time), by session id, read from each session's last `session_status` event.
 */
export async function getStatus(deps: LedgerDeps): Promise<Record<string, SessionStatus>> {
  const statuses: Record<string, SessionStatus> = {};
  for (const event of await lastStatusEvents(deps.db)) {
    if (event.kind.case !== "sessionStatus" || event.kind.value.status.case === "idle" || event.kind.value.status.case === undefined)
      continue;
    statuses[event.sessionId] = event.kind.value;
  }
  return statuses;
}
