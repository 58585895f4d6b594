import { clone, create, type MessageInitShape } from "@bufbuild/protobuf";
import { SessionEventSchema, type SessionEvent, type SessionStatusSchema } from "../../gen/ledger/v1/event_pb.js";
import { MessageSchema, type Message } from "../../gen/ledger/v1/message_pb.js";
import { PartSchema, type Part } from "../../gen/ledger/v1/part_pb.js";
import { makeStorable, storableText } from "../storage/jsonb.js";
import type { RowChange } from "../storage/session-write.js";
import { publishLive, writeSessionOnce, type EventKind, type WriterDeps } from "./writer.js";

/**
 * The writes the agent loop makes to a session, each ONE statement (its own transaction) under the
 * session row lock (so seq and positions stay gap-free and user prompts can interleave
 * between them). Every write appends its event; events reach the bus after commit
 * (`writeSession`). Implemented by `sessionLedger`; the agent loop, its step processor and
 * recovery write through it.
 */
export interface SessionLedger {
  /** Inserts a new message (assistant or user) at the next position; emits `message_updated`. */
  addMessage(message: Message): Promise<SessionEvent>;
  /** Replaces a stored message; emits `message_updated`. */
  saveMessage(message: Message): Promise<SessionEvent>;
  /**
   * Inserts a part (first call for its id, at the next position) or replaces it (later calls,
   * or `existing` for a part stored by another run); emits `part_updated`. Returns the event: its `seq` is the snapshot seq that live deltas extend.
   */
  savePart(part: Part, options?: { existing?: boolean }): Promise<SessionEvent>;
  /** Records the loop status (`busy`, `retry`, `idle`) as a `session_status` event. */
  setStatus(status: MessageInitShape<typeof SessionStatusSchema>["status"]): Promise<SessionEvent>;
  /** Records a problem that does not fail the request as a `session_error` event. */
  reportError(error: NonNullable<MessageInitShape<typeof SessionEventSchema>["kind"]> & { case: "sessionError" }): Promise<SessionEvent>;
  /**
   * Sends a live `part_delta` (not stored) carrying `seq`, the seq of the part snapshot it
   * extends, straight to the bus and the relay (`publishLive`); its text follows the storage rule (`storableText`).
   */
  publishDelta(delta: { messageId: string; partId: string; field: string; delta: string; seq: bigint; offset: bigint }): void;
}

/**
 * A `SessionLedger` for one session: each write is ONE statement (`writeSessionOnce`, no
 * `time_updated` touch), one database round trip. The message or part a write stores is made
 * storable in place first (`makeStorable`), so the caller's object is what was stored. Throws
 * `SessionNotFoundError` (NOT_FOUND) from each write if the session is gone.
 */
export function sessionLedger(deps: WriterDeps, sessionId: string): SessionLedger {
  const stored = new Set<string>();
  const one = async (kind: EventKind, row?: RowChange): Promise<SessionEvent> => {
    const events = await writeSessionOnce(deps, sessionId, [{ kind, row }], { touch: false });
    // Without `expect` a write is never stale.
    return (events as SessionEvent[])[0]!;
  };
  return {
    addMessage: (message) =>
      one({ case: "messageUpdated", value: { message: clone(MessageSchema, makeStorable(message)) } }, { kind: "insertMessage" }),
    saveMessage: (message) =>
      one({ case: "messageUpdated", value: { message: clone(MessageSchema, makeStorable(message)) } }, { kind: "updateMessage" }),
    savePart: async (part, options) => {
      const insert = !(stored.has(part.id) || options?.existing);
      const event = await one(
        { case: "partUpdated", value: { part: clone(PartSchema, makeStorable(part)) } },
        { kind: insert ? "insertPart" : "updatePart" },
      );
      stored.add(part.id);
      return event;
    },
    setStatus: (status) => one({ case: "sessionStatus", value: { status } }),
    reportError: (error) => one(error),
    publishDelta(delta) {
      const { seq, ...value } = delta;
      // Not stored, but held to the storage rule, so a client's assembled text matches the snapshots.
      value.delta = storableText(value.delta);
      publishLive(deps, create(SessionEventSchema, { sessionId, seq, kind: { case: "partDelta", value } }));
    },
  };
}
