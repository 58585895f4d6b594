import { spawn } from "node:child_process";
import http2 from "node:http2";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Code, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { createLogger, formatLine, levelFromEnv, logger, type LogLevel } from "../../src/observe/log.js";
import { createMetrics } from "../../src/observe/metrics.js";
import { codeName, protocolOf, requestIdFrom } from "../../src/observe/rpc.js";
import { TEST_ENGINE } from "../support/db.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { mockResolver, scriptedModel, textReply, usage, NO_RETRY } from "../support/mock-models.js";
import { text } from "../support/prompt.js";
import { connectError as failure } from "../support/errors.js";
import { waitFor } from "../support/wait.js";
import { parseExposition, sample } from "../support/exposition.js";
import { captureStderr } from "../support/stderr.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const SERVICE = "/ledger.v1.SessionService";
const TOKEN = "metrics-token-for-tests-0123456789";

/** The JSON log lines in `chunks` (anything written to stderr). */
function jsonLines(chunks: string[]): Record<string, unknown>[] {
  return chunks
    .join("")
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** What the code under test wrote to stderr during the current test (captured, not shown). */
const stderr = captureStderr();

describe("an in-process ledger", () => {
  let t: TestLedger;
  let level: LogLevel;

  beforeAll(async () => {
    // The suite may run with LEDGER_LOG_LEVEL=warn to keep its output quiet; these tests read the info lines.
    level = logger.level;
    logger.setLevel("info");
    const models = { "mock/model": scriptedModel([textReply("Hello there.", usage(8, 5, { cacheRead: 2, reasoning: 1 }))]) };
    t = await startTestLedger({ model: "mock/model", retry: NO_RETRY }, { models: mockResolver(models), transport: "http" });
  });
  afterAll(async () => {
    logger.setLevel(level);
    await t?.close();
  });

  const rpcLines = (requestId: string) => jsonLines(stderr.written()).filter((l) => l.msg === "rpc" && l.request_id === requestId);

  it("logs one JSON line per RPC (ok, failing, server stream) and echoes x-request-id", async () => {
    const echoed: Record<string, string | null> = {};
    const onHeader = (id: string) => (headers: Headers) => void (echoed[id] = headers.get("x-request-id"));

    const { session } = await t.client.createSession(
      { directory: t.dir },
      { headers: { "x-request-id": "req-create" }, onHeader: onHeader("req-create") },
    );
    const sessionId = session!.id;
    await t.client.getSession({ sessionId }, { headers: { "x-request-id": "req-get" }, onHeader: onHeader("req-get") });
    const error = await failure(t.client.prompt({ sessionId, noReply: true, parts: [] }, { headers: { "x-request-id": "req-bad" } }));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.metadata.get("x-request-id")).toBe("req-bad");
    const events = [];
    for await (const event of t.client.promptStream(
      { sessionId, noReply: true, parts: [text("stream me")] },
      { headers: { "x-request-id": "req-stream" }, onHeader: onHeader("req-stream") },
    )) {
      events.push(event);
    }
    expect(events.length).toBeGreaterThan(0);
    // No id sent: the server makes one (a ULID) and returns it.
    await t.client.listAgents({}, { onHeader: onHeader("generated") });

    expect(echoed).toMatchObject({ "req-create": "req-create", "req-get": "req-get", "req-stream": "req-stream" });
    expect(echoed.generated).toMatch(/^[0-9A-HJKMNP-TV-Z]{26}$/);

    const expectations: Array<[string, string, string, string | undefined]> = [
      ["req-create", "CreateSession", "ok", undefined],
      ["req-get", "GetSession", "ok", sessionId],
      ["req-bad", "Prompt", "invalid_argument", sessionId],
      ["req-stream", "PromptStream", "ok", sessionId],
      [echoed.generated!, "ListAgents", "ok", undefined],
    ];
    for (const [requestId, method, code, session_id] of expectations) {
      const lines = rpcLines(requestId);
      expect(lines, requestId).toHaveLength(1);
      const line = lines[0]!;
      expect(line).toMatchObject({
        level: "info",
        msg: "rpc",
        procedure: `${SERVICE}/${method}`,
        protocol: "connect",
        code,
        request_id: requestId,
      });
      expect(line.session_id).toBe(session_id);
      expect(typeof line.duration_ms).toBe("number");
      expect(line.duration_ms as number).toBeGreaterThanOrEqual(0);
      expect(Date.parse(line.time as string)).not.toBeNaN();
      expect(Object.keys(line).slice(0, 3)).toEqual(["time", "level", "msg"]);
    }
  });

  it("logs a server stream when it ends, also when the client cancels it", async () => {
    const { session } = await t.client.createSession({ directory: t.dir });
    const controller = new AbortController();
    const stream = t.client.watchSession(
      { sessionId: session!.id },
      { headers: { "x-request-id": "req-watch" }, signal: controller.signal },
    );
    const reading = (async () => {
      try {
        for await (const _ of stream) void _;
      } catch {
        // canceled by us
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(rpcLines("req-watch")).toHaveLength(0);
    controller.abort();
    await reading;
    const line = await waitFor("the WatchSession log line", () => rpcLines("req-watch")[0], 5000);
    expect(line).toMatchObject({ procedure: `${SERVICE}/WatchSession`, session_id: session!.id });
    expect(line.code).toBe("canceled");
    expect(rpcLines("req-watch")).toHaveLength(1);

    // A stream that fails is logged with its code.
    const missing = await failure(
      (async () => {
        for await (const _ of t.client.watchSession(
          { sessionId: "ses_00000000000000000000000000" },
          { headers: { "x-request-id": "req-watch-missing" } },
        ))
          void _;
      })(),
    );
    expect(missing.code).toBe(Code.NotFound);
    expect(rpcLines("req-watch-missing")).toEqual([expect.objectContaining({ procedure: `${SERVICE}/WatchSession`, code: "not_found" })]);
  });

  it("speaks gRPC over h2 too: protocol grpc, x-request-id echoed", async () => {
    const grpc = createClient(SessionService, createGrpcTransport({ baseUrl: t.ledger.url }));
    let echoed: string | null = null;
    await grpc.listAgents({}, { headers: { "x-request-id": "req-grpc" }, onHeader: (h) => void (echoed = h.get("x-request-id")) });
    const error = await failure(
      grpc.getSession({ sessionId: "ses_00000000000000000000000000" }, { headers: { "x-request-id": "req-grpc-missing" } }),
    );
    expect(error.code).toBe(Code.NotFound);
    expect(echoed).toBe("req-grpc");
    expect(rpcLines("req-grpc")).toEqual([expect.objectContaining({ procedure: `${SERVICE}/ListAgents`, protocol: "grpc", code: "ok" })]);
    expect(rpcLines("req-grpc-missing")).toEqual([
      expect.objectContaining({ protocol: "grpc", code: "not_found", session_id: "ses_00000000000000000000000000" }),
    ]);
  });

  it("logs and counts requests the adapter refuses before any handler runs", async () => {
    const res = await fetch(`${t.ledger.url}${SERVICE}/CreateSession`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-request-id": "req-malformed" },
      body: "{not json",
    });
    expect(res.status).toBe(400);
    expect(res.headers.get("x-request-id")).toBe("req-malformed");
    const line = await waitFor("the malformed request's log line", () => rpcLines("req-malformed")[0], 5000);
    expect(line).toMatchObject({ procedure: `${SERVICE}/CreateSession`, code: "invalid_argument", http_status: 400 });

    const unknown = await fetch(`${t.ledger.url}/no.such.Service/Method`, { method: "POST", headers: { "x-request-id": "req-unknown" } });
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get("x-request-id")).toBe("req-unknown");
    const http = await waitFor(
      "the unknown path's log line",
      () => jsonLines(stderr.written()).find((l) => l.request_id === "req-unknown"),
      5000,
    );
    expect(http).toMatchObject({ msg: "http", path: "/no.such.Service/Method", status: 404 });
  });

  it("logs gRPC and gRPC-Web requests refused before any handler with the status the client got (it was 'ok')", async () => {
    // One message of 3 bytes that is no protobuf: connect-node refuses it before the handler.
    const garbage = Buffer.from([0, 0, 0, 0, 3, 0xff, 0xff, 0xff]);
    const session = http2.connect(t.ledger.url);
    const grpcStatus = await new Promise<string>((resolve, reject) => {
      const req = session.request({
        ":method": "POST",
        ":path": `${SERVICE}/GetSession`,
        "content-type": "application/grpc",
        te: "trailers",
        "x-request-id": "req-grpc-garbage",
      });
      let status = "";
      req.on("response", (headers) => (status = String(headers["grpc-status"] ?? status)));
      req.on("trailers", (trailers) => (status = String(trailers["grpc-status"] ?? status)));
      req.on("end", () => resolve(status));
      req.on("error", reject);
      req.resume();
      req.end(garbage);
    });
    session.close();
    expect(grpcStatus).toBe("3");
    const web = await fetch(`${t.ledger.url}${SERVICE}/GetSession`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+proto", "x-request-id": "req-web-garbage" },
      body: garbage,
    });
    expect(Buffer.from(await web.arrayBuffer()).toString("latin1")).toMatch(/grpc-status:\s*3/);
    const lines = await waitFor(
      "both refused requests' log lines",
      () => {
        const found = ["req-grpc-garbage", "req-web-garbage"].map((id) => rpcLines(id)[0]);
        return found.every(Boolean) ? found : undefined;
      },
      5000,
    );
    expect(lines.map((l) => [l!.protocol, l!.code])).toEqual([
      ["grpc", "invalid_argument"],
      ["grpc-web", "invalid_argument"],
    ]);
  });

  it("a client that hangs up on a stream while it is being written is an ordinary cancellation: an info line, no error, no stack", async () => {
    const { session } = await t.client.createSession({ directory: t.dir });
    const sessionId = session!.id;
    // Enough stored events that the replay is still being written when the client goes.
    for (let i = 0; i < 20; i++) await t.client.prompt({ sessionId, noReply: true, parts: [text("x".repeat(200_000))] });
    const clients = { connect: t.client, grpc: createClient(SessionService, createGrpcTransport({ baseUrl: t.ledger.url })) };
    const ids: string[] = [];
    for (const [name, client] of Object.entries(clients)) {
      for (let k = 0; k < 3; k++) {
        const id = `hangup-${name}-${k}`;
        ids.push(id);
        const controller = new AbortController();
        try {
          for await (const _ of client.watchSession({ sessionId }, { signal: controller.signal, headers: { "x-request-id": id } }))
            controller.abort();
        } catch {
          // canceled by us
        }
      }
    }
    const lines = await waitFor(
      "a log line per canceled stream",
      () => {
        const found = ids.map((id) => rpcLines(id)[0]);
        return found.every(Boolean) ? found : undefined;
      },
      5000,
    );
    for (const line of lines)
      expect(line).toMatchObject({ level: "info", procedure: `${SERVICE}/WatchSession`, code: "canceled", session_id: sessionId });
    // Give a late write failure the time to be logged, then check nothing was.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(jsonLines(stderr.written()).filter((l) => l.level === "error" || l.level === "warn")).toEqual([]);
    expect(stderr.written().join("")).not.toMatch(/stack|Cannot call write|stream has been destroyed/);
  });

  it("a request without a usable content type: 415 with a Connect error naming what to send, logged and counted as invalid_argument", async () => {
    const body = new TextEncoder().encode("{}"); // bytes: fetch adds no content-type, like curl --data-binary without -H
    const cases: Array<[string, Record<string, string>, string]> = [
      [
        "ListModels",
        {},
        "missing content-type: /ledger.v1.SessionService/ListModels expects application/json or application/proto (Connect)",
      ],
      [
        "ListModels",
        { "content-type": "text/plain" },
        'unsupported content-type "text/plain": /ledger.v1.SessionService/ListModels expects application/json',
      ],
      [
        "WatchSession",
        { "content-type": "application/json" },
        "expects application/connect+json or application/connect+proto (Connect streaming)",
      ],
    ];
    for (const [i, [method, headers, message]] of cases.entries()) {
      const res = await fetch(`${t.ledger.url}${SERVICE}/${method}`, {
        method: "POST",
        headers: { ...headers, "x-request-id": `req-415-${i}` },
        body,
      });
      expect(res.status).toBe(415);
      expect(res.headers.get("content-type")).toBe("application/json");
      expect(res.headers.get("accept-post")).toContain("application/grpc");
      const error = (await res.json()) as { code: string; message: string };
      expect(error.code).toBe("invalid_argument");
      expect(error.message).toContain(message);
      expect(error.message).toContain("application/grpc[+proto|+json] (gRPC) or application/grpc-web[+proto|+json] (gRPC-Web)");
      const line = await waitFor("the 415's log line", () => rpcLines(`req-415-${i}`)[0], 5000);
      expect(line).toMatchObject({ procedure: `${SERVICE}/${method}`, code: "invalid_argument", http_status: 415 });
    }
    const samples = parseExposition(await (await fetch(`${t.ledger.url}/metrics`)).text());
    expect(sample(samples, "ledger_rpc_requests_total", { procedure: `${SERVICE}/ListModels`, code: "invalid_argument" })).toBe(2);
    expect(sample(samples, "ledger_rpc_requests_total", { procedure: `${SERVICE}/WatchSession`, code: "invalid_argument" })).toBe(1);
    // The right content type still works.
    expect(
      (await fetch(`${t.ledger.url}${SERVICE}/ListModels`, { method: "POST", headers: { "content-type": "application/json" }, body }))
        .status,
    ).toBe(200);
  });

  it("a GET or PUT of a procedure: 405 with allow: POST and a Connect error saying so, logged and counted as invalid_argument", async () => {
    for (const [i, method] of ["GET", "PUT"].entries()) {
      const res = await fetch(`${t.ledger.url}${SERVICE}/ListSessions`, { method, headers: { "x-request-id": `req-405-${i}` } });
      expect(res.status).toBe(405);
      expect(res.headers.get("allow")).toBe("POST");
      expect(await res.json()).toEqual({
        code: "invalid_argument",
        message: `HTTP method ${method} is not allowed: ${SERVICE}/ListSessions takes POST (Connect, gRPC and gRPC-Web)`,
      });
      const line = await waitFor("the 405's log line", () => rpcLines(`req-405-${i}`)[0], 5000);
      expect(line).toMatchObject({ procedure: `${SERVICE}/ListSessions`, code: "invalid_argument", http_status: 405 });
    }
    const samples = parseExposition(await (await fetch(`${t.ledger.url}/metrics`)).text());
    expect(sample(samples, "ledger_rpc_requests_total", { procedure: `${SERVICE}/ListSessions`, code: "invalid_argument" })).toBe(2);
  });

  it("serves GET /metrics: RPC counters and latencies, loop steps and tokens, DB pool, process metrics", async () => {
    const { session } = await t.client.createSession({ directory: t.dir });
    // Answered by the scripted model: one step, finish stop, 8 input / 5 output / 2 cache-read / 1 reasoning tokens.
    const answer = await t.client.prompt({ sessionId: session!.id, parts: [text("say hello")] });
    expect(answer.message?.message?.kind.case).toBe("assistant");
    await failure(t.client.getSession({ sessionId: "ses_00000000000000000000000000" }));

    const res = await fetch(`${t.ledger.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(res.headers.get("x-request-id")).toMatch(/^[0-9A-HJKMNP-TV-Z]{26}$/);
    const body = await res.text();
    const samples = parseExposition(body);

    expect(sample(samples, "ledger_rpc_requests_total", { procedure: `${SERVICE}/Prompt`, code: "ok" })).toBeGreaterThanOrEqual(1);
    expect(sample(samples, "ledger_rpc_requests_total", { procedure: `${SERVICE}/GetSession`, code: "not_found" })).toBeGreaterThanOrEqual(
      1,
    );
    expect(sample(samples, "ledger_rpc_requests_total", { procedure: `${SERVICE}/Prompt`, code: "invalid_argument" })).toBe(1);
    expect(sample(samples, "ledger_rpc_requests_total", { procedure: `${SERVICE}/PromptStream`, code: "ok" })).toBe(1);
    expect(sample(samples, "ledger_rpc_duration_seconds_count", { procedure: `${SERVICE}/Prompt` })).toBeGreaterThanOrEqual(2);
    expect(sample(samples, "ledger_rpc_duration_seconds_bucket", { procedure: `${SERVICE}/Prompt`, le: "+Inf" })).toBeGreaterThanOrEqual(2);
    expect(body).toContain("# TYPE ledger_rpc_duration_seconds histogram");
    // Unknown paths never become label values.
    expect(samples.some((s) => s.labels.procedure?.includes("no.such"))).toBe(false);

    expect(sample(samples, "ledger_loop_steps_total", { provider: "mock", model: "model", finish: "stop" })).toBe(1);
    expect(sample(samples, "ledger_tokens_total", { provider: "mock", model: "model", kind: "input" })).toBe(8);
    expect(sample(samples, "ledger_tokens_total", { provider: "mock", model: "model", kind: "output" })).toBe(5);
    expect(sample(samples, "ledger_tokens_total", { provider: "mock", model: "model", kind: "reasoning" })).toBe(1);
    expect(sample(samples, "ledger_tokens_total", { provider: "mock", model: "model", kind: "cache_read" })).toBe(2);

    const pool = Object.fromEntries(
      ["total", "idle", "waiting"].map((state) => [state, sample(samples, "ledger_db_pool_connections", { state })]),
    );
    if (TEST_ENGINE === "pglite") {
      expect(pool).toEqual({ total: 1, idle: 0, waiting: 0 });
    } else {
      expect(pool.total).toBeGreaterThanOrEqual(1);
      expect(pool.idle).toBeGreaterThanOrEqual(0);
      expect(pool.idle!).toBeLessThanOrEqual(pool.total!);
      expect(pool.waiting).toBe(0);
    }
    expect(sample(samples, "process_cpu_seconds_total")).toBeGreaterThanOrEqual(0);
    expect(sample(samples, "nodejs_heap_size_used_bytes")).toBeGreaterThan(0);

    // The scrape itself is not an RPC.
    expect(samples.some((s) => s.labels.procedure === "/metrics")).toBe(false);
    expect((await fetch(`${t.ledger.url}/metrics`, { method: "POST" })).status).toBe(405);
  });
});

describe("a ledger with a bearer token", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger({ auth: { token: TOKEN } }, { transport: "http" });
  });
  afterAll(async () => {
    await t?.close();
  });

  it("requires the token on /metrics", async () => {
    const none = await fetch(`${t.ledger.url}/metrics`);
    expect(none.status).toBe(401);
    expect(none.headers.get("www-authenticate")).toBe(`Bearer realm="session-ledger"`);
    expect((await fetch(`${t.ledger.url}/metrics`, { headers: { authorization: "Bearer wrong-token" } })).status).toBe(401);
    const ok = await fetch(`${t.ledger.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(ok.status).toBe(200);
    expect(await ok.text()).toContain("ledger_db_pool_connections");
  });

  it("counts refused RPCs as unauthenticated", async () => {
    const client = createClient(SessionService, createConnectTransport({ baseUrl: t.ledger.url, httpVersion: "1.1" }));
    expect((await failure(client.listAgents({}))).code).toBe(Code.Unauthenticated);
    const body = await (await fetch(`${t.ledger.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
    expect(
      sample(parseExposition(body), "ledger_rpc_requests_total", { procedure: `${SERVICE}/ListAgents`, code: "unauthenticated" }),
    ).toBe(1);
  });
});

describe("`ledger serve` as a child process", () => {
  it("writes one JSON line per RPC to stderr", async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, LEDGER_LOG_LEVEL: "info" };
    delete env.DATABASE_URL;
    delete env.LEDGER_CONFIG;
    const child = spawn(process.execPath, [path.join(ROOT, "bin/ledger.js"), "serve", "--port", "0", "--db", ":memory:"], {
      cwd: ROOT,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const stdout: string[] = [];
    const stderr: string[] = [];
    child.stdout.on("data", (d: Buffer) => stdout.push(d.toString("utf8")));
    child.stderr.on("data", (d: Buffer) => stderr.push(d.toString("utf8")));
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    try {
      const url = await waitFor("the listening line", () => /listening on (\S+)/.exec(stdout.join(""))?.[1], 90_000);
      const client = createClient(SessionService, createConnectTransport({ baseUrl: url, httpVersion: "1.1" }));
      let echoed: string | null = null;
      const { session } = await client.createSession(
        { directory: ROOT },
        { headers: { "x-request-id": "child-create" }, onHeader: (h) => void (echoed = h.get("x-request-id")) },
      );
      expect(echoed).toBe("child-create");
      await failure(client.getSession({ sessionId: "ses_123" }, { headers: { "x-request-id": "child-bad" } }));
      await client.getSession({ sessionId: session!.id }, { headers: { "x-request-id": "child-get" } });
      const lines = () => jsonLines(stderr).filter((l) => l.msg === "rpc");
      await waitFor("three rpc lines", () => (lines().length >= 3 ? true : undefined), 5000);
      expect(lines()).toEqual([
        expect.objectContaining({
          level: "info",
          procedure: `${SERVICE}/CreateSession`,
          protocol: "connect",
          code: "ok",
          request_id: "child-create",
        }),
        expect.objectContaining({
          procedure: `${SERVICE}/GetSession`,
          code: "invalid_argument",
          request_id: "child-bad",
          session_id: "ses_123",
        }),
        expect.objectContaining({ procedure: `${SERVICE}/GetSession`, code: "ok", request_id: "child-get", session_id: session!.id }),
      ]);
      for (const line of lines()) expect(typeof line.duration_ms).toBe("number");
      const scrape = await (await fetch(`${url}/metrics`)).text();
      expect(sample(parseExposition(scrape), "ledger_db_pool_connections", { state: "total" })).toBe(1);
    } finally {
      child.kill("SIGTERM");
      await exited;
    }
  }, 120_000);
});

describe("building blocks", () => {
  it("the logger filters by level and writes one JSON object per line", () => {
    const lines: string[] = [];
    const log = createLogger({ level: "warn", write: (line) => void lines.push(line) });
    log.info("dropped");
    log.warn("kept", { n: 1n, msg: "shadowed", error: new Error("boom"), skip: undefined });
    expect(lines).toHaveLength(1);
    expect(lines[0]!.endsWith("\n")).toBe(true);
    const parsed = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(parsed).toMatchObject({ level: "warn", msg: "kept", n: "1", field_msg: "shadowed", error: { name: "Error", message: "boom" } });
    expect("skip" in parsed).toBe(false);
    expect(log.enabled("error")).toBe(true);
    expect(log.enabled("info")).toBe(false);
    log.setLevel("debug");
    log.debug("now kept");
    expect(lines).toHaveLength(2);
    expect(log.level).toBe("debug");
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => JSON.parse(formatLine("info", "cycle", { cyclic }))).not.toThrow();
  });

  it("LEDGER_LOG_LEVEL picks the level, default info", () => {
    expect(levelFromEnv({})).toBe("info");
    expect(levelFromEnv({ LEDGER_LOG_LEVEL: "DEBUG" })).toBe("debug");
    expect(levelFromEnv({ LEDGER_LOG_LEVEL: "error" })).toBe("error");
    expect(levelFromEnv({ LEDGER_LOG_LEVEL: "verbose" })).toBe("info");
  });

  it("request ids: a usable incoming id is kept, anything else replaced by a ULID", () => {
    expect(requestIdFrom("abc-123")).toBe("abc-123");
    for (const bad of [undefined, null, "", "has space", "x".repeat(129), ["a", "b"], "é"])
      expect(requestIdFrom(bad)).toMatch(/^[0-9A-HJKMNP-TV-Z]{26}$/);
    expect(codeName(Code.InvalidArgument)).toBe("invalid_argument");
    expect(codeName(Code.Canceled)).toBe("canceled");
    expect(protocolOf("application/grpc-web+proto")).toBe("grpc-web");
    expect(protocolOf("application/grpc")).toBe("grpc");
    expect(protocolOf("application/json")).toBe("connect");
    expect(protocolOf(null)).toBe("connect");
  });

  it("separate registries do not share series; step finish is aborted/error/the reason", async () => {
    const a = createMetrics({ processMetrics: false });
    const b = createMetrics({ processMetrics: false, pool: () => ({ total: 3, idle: 2, waiting: 1 }) });
    a.observeRpc("/x.Y/Z", "ok", 0.01);
    a.observeStep({ providerId: "p", modelId: "m" }, { aborted: true });
    a.observeStep({ providerId: "p", modelId: "m" }, { aborted: false, error: new Error("x") });
    a.observeStep(
      { providerId: "p", modelId: "m" },
      { aborted: false, finishReason: "tool-calls", usage: { input: 1, output: 2, reasoning: 0, cacheRead: 0, cacheWrite: 4 } },
    );
    const sa = parseExposition(await a.scrape());
    const sb = parseExposition(await b.scrape());
    expect(sample(sa, "ledger_rpc_requests_total", { procedure: "/x.Y/Z", code: "ok" })).toBe(1);
    expect(sample(sb, "ledger_rpc_requests_total", { procedure: "/x.Y/Z" })).toBeUndefined();
    for (const finish of ["aborted", "error", "tool-calls"]) expect(sample(sa, "ledger_loop_steps_total", { finish })).toBe(1);
    expect(sample(sa, "ledger_tokens_total", { kind: "cache_write" })).toBe(4);
    expect(sample(sa, "ledger_db_pool_connections", { state: "total" })).toBeUndefined();
    expect([
      sample(sb, "ledger_db_pool_connections", { state: "total" }),
      sample(sb, "ledger_db_pool_connections", { state: "idle" }),
      sample(sb, "ledger_db_pool_connections", { state: "waiting" }),
    ]).toEqual([3, 2, 1]);
  });
});
