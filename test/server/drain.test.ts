import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import { afterEach, describe, expect, it } from "vitest";
import { ErrorInfoSchema, RetryInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema, type Status } from "../../gen/google/rpc/status_pb.js";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { isHint } from "../../src/events/bus.js";
import { drainDetails } from "../support/drain.js";
import { connectError } from "../support/errors.js";
import { grpcLedgerClient } from "../support/grpc-js.js";
import { collectEvents, type EventCollector } from "../support/event-stream.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import type { ScriptedReply } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { lastSeq } from "../support/stored.js";
import { waitFor } from "../support/wait.js";

// Drain on SIGTERM (docs/operations.md, "Running behind a load balancer"), in-process against a
// real server on loopback: Connect over HTTP/1.1 (the ledger's `client`) and gRPC over h2c.
// `ledger.drain()` starts what `close()` starts first, without closing, so the drained server can
// still be asked; `close(graceMs)` is then measured against open streams and running loops.

const open: FakeModelLedger[] = [];
afterEach(async () => {
  for (const t of open.splice(0)) await t.close();
});

async function ledger(): Promise<FakeModelLedger & { grpc: Client<typeof SessionService>; health: Client<typeof Health> }> {
  const t = await startFakeModelLedger({}, { transport: "http" });
  open.push(t);
  const transport = createGrpcTransport({ baseUrl: t.ledger.url });
  return { ...t, grpc: createClient(SessionService, transport), health: createClient(Health, transport) };
}

/** A reply streamed over `chunks × delayMs` ms. */
function slowReply(words: string[], delayMs: number): ScriptedReply {
  return { kind: "stream", chunks: words.map((w, i) => ({ text: i === 0 ? w : ` ${w}` })), delayMs };
}

/** A session with one stored noReply prompt; returns its id and last seq. */
async function storedSession(t: FakeModelLedger): Promise<{ sessionId: string; last: bigint }> {
  const { session } = await t.client.createSession({ directory: t.dir });
  const sessionId = session!.id;
  await t.client.prompt({ sessionId, noReply: true, parts: [text("hello"), text("there")] });
  const { messages } = await t.client.listMessages({ sessionId });
  expect(messages).toHaveLength(1);
  return { sessionId, last: BigInt(await lastSeq(t.ledger.database.db, sessionId)) };
}

describe("drain", () => {
  it("flips health to NOT_SERVING (Check and an open Watch, which then ends UNAVAILABLE), refuses new RPCs with UNAVAILABLE DRAINING + RetryInfo, ends open WatchSessions with their cursor, lets an in-flight unary Prompt finish", async () => {
    const t = await ledger();
    const { sessionId, last } = await storedSession(t);
    expect((await t.health.check({ service: "" })).status).toBe(ServingStatus.SERVING);

    const statuses: ServingStatus[] = [];
    const healthWatch = (async () => {
      for await (const res of t.health.watch({ service: "ledger.v1.SessionService" })) statuses.push(res.status);
    })().then(
      () => undefined,
      (e: unknown) => e,
    );
    const overConnect = collectEvents((signal) => t.client.watchSession({ sessionId, afterSeq: 0n }, { signal }));
    const overGrpc = collectEvents((signal) => t.grpc.watchSession({ sessionId, afterSeq: 1n }, { signal }));
    const grpcJs = grpcJsWatch(t.ledger.url, sessionId);
    await overConnect.reach(last);
    await overGrpc.reach(last);
    await waitFor("the grpc-js watcher", () => grpcJs.seqs.at(-1) === String(last));
    await waitFor("the health Watch's first status", () => statuses.length === 1);

    // A unary Prompt whose answer is still streaming when the drain starts.
    const { session: busy } = await t.client.createSession({ directory: t.dir });
    t.fake.push(slowReply(["one", "two", "three", "four", "five"], 150));
    const prompt = t.grpc.prompt({ sessionId: busy!.id, parts: [text("answer slowly")] });
    await waitFor("the model request", () => t.fake.requests.length === 1);

    const started = Date.now();
    t.ledger.drain();

    // The open health Watch: NOT_SERVING at once, then UNAVAILABLE (DRAINING).
    const healthEnd = await healthWatch;
    expect(statuses).toEqual([ServingStatus.SERVING, ServingStatus.NOT_SERVING]);
    expect(drainDetails(healthEnd)).toEqual({ reason: "DRAINING", metadata: {}, retryMs: 250 });
    // Check keeps answering, NOT_SERVING (no probe while draining), for every known service.
    expect((await t.health.check({ service: "" })).status).toBe(ServingStatus.NOT_SERVING);
    expect((await t.health.check({ service: "ledger.v1.SessionService" })).status).toBe(ServingStatus.NOT_SERVING);

    // Open WatchSessions end UNAVAILABLE with the cursor to resume from on another replica.
    for (const watcher of [overConnect, overGrpc]) {
      await watcher.done;
      expect(stored(watcher).at(-1)!.seq).toBe(last);
      const { reason, metadata, retryMs } = drainDetails(watcher.failure());
      expect({ reason, metadata, retryMs }).toEqual({
        reason: "DRAINING",
        metadata: { session_id: sessionId, after_seq: String(last) },
        retryMs: 250,
      });
      expect((watcher.failure() as ConnectError).rawMessage).toContain(
        `continue with WatchSession(session_id=${sessionId}, after_seq=${last})`,
      );
    }
    // (A hang bound, not a speed bound: the streams end as the drain starts.)
    expect(Date.now() - started).toBeLessThan(5000);
    // A foreign gRPC runtime (@grpc/grpc-js) reads the same from grpc-status-details-bin.
    const status = await grpcJs.status;
    expect(status.code).toBe(grpc.status.UNAVAILABLE);
    const info = status.details.map((d) => anyUnpack(d, ErrorInfoSchema)).find((d) => d !== undefined);
    const retry = status.details.map((d) => anyUnpack(d, RetryInfoSchema)).find((d) => d !== undefined);
    expect(info).toMatchObject({ reason: "DRAINING", domain: "ledger.v1", metadata: { session_id: sessionId, after_seq: String(last) } });
    expect(retry?.retryDelay).toMatchObject({ seconds: 0n, nanos: 250_000_000 });

    // New RPCs, unary or streaming, over either protocol: UNAVAILABLE DRAINING with RetryInfo, no cursor.
    for (const call of [
      t.client.getSession({ sessionId }),
      t.grpc.listSessions({}),
      t.grpc.watchSession({ sessionId, afterSeq: 0n }),
      t.client.prompt({ sessionId, noReply: true, parts: [text("too late")] }),
    ]) {
      expect(drainDetails(await connectError(call))).toEqual({ reason: "DRAINING", metadata: {}, retryMs: 250 });
    }

    // The unary Prompt in flight finishes normally with its whole answer.
    const answer = (await prompt).message!;
    const kind = answer.message!.kind;
    expect(kind.case).toBe("assistant");
    expect(kind.case === "assistant" ? kind.value.error : "not an assistant message").toBeUndefined();
    expect(answer.parts.flatMap((p) => (p.kind.case === "text" ? [p.kind.value.text] : []))).toEqual(["one two three four five"]);
    // Nothing was stored by the refused prompt.
    expect(t.fake.requests).toHaveLength(1);
  });

  it("close(20 s) with an open WatchSession and health Watch returns well under the grace period, the streams ended UNAVAILABLE", async () => {
    const t = await ledger();
    const { sessionId, last } = await storedSession(t);
    const watcher = collectEvents((signal) => t.grpc.watchSession({ sessionId, afterSeq: 0n }, { signal }));
    const healthWatch = (async () => {
      for await (const _ of t.health.watch({ service: "" }));
    })().then(
      () => undefined,
      (e: unknown) => e,
    );
    await watcher.reach(last);

    const started = Date.now();
    await t.ledger.close(20_000);
    const took = Date.now() - started;
    // Without the drain the open streams would hold close() for the whole 20 s.
    expect(took).toBeLessThan(10_000);
    await watcher.done;
    expect(drainDetails(watcher.failure()).metadata).toEqual({ session_id: sessionId, after_seq: String(last) });
    expect(drainDetails(await healthWatch).reason).toBe("DRAINING");
  });

  it("ends an open PromptStream with UNAVAILABLE, its message_id and cursor; the run goes on and its answer completes", async () => {
    const t = await ledger();
    const { session } = await t.client.createSession({ directory: t.dir });
    const sessionId = session!.id;
    const events = busEvents(t, sessionId);
    t.fake.push(slowReply(["slow", "but", "complete"], 200));
    const stream = collectEvents((signal) => t.grpc.promptStream({ sessionId, parts: [text("stream it")] }, { signal }));
    await waitFor("the first delta", () => stream.events.some((e) => e.kind.case === "partDelta"));
    t.ledger.drain();
    await stream.done;
    const userId = stream.events.find((e) => e.kind.case === "messageUpdated")!;
    const messageId = userId.kind.case === "messageUpdated" ? userId.kind.value.message!.kind.value!.id : "";
    expect(drainDetails(stream.failure())).toEqual({
      reason: "DRAINING",
      metadata: { session_id: sessionId, message_id: messageId, after_seq: String(stored(stream).at(-1)!.seq) },
      retryMs: 250,
    });
    expect(stream.events.some(isIdle)).toBe(false);
    // The run was not the stream's: it finishes here.
    await waitFor("the answer", () => statuses(events).at(-1) === "idle");
    expect(lastAssistant(events)?.error).toBeUndefined();
    expect(t.fake.requests[0]!.end).toBe("finished");
  });

  it("close waits for an agent loop that finishes within the grace period: its answer completes normally", async () => {
    const t = await ledger();
    const { session } = await t.client.createSession({ directory: t.dir });
    const sessionId = session!.id;
    const events = busEvents(t, sessionId);
    t.fake.push(slowReply(["a", "b", "c", "d", "e", "f"], 150));
    await t.client.promptAsync({ sessionId, parts: [text("take your time")] });
    await waitFor("the model request", () => t.fake.requests.length === 1);

    const started = Date.now();
    await t.ledger.close(20_000);
    const took = Date.now() - started;
    // The answer takes about 900 ms: close waited for it, not for the whole grace period.
    expect(took).toBeGreaterThanOrEqual(500);
    expect(took).toBeLessThan(10_000);
    expect(t.fake.requests[0]!.end).toBe("finished");
    const assistant = lastAssistant(events);
    expect(assistant?.error).toBeUndefined();
    expect(assistant?.time?.completed).toBeDefined();
    expect(statuses(events).at(-1)).toBe("idle");
  });

  it("close hands over a loop still running at the end of the grace period: its answer ends interrupted (not aborted), the session idle", async () => {
    const t = await ledger();
    const { session } = await t.client.createSession({ directory: t.dir });
    const sessionId = session!.id;
    const events = busEvents(t, sessionId);
    t.fake.push({ kind: "stream", chunks: [{ text: "partial" }, { hang: true }] });
    await t.client.promptAsync({ sessionId, parts: [text("never finishes")] });
    await waitFor("the model request", () => t.fake.requests.length === 1);

    const started = Date.now();
    await t.ledger.close(400);
    const took = Date.now() - started;
    expect(took).toBeGreaterThanOrEqual(400);
    expect(took).toBeLessThan(10_000);
    const assistant = lastAssistant(events);
    expect(assistant?.error?.kind.case).toBe("interrupted");
    expect(assistant?.error?.message).toBe("Interrupted: the server running this answer shut down; ResumeSession continues it");
    expect(assistant?.time?.completed).toBeDefined();
    expect(statuses(events)).toEqual(["busy", "idle"]);
    await waitFor("the model request to be aborted", () => t.fake.requests[0]!.end === "aborted");
  });
});

/** A WatchSession from 0 through @grpc/grpc-js: the seqs it got (strings), and the `google.rpc.Status` it ended with. */
function grpcJsWatch(url: string, sessionId: string): { seqs: string[]; status: Promise<Status> } {
  const client = grpcLedgerClient(url);
  const watch = client.watchSession as unknown as (req: object) => grpc.ClientReadableStream<{ event: { seq: string } }>;
  const call = watch.call(client, { sessionId, afterSeq: "0" });
  const seqs: string[] = [];
  call.on("data", (res: { event: { seq: string } }) => seqs.push(res.event.seq));
  const status = new Promise<Status>((resolve, reject) => {
    call.on("error", (error: grpc.ServiceError) => {
      client.close();
      const [bin] = error.metadata.get("grpc-status-details-bin");
      if (!(bin instanceof Buffer)) return reject(new Error(`no grpc-status-details-bin: ${error.message}`));
      resolve(fromBinary(StatusSchema, new Uint8Array(bin)));
    });
    call.on("end", () => reject(new Error("the grpc-js watch ended without an error")));
  });
  return { seqs, status };
}

/** The stored events a collector got (live part_delta events carry their snapshot's seq). */
function stored(watcher: EventCollector): SessionEvent[] {
  return watcher.events.filter((e) => e.kind.case !== "partDelta");
}

/** Every event the ledger publishes for the session from now on (in-process, after each commit). */
function busEvents(t: FakeModelLedger, sessionId: string): SessionEvent[] {
  const events: SessionEvent[] = [];
  t.ledger.deps.bus.subscribe(sessionId, (item) => {
    if (!isHint(item)) events.push(item);
  });
  return events;
}

function lastAssistant(events: SessionEvent[]) {
  const updates = events.flatMap((e) =>
    e.kind.case === "messageUpdated" && e.kind.value.message?.kind.case === "assistant" ? [e.kind.value.message.kind.value] : [],
  );
  return updates.at(-1);
}

function isIdle(e: SessionEvent): boolean {
  return e.kind.case === "sessionStatus" && e.kind.value.status.case === "idle";
}

function statuses(events: SessionEvent[]): string[] {
  return events.flatMap((e) => (e.kind.case === "sessionStatus" ? [e.kind.value.status.case ?? ""] : []));
}
