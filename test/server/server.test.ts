import { rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Code, ConnectError } from "@connectrpc/connect";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { ViolationsSchema } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { TEST_ENGINE } from "../support/db.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { file, text } from "../support/prompt.js";
import { connectError as failure } from "../support/errors.js";
import { waitFor } from "../support/wait.js";

let t: TestLedger;

beforeAll(async () => {
  t = await startTestLedger({}, { transport: "http" });
});

afterAll(async () => {
  await t?.close();
});

/** Drains a server stream: the messages it yielded and the error it ended with, if any. */
async function drain<T>(stream: AsyncIterable<T>): Promise<{ items: T[]; error?: ConnectError }> {
  const items: T[] = [];
  try {
    for await (const item of stream) items.push(item);
    return { items };
  } catch (error) {
    return { items, error: ConnectError.from(error) };
  }
}

function badRequestFields(error: ConnectError): string[] {
  return error.findDetails(BadRequestSchema).flatMap((d) => d.fieldViolations.map((v) => v.field));
}

function errorInfo(error: ConnectError) {
  const [info] = error.findDetails(ErrorInfoSchema);
  expect(info, "ErrorInfo detail").toBeDefined();
  return info!;
}

async function newSession(agent = ""): Promise<string> {
  const { session } = await t.client.createSession({ directory: t.dir, agent });
  return session!.id;
}

function seqs(events: SessionEvent[]): number[] {
  return events.map((e) => Number(e.seq));
}

function consecutiveFrom(first: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => first + i);
}

describe("request validation", () => {
  it("empty parts → INVALID_ARGUMENT with a BadRequest on parts", async () => {
    const error = await failure(t.client.prompt({ sessionId: await newSession(), noReply: true, parts: [] }));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(badRequestFields(error)).toEqual(["parts"]);
    expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({
      reason: "INVALID_ARGUMENT",
      domain: "ledger.v1",
      metadata: { field: "parts", rule: "repeated.min_items" },
    });
  });

  it("malformed session_id → INVALID_ARGUMENT naming session_id and saying in words what an id is", async () => {
    const error = await failure(t.client.prompt({ sessionId: "ses_123", noReply: true, parts: [text("hi")] }));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(badRequestFields(error)).toEqual(["session_id"]);
    expect(error.rawMessage).toBe("session_id: must be ses_ followed by 26 Crockford base32 characters (0-9 and A-Z without I, L, O, U)");
    const partId = await failure(
      t.client.prompt({
        sessionId: "ses_01M8N3PWC98KEGMQ42T22BSJ1B",
        messageId: "msg_x",
        noReply: true,
        parts: [{ kind: { case: "text", value: { id: "p1", text: "hi" } } }],
      }),
    );
    expect(partId.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => `${v.field}: ${v.description}`)).toEqual([
      "message_id: must be msg_ followed by 26 Crockford base32 characters (0-9 and A-Z without I, L, O, U)",
      "parts[0].text.id: must be prt_ followed by 26 Crockford base32 characters (0-9 and A-Z without I, L, O, U)",
    ]);
    // Every violation in words, without protovalidate's "[rule id]" suffixes (a review, 2026-12-03);
    // the rule ids stay in ErrorInfo and in buf.validate.Violations.
    expect(partId.rawMessage).toBe(
      "message_id: must be msg_ followed by 26 Crockford base32 characters (0-9 and A-Z without I, L, O, U); parts[0].text.id: must be prt_ followed by 26 Crockford base32 characters (0-9 and A-Z without I, L, O, U)",
    );
    expect(partId.findDetails(ErrorInfoSchema)[0]?.metadata).toEqual({ field: "message_id", rule: "id.message" });
    expect(partId.findDetails(ViolationsSchema)[0]?.violations.map((v) => v.ruleId)).toEqual(["id.message", "id.part"]);
  });

  it("a file url without a scheme (raw base64) → INVALID_ARGUMENT naming the url field", async () => {
    const sessionId = await newSession();
    const error = await failure(
      t.client.prompt({
        sessionId,
        noReply: true,
        parts: [text("look"), file("aGVsbG8gd29ybGQ=", "text/plain", "a.txt")],
      }),
    );
    expect(error.code).toBe(Code.InvalidArgument);
    expect(badRequestFields(error)).toEqual(["parts[1].file.url"]);
    // The resolver's hint, not a regular expression.
    expect(error.rawMessage).toBe(
      "parts[1].file.url: has no URL scheme (expected a data:, file:, http: or https: URL); it looks like raw base64: send it as data:<mime>;base64,<data>",
    );
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
  });

  it("a json_schema retry_count over 10 → INVALID_ARGUMENT naming the field; nothing stored (each retry is a model call)", async () => {
    const sessionId = await newSession();
    const format = (retryCount: number) => ({ kind: { case: "jsonSchema" as const, value: { schema: { type: "object" }, retryCount } } });
    const error = await failure(t.client.prompt({ sessionId, noReply: true, format: format(4294967295), parts: [text("json")] }));
    expect([error.code, badRequestFields(error)]).toEqual([Code.InvalidArgument, ["format.json_schema.retry_count"]]);
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
    await t.client.prompt({ sessionId, noReply: true, format: format(10), parts: [text("json")] });
    expect((await t.client.listMessages({ sessionId })).messages).toHaveLength(1);
  });

  it("an http(s) url without a host or that does not parse → INVALID_ARGUMENT naming the url field; nothing stored", async () => {
    const sessionId = await newSession();
    const refused = async (url: string) => {
      const error = await failure(t.client.prompt({ sessionId, noReply: true, parts: [text("look"), file(url, "image/png", "x.png")] }));
      return [error.code, badRequestFields(error), error.rawMessage];
    };
    expect(await refused("https://")).toEqual([
      Code.InvalidArgument,
      ["parts[1].file.url"],
      "parts[1].file.url: is not a valid https: URL (expected https://host/path)",
    ]);
    expect(await refused("http://exa mple.com/x.pdf")).toEqual([
      Code.InvalidArgument,
      ["parts[1].file.url"],
      "parts[1].file.url: is not a valid http: URL (expected http://host/path)",
    ]);
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
  });
});

describe("domain errors", () => {
  it("unknown agent → NOT_FOUND AGENT_NOT_FOUND listing the agents; nothing written, agent unchanged", async () => {
    const sessionId = await newSession("plan");
    const error = await failure(t.client.prompt({ sessionId, agent: "nope", noReply: true, parts: [text("hi")] }));
    expect(error.code).toBe(Code.NotFound);
    const info = errorInfo(error);
    expect(info.reason).toBe("AGENT_NOT_FOUND");
    expect(info.domain).toBe("ledger.v1");
    expect(info.metadata).toMatchObject({ agent: "nope", available: "build,plan,general,explore" });
    expect((await t.client.listMessages({ sessionId })).messages).toEqual([]);
    const { session } = await t.client.getSession({ sessionId });
    expect(session?.agent).toBe("plan");
    expect(session?.messageCount).toBe(0);
  });

  it("a request over limits.request_bytes → RESOURCE_EXHAUSTED, nothing stored", async () => {
    const small = await startTestLedger({ limits: { request_bytes: 4096 } }, { transport: "http" });
    try {
      const { session } = await small.client.createSession({ directory: small.dir });
      const sessionId = session!.id;
      const error = await failure(small.client.prompt({ sessionId, noReply: true, parts: [text("x".repeat(10_000))] }));
      expect(error.code).toBe(Code.ResourceExhausted);
      expect((await small.client.listMessages({ sessionId })).messages).toEqual([]);
      // Under the limit the same ledger works.
      const ok = await small.client.prompt({ sessionId, noReply: true, parts: [text("x".repeat(1000))] });
      expect(ok.message?.parts).toHaveLength(1);
    } finally {
      await small.close();
    }
  });

  it("Abort with no loop running says so; Abort of an unknown session is NOT_FOUND; WatchSession ahead of the log is OUT_OF_RANGE", async () => {
    const sessionId = await newSession();
    expect((await t.client.abort({ sessionId })).aborted).toBe(false);
    expect((await failure(t.client.abort({ sessionId: "ses_01M8N3PWC98KEGMQ42T22BSJ1B" }))).code).toBe(Code.NotFound);
    const watched = await drain(t.client.watchSession({ sessionId, afterSeq: 99n }));
    expect(watched.items).toEqual([]);
    expect(watched.error?.code).toBe(Code.OutOfRange);
    expect(watched.error?.findDetails(ErrorInfoSchema)[0]?.reason).toBe("CURSOR_AHEAD");
  });
});

describe("text hygiene", () => {
  // Postgres jsonb cannot hold U+0000; a NUL in client text used to fail the insert as INTERNAL.
  it("stores a NUL character in a text draft as U+FFFD, identical in the answer and the ledger", async () => {
    const sessionId = await newSession();
    const res = await t.client.prompt({ sessionId, noReply: true, parts: [text("before\u0000after")] });
    const [part] = res.message!.parts;
    expect(part!.kind.case === "text" && part!.kind.value.text).toBe("before\uFFFDafter");
    const listed = await t.client.listMessages({ sessionId });
    expect(listed.messages).toEqual([res.message]);
  });
});

describe("CORS", () => {
  const preflight = (origin: string) =>
    fetch(`${t.ledger.url}/ledger.v1.SessionService/Prompt`, {
      method: "OPTIONS",
      headers: {
        origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type,connect-protocol-version",
      },
    });

  it("a loopback dev origin gets a 204 preflight echoing it", async () => {
    const res = await preflight("http://localhost:5173");
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe("http://localhost:5173");
    const allowed = (res.headers.get("access-control-allow-headers") ?? "").toLowerCase().split(/,\s*/);
    expect(allowed).toContain("connect-protocol-version");
    expect(allowed).toContain("content-type");
    expect(res.headers.get("access-control-allow-methods")).toContain("POST");
  });

  it("a foreign origin gets no allow-origin header", async () => {
    const res = await preflight("https://evil.example");
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    expect(res.status).not.toBe(204);
  });
});

describe("prompting without a model provider", () => {
  it("Prompt without no_reply → FAILED_PRECONDITION NO_MODEL_PROVIDER naming the stored message", async () => {
    const sessionId = await newSession();
    const error = await failure(t.client.prompt({ sessionId, parts: [text("answer me")] }));
    expect(error.code).toBe(Code.FailedPrecondition);
    const info = errorInfo(error);
    expect(info.reason).toBe("NO_MODEL_PROVIDER");
    const messageId = info.metadata.message_id;
    expect(messageId).toMatch(/^msg_[0-9A-HJKMNP-TV-Z]{26}$/);
    expect(info.metadata.session_id).toBe(sessionId);
    const { message } = await t.client.getMessage({ sessionId, messageId });
    expect(message?.message?.kind.value?.id).toBe(messageId);
    expect(message?.parts.map((p) => p.kind.case)).toEqual(["text"]);
  });

  // A trial, 2026-12-02: ResumeSession answered "no_reply: the message ... was stored, ... or send no_reply",
  // though it stores nothing and has no no_reply field.
  it("ResumeSession → FAILED_PRECONDITION NO_MODEL_PROVIDER naming the message, not no_reply; nothing stored", async () => {
    const sessionId = await newSession();
    const stored = errorInfo(await failure(t.client.prompt({ sessionId, parts: [text("answer me later")] }))).metadata.message_id;
    const error = await failure(t.client.resumeSession({ sessionId }));
    expect([error.code, error.rawMessage, errorInfo(error).reason, errorInfo(error).metadata]).toEqual([
      Code.FailedPrecondition,
      `no model provider is configured to answer message ${stored}; add a provider to ledger.json`,
      "NO_MODEL_PROVIDER",
      { message_id: stored, session_id: sessionId },
    ]);
    expect((await t.client.listMessages({ sessionId })).messages).toHaveLength(1);
  });

  it("PromptStream without no_reply yields the stored events, then ends with FAILED_PRECONDITION", async () => {
    const sessionId = await newSession("build");
    const { items, error } = await drain(t.client.promptStream({ sessionId, parts: [text("one"), text("two")] }));
    const events = items.map((i) => i.event!);
    expect(events.map((e) => e.kind.case)).toEqual(["messageUpdated", "partUpdated", "partUpdated", "prompted", "sessionUpdated"]);
    expect(seqs(events)).toEqual(consecutiveFrom(2, 5));
    expect(error?.code).toBe(Code.FailedPrecondition);
    const info = errorInfo(error!);
    expect(info.reason).toBe("NO_MODEL_PROVIDER");
    const first = events[0].kind;
    if (first.case !== "messageUpdated") throw new Error("expected message_updated first");
    const messageId = first.value.message!.kind.value!.id;
    expect(info.metadata.message_id).toBe(messageId);
    const prompted = events[3].kind;
    expect(prompted.case === "prompted" && prompted.value).toMatchObject({ messageId, noReply: false });
    const { message } = await t.client.getMessage({ sessionId, messageId });
    const stored = message!.parts.map((p) => p.id);
    expect(events.slice(1, 3).map((e) => (e.kind.case === "partUpdated" ? e.kind.value.part!.id : ""))).toEqual(stored);
  });
});

describe("PromptStream and PromptAsync with no_reply", () => {
  it("streams exactly the transaction's events with seqs continuing the session's log", async () => {
    const sessionId = await newSession();
    const first = await drain(t.client.promptStream({ sessionId, noReply: true, parts: [text("first")] }));
    expect(first.error).toBeUndefined();
    const firstEvents = first.items.map((i) => i.event!);
    // The session was created without an agent, so the first prompt switches it to the default.
    expect(firstEvents.map((e) => e.kind.case)).toEqual(["agentSwitched", "messageUpdated", "partUpdated", "prompted", "sessionUpdated"]);
    expect(firstEvents[0].kind.value).toMatchObject({ previous: "", current: "build" });
    expect(seqs(firstEvents)).toEqual(consecutiveFrom(2, 5)); // CreateSession wrote seq 1
    for (const e of firstEvents) expect(e.sessionId).toBe(sessionId);

    await writeFile(path.join(t.dir, "stream.txt"), "streamed file\n");
    const url = pathToFileURL(path.join(t.dir, "stream.txt")).href;
    const second = await drain(t.client.promptStream({ sessionId, noReply: true, parts: [text("second"), file(url)] }));
    expect(second.error).toBeUndefined();
    const events = second.items.map((i) => i.event!);
    expect(events.map((e) => e.kind.case)).toEqual([
      "messageUpdated",
      "partUpdated",
      "partUpdated",
      "partUpdated",
      "partUpdated",
      "synthetic",
      "prompted",
      "sessionUpdated",
    ]);
    expect(seqs(events)).toEqual(consecutiveFrom(7, 8));

    const { messages } = await t.client.listMessages({ sessionId });
    expect(messages).toHaveLength(2);
    const stored = messages[1];
    const messageId = stored.message!.kind.value!.id;
    const partIds = events.flatMap((e) => (e.kind.case === "partUpdated" ? [e.kind.value.part!.id] : []));
    expect(partIds).toEqual(stored.parts.map((p) => p.id));
    const synthetic = events[5].kind;
    expect(synthetic.case === "synthetic" && synthetic.value.partIds).toEqual([partIds[1], partIds[2]]);
    expect(events[6].kind.value).toMatchObject({ messageId, noReply: true });
    const updated = events[7].kind;
    expect(updated.case === "sessionUpdated" && updated.value.session?.agent).toBe("build");
  });

  it("PromptAsync returns the stored user message; GetMessage returns the same", async () => {
    const sessionId = await newSession();
    const res = await t.client.promptAsync({ sessionId, noReply: true, parts: [text("later")] });
    const message = res.message!;
    expect(message.message?.kind.case).toBe("user");
    const messageId = message.message!.kind.value!.id;
    expect(message.parts.map((p) => p.kind.case)).toEqual(["text"]);
    const again = await t.client.getMessage({ sessionId, messageId });
    expect(again.message).toEqual(message);
  });
});

describe("graceful shutdown", () => {
  it.skipIf(TEST_ENGINE !== "postgres")("every prompt answered before close() is stored", async () => {
    const g = await startTestLedger({}, { transport: "http" });
    let closed = false;
    try {
      const { session } = await g.client.createSession({ directory: g.dir });
      const sessionId = session!.id;
      // The session's row is locked from outside, so no prompt can be answered (or stored) before
      // close() starts: whatever the server received by then is in flight and must be drained.
      const holder = new pg.Client({ connectionString: g.database.url });
      await holder.connect();
      await holder.query("begin");
      await holder.query("select 1 from session where id = $1 for update", [sessionId]);
      const calls = Array.from({ length: 20 }, (_, i) =>
        g.client.prompt({ sessionId, noReply: true, parts: [text(`prompt ${i}`)] }).then(
          (res) => ({ id: res.message!.message!.kind.value!.id }),
          (error: unknown) => ({ error: ConnectError.from(error) }),
        ),
      );
      await waitFor("a prompt waiting on the session's row lock", async () => {
        const { rows } = await holder.query(
          "select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()",
        );
        return rows[0].n >= 1;
      });
      const closing = g.ledger.close();
      await holder.query("commit");
      await holder.end();
      await closing;
      closed = true;
      const results = await Promise.all(calls);
      const answered = results.flatMap((r) => ("id" in r ? [r.id] : []));
      const client = new pg.Client({ connectionString: g.database.url });
      await client.connect();
      let stored: string[];
      try {
        stored = (await client.query<{ id: string }>("select id from message where session_id = $1", [sessionId])).rows.map((r) => r.id);
      } finally {
        await client.end();
      }
      // Requests already received when close() starts are drained, not dropped: at least the one
      // that waited on the lock is answered; a request that came too late is refused, not stored.
      expect(answered.length).toBeGreaterThanOrEqual(1);
      for (const r of results) if ("error" in r) expect(r.error.code).toBe(Code.Unavailable);
      for (const id of answered) expect(stored).toContain(id);
      expect(stored.length).toBe(answered.length);
    } finally {
      if (!closed) await g.ledger.close();
      await g.database.drop();
      await rm(g.dir, { recursive: true, force: true });
    }
  });
});
