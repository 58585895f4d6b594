import { writeFile } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { context, trace } from "@opentelemetry/api";
import { TracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { parseConfigText } from "../../src/config/config.js";
import { telemetryConfig, telemetrySchema } from "../../src/config/telemetry.js";
import { createLogger, logger, type LogLevel } from "../../src/observe/log.js";
import { inSpan, tracingEnabled } from "../../src/observe/spans.js";
import { TEST_ENGINE } from "../support/db.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { NO_RETRY } from "../support/mock-models.js";
import type { ScriptedReply } from "../support/openai-server.js";
import { file, text } from "../support/prompt.js";
import { listenLoopback, readJsonObject, sendJson } from "../support/fake-http.js";
import { spawnServe } from "../support/serve-process.js";
import { waitFor } from "../support/wait.js";
import { captureStderr } from "../support/stderr.js";

const call = (id: string, name: string, args: unknown): ScriptedReply => ({
  kind: "stream",
  chunks: [{ toolCall: { id, name, arguments: JSON.stringify(args) } }],
});
const say = (words: string): ScriptedReply => ({ kind: "stream", chunks: [{ text: words }] });

/** The caller's span, as a W3C `traceparent`: version 00, trace id, parent span id, sampled. */
const CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN = "00f067aa0ba902b7";
const TRACEPARENT = `00-${CALLER_TRACE}-${CALLER_SPAN}-01`;

const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;
const idOf = (span: ReadableSpan) => span.spanContext().spanId;
const scopeOf = (span: ReadableSpan) => span.instrumentationScope.name;

/** The spans as a tree of names (children in start order), from `root`; pg's spans left out. */
function tree(spans: ReadableSpan[], root: ReadableSpan): unknown {
  const children = spans
    .filter((s) => parentOf(s) === idOf(root) && scopeOf(s) !== PG_SCOPE)
    .sort((a, b) => hrNumber(a.startTime) - hrNumber(b.startTime));
  return { [root.name]: children.map((child) => tree(spans, child)) };
}
const hrNumber = ([s, ns]: [number, number]) => s * 1e9 + ns;
const PG_SCOPE = "@opentelemetry/instrumentation-pg";

/** What this file's tests write to stderr (captured, not shown). */
const stderr = captureStderr();

/** JSON log lines written to stderr during the current test. */
const jsonLines = () =>
  stderr
    .written()
    .join("")
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Record<string, unknown>);

describe("tracing configured (telemetry.enabled)", () => {
  let t: FakeModelLedger;
  const exporter = new InMemorySpanExporter();
  let level: LogLevel;

  beforeAll(async () => {
    level = logger.level;
    logger.setLevel("info");
    t = await startFakeModelLedger(
      { retry: NO_RETRY, telemetry: { enabled: true } },
      { transport: "http", tracing: { spanProcessors: [new SimpleSpanProcessor({ exporter })] } },
    );
  });
  afterAll(async () => {
    logger.setLevel(level);
    await t?.close();
  });

  it("one Prompt with a file and a tool call is one span tree under the caller's traceparent", async () => {
    expect(tracingEnabled()).toBe(true);
    await writeFile(path.join(t.dir, "notes.txt"), "first line\nsecond line\n");
    const { session } = await t.client.createSession({ directory: t.dir });
    const sessionId = session!.id;
    t.fake.push(call("call_1", "read", { filePath: "notes.txt" }), say("Read it."));
    exporter.reset();

    const res = await t.client.prompt(
      { sessionId, parts: [text("what is in this file?"), file(pathToFileURL(path.join(t.dir, "notes.txt")).href)] },
      { headers: { traceparent: TRACEPARENT } },
    );
    const answer = res.message!.message!.kind;
    if (answer.case !== "assistant") throw new Error(`expected an assistant message, got ${answer.case}`);
    const userId = answer.value.parentId;

    const rpcName = "ledger.v1.SessionService/Prompt";
    const spans = await waitFor("the Prompt's spans", () => {
      const all = exporter.getFinishedSpans();
      const done = all.some((s) => s.name === rpcName) && all.filter((s) => s.name === "ai.streamText").length === 2;
      return done && all;
    });
    const rpc = spans.find((s) => s.name === rpcName)!;
    // The RPC span continues the caller's trace, as a child of the caller's span.
    expect(rpc.spanContext().traceId).toBe(CALLER_TRACE);
    expect(parentOf(rpc)).toBe(CALLER_SPAN);
    expect(rpc.kind).toBe(1); // SpanKind.SERVER
    expect(rpc.attributes).toEqual({
      "rpc.system": "connect_rpc",
      "rpc.service": "ledger.v1.SessionService",
      "rpc.method": "Prompt",
      "ledger.session_id": sessionId,
      "ledger.message_id": userId,
      "rpc.grpc.status_code": 0,
    });
    // Every span of the caller's trace descends from the RPC span (a commit hint of the CreateSession
    // before may still end in its own trace meanwhile).
    const inTrace = spans.filter((s) => s.spanContext().traceId === CALLER_TRACE);
    const byId = new Map(inTrace.map((s) => [idOf(s), s]));
    const rootOf = (s: ReadableSpan): ReadableSpan => (byId.has(parentOf(s) ?? "") ? rootOf(byId.get(parentOf(s)!)!) : s);
    expect(new Set(inTrace.map((s) => rootOf(s).name))).toEqual(new Set([rpcName]));

    expect(tree(spans, rpc)).toEqual({
      [rpcName]: [
        { "ledger.resolve_drafts": [] },
        { "ledger.write": [] },
        {
          "ai.streamText": [{ "ai.streamText.doStream": [] }, { "ai.toolCall": [{ "ledger.tool": [] }] }],
        },
        { "ai.streamText": [{ "ai.streamText.doStream": [] }] },
      ],
    });
    const named = (name: string) => spans.filter((s) => s.name === name);
    const ids = { "ledger.session_id": sessionId, "ledger.message_id": userId };
    expect(named("ledger.resolve_drafts")[0]!.attributes).toEqual({ ...ids, "ledger.parts": 2 });
    expect(named("ledger.write")[0]!.attributes).toEqual({ ...ids, "ledger.write_path": "statement" });
    expect(named("ledger.tool")[0]!.attributes).toEqual({ "ledger.tool.name": "read", "ledger.tool.call_id": "call_1" });
    const step = named("ai.streamText")[0]!;
    expect(step.attributes).toMatchObject({
      "ai.telemetry.functionId": "ledger.step",
      "ai.telemetry.metadata.sessionId": sessionId,
      "ai.model.provider": "fake.chat",
    });
    // Prompts stay out of the spans unless telemetry.record_content is set.
    expect(Object.keys(step.attributes).filter((key) => key.startsWith("ai.prompt"))).toEqual([]);

    // Each request to the model provider carried the trace context of its model call.
    const doStreams = named("ai.streamText.doStream");
    expect(t.fake.requests.map((r) => r.headers.traceparent)).toEqual(doStreams.map((s) => `00-${CALLER_TRACE}-${idOf(s)}-01`));

    // The RPC's log line names its span.
    const rpcLines = jsonLines().filter((l) => l.msg === "rpc" && l.procedure === `/${rpcName}`);
    expect(rpcLines).toEqual([expect.objectContaining({ code: "ok", session_id: sessionId, trace_id: CALLER_TRACE, span_id: idOf(rpc) })]);

    // Postgres queries (instrumentation-pg) are children of the ledger's spans, never roots; PGlite has no pg.
    const pgSpans = inTrace.filter((s) => scopeOf(s) === PG_SCOPE);
    if (TEST_ENGINE === "postgres") {
      const write = named("ledger.write")[0]!;
      const writeQueries = pgSpans.filter((s) => parentOf(s) === idOf(write) && s.name.startsWith("pg.query"));
      expect(writeQueries.length).toBeGreaterThan(0);
      expect(writeQueries[0]!.attributes).toMatchObject({ "db.system.name": "postgresql" });
      // requireParentSpan: queries outside a traced operation (retention, the relay) make no spans.
      expect(spans.filter((s) => scopeOf(s) === PG_SCOPE && !s.parentSpanContext)).toEqual([]);
    } else {
      expect(pgSpans).toEqual([]);
    }
  });

  it("an RPC without traceparent starts a trace; gRPC is rpc.system grpc and errors carry their code", async () => {
    const grpc = createClient(SessionService, createGrpcTransport({ baseUrl: t.ledger.url }));
    exporter.reset();
    await expect(grpc.getSession({ sessionId: "ses_00000000000000000000000000" })).rejects.toThrow();
    const rpc = await waitFor("the GetSession span", () => exporter.getFinishedSpans().find((s) => s.name.endsWith("/GetSession")));
    expect(rpc.parentSpanContext).toBeUndefined();
    expect(rpc.attributes).toEqual({
      "rpc.system": "grpc",
      "rpc.service": "ledger.v1.SessionService",
      "rpc.method": "GetSession",
      "ledger.session_id": "ses_00000000000000000000000000",
      "rpc.grpc.status_code": 5,
      "rpc.connect_rpc.error_code": "not_found",
    });
    // NOT_FOUND is the caller's problem, not a server failure.
    expect(rpc.status.code).toBe(0);
  });

  it("a server stream (PromptStream over gRPC-Web) runs its handler inside its span, which ends with the stream", async () => {
    const grpcWeb = createClient(SessionService, createGrpcWebTransport({ baseUrl: t.ledger.url, httpVersion: "1.1" }));
    const { session } = await t.client.createSession({ directory: t.dir });
    exporter.reset();
    const kinds: string[] = [];
    for await (const res of grpcWeb.promptStream(
      { sessionId: session!.id, noReply: true, parts: [text("stream me")] },
      { headers: { traceparent: TRACEPARENT } },
    ))
      kinds.push(res.event!.kind.case!);
    expect(kinds).toEqual(["agentSwitched", "modelSwitched", "messageUpdated", "partUpdated", "prompted", "sessionUpdated"]);
    const rpcName = "ledger.v1.SessionService/PromptStream";
    const spans = await waitFor("the PromptStream span", () => {
      const all = exporter.getFinishedSpans();
      return all.some((s) => s.name === rpcName) && all;
    });
    const rpc = spans.find((s) => s.name === rpcName)!;
    expect(rpc.attributes).toMatchObject({ "rpc.system": "grpc_web", "rpc.method": "PromptStream", "rpc.grpc.status_code": 0 });
    expect(parentOf(rpc)).toBe(CALLER_SPAN);
    expect(tree(spans, rpc)).toEqual({ [rpcName]: [{ "ledger.resolve_drafts": [] }, { "ledger.write": [] }] });
  });

  it("log lines written inside a span carry its trace_id and span_id", async () => {
    const lines: string[] = [];
    const log = createLogger({ level: "info", write: (line) => lines.push(line) });
    let ids: { traceId: string; spanId: string } | undefined;
    log.info("outside");
    await inSpan("test.span", {}, async (span) => {
      ids = span!.spanContext();
      log.info("inside", { n: 1 });
    });
    const [outside, inside] = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(outside).not.toHaveProperty("trace_id");
    expect(inside).toMatchObject({ msg: "inside", trace_id: ids!.traceId, span_id: ids!.spanId, n: 1 });
  });
});

describe("tracing not configured", () => {
  it("telemetry is off by default, on with an endpoint (file or OTEL_EXPORTER_OTLP_ENDPOINT), off with enabled: false", () => {
    const parse = (file: unknown, env: NodeJS.ProcessEnv = {}) => telemetryConfig(telemetrySchema.parse(file), env);
    expect(parse(undefined)).toEqual({ enabled: false, serviceName: "session-ledger", headers: {}, sampleRatio: 1, recordContent: false });
    expect(parse({ endpoint: "http://127.0.0.1:4318" }).enabled).toBe(true);
    expect(parse({}, { OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318" }).enabled).toBe(true);
    expect(parse({ enabled: false }, { OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318" }).enabled).toBe(false);
    expect(parse({ enabled: true }, { OTEL_SDK_DISABLED: "true" }).enabled).toBe(false);
    expect(parse({}, { OTEL_SERVICE_NAME: "ledger-eu" }).serviceName).toBe("ledger-eu");
    const refused = (telemetry: unknown) => {
      try {
        parseConfigText(JSON.stringify({ telemetry }), "ledger.json");
      } catch (error) {
        return (error as Error).message;
      }
      return "accepted";
    };
    expect(refused({ sample_ratio: 2 })).toBe("ledger.json: telemetry.sample_ratio: Too big: expected number to be <=1");
    expect(refused({ endpoint: "grpc://collector:4317" })).toBe(
      "ledger.json: telemetry.endpoint: expected an http(s) URL of an OTLP/HTTP collector",
    );
  });

  for (const [label, config] of [
    ["without telemetry", {}],
    ["with telemetry: {enabled: false}", { telemetry: { enabled: false } }],
  ] as const) {
    it(`${label}, a Prompt starts no tracing and records no span, even with a tracer provider registered`, async () => {
      // Someone else's provider: the ledger must not use it unless telemetry is configured.
      const exporter = new InMemorySpanExporter();
      const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
      trace.setGlobalTracerProvider(provider);
      const t = await startFakeModelLedger({ retry: NO_RETRY, ...config }, { transport: "http" });
      try {
        expect(t.ledger.deps.config.telemetry.enabled).toBe(false);
        expect(tracingEnabled()).toBe(false);
        const { session } = await t.client.createSession({ directory: t.dir });
        t.fake.push(say("Hi."));
        await t.client.prompt({ sessionId: session!.id, parts: [text("hello")] }, { headers: { traceparent: TRACEPARENT } });
        expect(exporter.getFinishedSpans()).toEqual([]);
        expect(t.fake.requests.map((r) => r.headers.traceparent)).toEqual([undefined]);
        expect(trace.getActiveSpan()).toBeUndefined();
        expect(context.active()).toBeDefined();
      } finally {
        await t.close();
        trace.disable();
        await provider.shutdown();
      }
    });
  }
});

describe("ledger serve with OTEL_EXPORTER_OTLP_ENDPOINT", () => {
  it("loads the SDK, exports the spans over OTLP/HTTP with the configured service name and headers, and flushes them on SIGTERM", async () => {
    const exports: { path: string; headers: Record<string, unknown>; body: Record<string, unknown> }[] = [];
    const collector = await listenLoopback(async (req, res) => {
      exports.push({ path: req.url ?? "", headers: req.headers, body: await readJsonObject(req) });
      sendJson(res, 200, {});
    });
    try {
      const serve = await spawnServe(
        { telemetry: { service_name: "ledger-e2e", headers: { "x-collector-key": "secret-key" } } },
        { OTEL_EXPORTER_OTLP_ENDPOINT: collector.origin },
      );
      let run;
      try {
        const { session } = await serve.client.createSession({ directory: serve.dir });
        await serve.client.prompt(
          { sessionId: session!.id, noReply: true, parts: [text("hello")] },
          { headers: { traceparent: TRACEPARENT } },
        );
      } finally {
        // The batch processor waits 5 s between exports: what arrives now is the flush on close.
        run = await serve.close();
      }
      expect(run.code, run.stderr).toBe(0);
      expect(exports.length).toBeGreaterThan(0);
      expect(exports.map((e) => [e.path, e.headers["content-type"], e.headers["x-collector-key"]])).toEqual(
        exports.map(() => ["/v1/traces", "application/json", "secret-key"]),
      );
      type OtlpSpan = { name: string; traceId: string; parentSpanId?: string };
      type ResourceSpans = {
        resource: { attributes: { key: string; value: { stringValue?: string } }[] };
        scopeSpans: { scope: { name: string }; spans: OtlpSpan[] }[];
      };
      const resourceSpans = exports.flatMap((e) => e.body.resourceSpans as ResourceSpans[]);
      const serviceNames = new Set(
        resourceSpans.map((r) => r.resource.attributes.find((a) => a.key === "service.name")?.value.stringValue),
      );
      expect(serviceNames).toEqual(new Set(["ledger-e2e"]));
      const spans = resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans));
      const prompt = spans.find((s) => s.name === "ledger.v1.SessionService/Prompt");
      expect(prompt).toMatchObject({ traceId: CALLER_TRACE, parentSpanId: CALLER_SPAN });
      expect(spans.filter((s) => s.traceId === CALLER_TRACE).map((s) => s.name)).toEqual(
        expect.arrayContaining(["ledger.resolve_drafts", "ledger.write", "ledger.v1.SessionService/Prompt"]),
      );
    } finally {
      await collector.close();
    }
  });

  it("an unreachable collector costs only the spans: the server answers and exits 0 after at most 3 s of export", async () => {
    const gone = await listenLoopback(async () => {});
    await gone.close();
    const serve = await spawnServe({}, { OTEL_EXPORTER_OTLP_ENDPOINT: gone.origin });
    const { session } = await serve.client.createSession({ directory: serve.dir });
    expect(session!.id).toMatch(/^ses_/);
    const closing = Date.now();
    const run = await serve.close();
    expect(run.code, run.stderr).toBe(0);
    expect(Date.now() - closing).toBeLessThan(10_000);
    const warnings = run.stderr
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((line) => line.level === "warn");
    expect(warnings).toEqual([
      expect.objectContaining({ msg: "tracing: the last spans were not exported in time; dropped", timeout_ms: 3000 }),
    ]);
  });
});
