// The browser client's model of one open session: its messages and parts, kept up to date from
// `SessionEvent`s. No DOM here (main.ts renders it), so test/web can unit-test it under Node.
import type { MessageError } from "../../gen/ledger/v1/error_pb.js";
import type { SessionEvent, SessionStatus } from "../../gen/ledger/v1/event_pb.js";
import type { Message, MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { Part } from "../../gen/ledger/v1/part_pb.js";
import type { Session } from "../../gen/ledger/v1/session_pb.js";

/** One message of the transcript. `message` is unset while only its parts have arrived. */
export interface Entry {
  id: string;
  message?: Message;
  /** Parts in arrival (= stored) order. */
  parts: Part[];
}

/** What an event changed, for the renderer. */
export type Change =
  | { kind: "message"; messageId: string }
  | { kind: "message-removed"; messageId: string }
  | { kind: "part"; messageId: string; partId: string }
  | { kind: "part-removed"; messageId: string; partId: string }
  | { kind: "status"; status: SessionStatus["status"] }
  | { kind: "error"; messageId: string; error?: MessageError }
  | { kind: "session"; session: Session; deleted: boolean }
  | { kind: "prompted"; messageId: string; noReply: boolean };

/** Length of `s` in Unicode code points (the unit of `PartDelta.offset`). */
export function codePoints(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

/**
 * Applies a `PartDelta` to the text we hold: appended when `offset` is our length, the part we
 * already have skipped on an overlap; `undefined` on a gap (`offset` beyond our text), where
 * the caller keeps its text and waits for the next snapshot.
 */
export function applyDelta(current: string, offset: number, delta: string): string | undefined {
  const have = codePoints(current);
  if (offset > have) return undefined;
  const skip = have - offset;
  if (skip === 0) return current + delta;
  const chars = Array.from(delta);
  return skip >= chars.length ? current : current + chars.slice(skip).join("");
}

/**
 * The text to show when a snapshot arrives: the snapshot, unless deltas have already taken us
 * past it (our text extends it) and the part is still streaming.
 */
export function mergeSnapshot(current: string | undefined, snapshot: string, final: boolean): string {
  if (current === undefined || final || !current.startsWith(snapshot)) return snapshot;
  return current;
}

/** Streaming fields: text and reasoning parts carry `text` (deltas use `field: "text"`). */
function streamed(part: Part): { text: string; time?: { end?: unknown } } | undefined {
  return part.kind.case === "text" || part.kind.case === "reasoning" ? part.kind.value : undefined;
}

/** Messages and parts of one session, in order, updated by {@link apply}. */
export class Transcript {
  private readonly entries = new Map<string, Entry>();

  constructor(readonly sessionId: string) {}

  /** The messages in order (oldest first). */
  get messages(): Entry[] {
    return [...this.entries.values()];
  }

  get(messageId: string): Entry | undefined {
    return this.entries.get(messageId);
  }

  part(messageId: string, partId: string): Part | undefined {
    return this.entries.get(messageId)?.parts.find((p) => p.id === partId);
  }

  /** Loads stored messages (ListMessages pages, oldest first). */
  load(messages: MessageWithParts[]): void {
    for (const m of messages) {
      const id = m.message?.kind.value?.id;
      if (!id) continue;
      this.entries.set(id, { id, message: m.message, parts: [...m.parts] });
    }
  }

  /** Applies one event of this session; returns what changed (nothing for other sessions). */
  apply(event: SessionEvent): Change[] {
    if (event.sessionId !== this.sessionId) return [];
    const k = event.kind;
    switch (k.case) {
      case "messageUpdated": {
        const message = k.value.message;
        const id = message?.kind.value?.id;
        if (!message || !id) return [];
        this.entry(id).message = message;
        return [{ kind: "message", messageId: id }];
      }
      case "messageRemoved":
        return this.entries.delete(k.value.messageId) ? [{ kind: "message-removed", messageId: k.value.messageId }] : [];
      case "partUpdated": {
        const part = k.value.part;
        if (!part) return [];
        const isNew = !this.entries.has(part.messageId);
        const entry = this.entry(part.messageId);
        const index = entry.parts.findIndex((p) => p.id === part.id);
        const held = index >= 0 ? streamed(entry.parts[index]) : undefined;
        const next = streamed(part);
        if (held && next) next.text = mergeSnapshot(held.text, next.text, next.time?.end !== undefined);
        if (index >= 0) entry.parts[index] = part;
        else entry.parts.push(part);
        const changes: Change[] = [{ kind: "part", messageId: part.messageId, partId: part.id }];
        return isNew ? [{ kind: "message", messageId: part.messageId }, ...changes] : changes;
      }
      case "partDelta": {
        const d = k.value;
        if (d.field !== "text") return [];
        const part = this.part(d.messageId, d.partId);
        const value = part && streamed(part);
        if (!value) return []; // not announced yet: its snapshot will carry the text
        const text = applyDelta(value.text, Number(d.offset), d.delta);
        if (text === undefined || text === value.text) return [];
        value.text = text;
        return [{ kind: "part", messageId: d.messageId, partId: d.partId }];
      }
      case "partRemoved": {
        const entry = this.entries.get(k.value.messageId);
        const index = entry?.parts.findIndex((p) => p.id === k.value.partId) ?? -1;
        if (!entry || index < 0) return [];
        entry.parts.splice(index, 1);
        return [{ kind: "part-removed", messageId: k.value.messageId, partId: k.value.partId }];
      }
      case "sessionStatus":
        return [{ kind: "status", status: k.value.status }];
      case "sessionError":
        return [{ kind: "error", messageId: k.value.messageId, error: k.value.error }];
      case "sessionUpdated":
      case "sessionDeleted":
        return k.value.session ? [{ kind: "session", session: k.value.session, deleted: k.case === "sessionDeleted" }] : [];
      case "prompted":
        return [{ kind: "prompted", messageId: k.value.messageId, noReply: k.value.noReply }];
      default:
        return [];
    }
  }

  private entry(id: string): Entry {
    let entry = this.entries.get(id);
    if (!entry) {
      entry = { id, parts: [] };
      this.entries.set(id, entry);
    }
    return entry;
  }
}
