import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { SessionEventSchema, type SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { PartSchema, type Part } from "../../gen/ledger/v1/part_pb.js";
import { applyDelta, mergeSnapshot, Transcript } from "../../web/src/transcript.js";

// The browser client's event model (web/src/transcript.ts), without a browser.

const SESSION = "ses_01M8N3PWC98KEGMQ42T22BSJ1B";
const MESSAGE = "msg_01M8N3PWD19RPNFNS3HPVA3B9A";
const PART = "prt_01M8N3PWD7753S036FNS8KQHG7";

function textPart(text: string, done = false): Part {
  return create(PartSchema, {
    id: PART,
    sessionId: SESSION,
    messageId: MESSAGE,
    kind: { case: "text", value: { text, time: done ? { start: { seconds: 1n }, end: { seconds: 2n } } : { start: { seconds: 1n } } } },
  });
}
const snapshot = (text: string, done = false): SessionEvent =>
  create(SessionEventSchema, { sessionId: SESSION, kind: { case: "partUpdated", value: { part: textPart(text, done) } } });
const delta = (offset: number, text: string): SessionEvent =>
  create(SessionEventSchema, {
    sessionId: SESSION,
    kind: { case: "partDelta", value: { messageId: MESSAGE, partId: PART, field: "text", delta: text, offset: BigInt(offset) } },
  });
const shown = (t: Transcript) => {
  const part = t.part(MESSAGE, PART);
  return part?.kind.case === "text" ? part.kind.value.text : undefined;
};

describe("applyDelta", () => {
  it("appends at the end, skips what it has, waits on a gap", () => {
    expect(applyDelta("Hello", 5, ", world")).toBe("Hello, world");
    expect(applyDelta("Hello, wo", 5, ", world")).toBe("Hello, world");
    expect(applyDelta("Hello, world", 5, ", wo")).toBe("Hello, world");
    expect(applyDelta("Hel", 5, ", world")).toBeUndefined();
  });

  it("counts offsets in code points, not UTF-16 units", () => {
    expect(applyDelta("😀a", 2, "b")).toBe("😀ab");
    expect(applyDelta("😀ab", 1, "ab😀")).toBe("😀ab😀");
  });
});

describe("mergeSnapshot", () => {
  it("keeps text streamed past a stale snapshot, but a final snapshot wins", () => {
    expect(mergeSnapshot("one two", "one ", false)).toBe("one two");
    expect(mergeSnapshot("one two", "one ", true)).toBe("one ");
    expect(mergeSnapshot("abc", "xyz", false)).toBe("xyz");
    expect(mergeSnapshot(undefined, "x", false)).toBe("x");
  });
});

describe("Transcript", () => {
  it("streams a text part from its snapshot and deltas, ignoring other sessions", () => {
    const t = new Transcript(SESSION);
    expect(t.apply(delta(0, "early"))).toEqual([]); // before the snapshot: ignored
    expect(t.apply(snapshot("")).map((c) => c.kind)).toEqual(["message", "part"]);
    t.apply(delta(0, "Hello"));
    t.apply(delta(5, ", "));
    expect(shown(t)).toBe("Hello, ");
    t.apply(delta(9, "lost")); // gap: wait for the snapshot
    expect(shown(t)).toBe("Hello, ");
    t.apply(snapshot("Hello, wo"));
    t.apply(delta(7, "world"));
    expect(shown(t)).toBe("Hello, world");
    t.apply(snapshot("Hello, wor")); // stale snapshot: keep the streamed text
    expect(shown(t)).toBe("Hello, world");
    t.apply(snapshot("Hello, world!", true));
    expect(shown(t)).toBe("Hello, world!");
    expect(new Transcript("ses_01M8N3PWC98KEGMQ42T22BSJ1C").apply(snapshot("x"))).toEqual([]);
  });
});
