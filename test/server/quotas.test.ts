import { mkdir, mkdtemp, realpath, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema, QuotaFailureSchema, RetryInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { startLedger, type RunningLedger } from "../../src/app.js";
import { buildConfig, configFileSchema } from "../../src/config/config.js";
import { tenantLabel } from "../../src/ledger/quotas.js";
import { createTestDatabase, TEST_ENGINE, type TestDatabase } from "../support/db.js";
import { connectError } from "../support/errors.js";
import { parseExposition, sample } from "../support/exposition.js";
import { startFakeModelLedger, startTestLedger, type FakeModelLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { lastSeq, storedRows } from "../support/stored.js";
import { sleep, waitFor } from "../support/wait.js";

// Quotas (docs/security.md, "Quotas"): prompts per minute, concurrent loops and stored bytes per
// JWT principal and per tenant, refused with RESOURCE_EXHAUSTED, QuotaFailure (and RetryInfo), nothing stored,
// counted per tenant in /metrics; the count is shared by ledgers on one Postgres database.

const SECRET = "a-shared-secret-of-at-least-32-bytes!!";
const STATIC = "static-token-for-the-operator-0123";
const admin = { headers: { authorization: `Bearer ${STATIC}` } };

const jwt = (sub: string, org: string) =>
  new SignJWT({ sub, org }).setProtectedHeader({ alg: "HS256" }).setExpirationTime("5m").sign(new TextEncoder().encode(SECRET));
const as = async (sub: string, org: string) => ({ headers: { authorization: `Bearer ${await jwt(sub, org)}` } });

/** Waits, when less than `marginMs` is left in the current minute, until the next minute starts, so a test's prompts share one window. */
async function sameMinute(marginMs = 8_000): Promise<void> {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < marginMs) await sleep(left + 250);
}

/** The code, message and details of a refusal. */
function detailsOf(error: ConnectError) {
  const retry = error.findDetails(RetryInfoSchema)[0]?.retryDelay;
  return {
    code: error.code,
    message: error.rawMessage,
    errorInfo: error.findDetails(ErrorInfoSchema).map((d) => ({ reason: d.reason, domain: d.domain, metadata: d.metadata })),
    violations: error
      .findDetails(QuotaFailureSchema)
      .flatMap((d) => d.violations.map((v) => ({ subject: v.subject, description: v.description }))),
    retryMs: retry ? Number(retry.seconds) * 1000 + retry.nanos / 1e6 : undefined,
  };
}

/** The expected refusal of `prompts_per_minute` for `scope` `name` at `limit`. */
function perMinute(scope: "principal" | "tenant", name: string, limit: number) {
  return {
    code: Code.ResourceExhausted,
    message: expect.stringMatching(
      new RegExp(
        `^quota exceeded: ${scope} ${name} has stored ${limit} prompts this minute, the limit of quotas\\.${scope}\\.prompts_per_minute \\(${limit}\\); nothing was stored, retry in \\d+ s$`,
      ),
    ),
    errorInfo: [
      {
        reason: "QUOTA_EXCEEDED",
        domain: "ledger.v1",
        metadata: {
          quota: "prompts_per_minute",
          scope,
          subject: `${scope}:${name}`,
          limit: String(limit),
          retry_after_ms: expect.stringMatching(/^\d+$/),
        },
      },
    ],
    violations: [{ subject: `${scope}:${name}`, description: `quotas.${scope}.prompts_per_minute: at most ${limit} prompts per minute` }],
    retryMs: expect.any(Number),
  };
}

/** Creates a session in `dir` as `options`' caller and returns its id. */
async function sessionOf(client: Client<typeof SessionService>, dir: string, options: object): Promise<string> {
  return (await client.createSession({ directory: dir }, options)).session!.id;
}

let base: string;
const dirs = { acme: "", globex: "", initech: "" };

beforeAll(async () => {
  base = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-quotas-")));
  for (const name of Object.keys(dirs) as (keyof typeof dirs)[]) await mkdir((dirs[name] = path.join(base, name)));
});
afterAll(async () => {
  if (base) await rm(base, { recursive: true, force: true });
});

/** The config of a ledger with JWTs (tenant claim `org`), the static token and `quotas`. */
function quotaConfig(quotas: object, extra: object = {}) {
  return {
    auth: { token: STATIC, jwt: { secret: SECRET, tenant_claim: "org" } },
    tenants: { acme: { roots: [dirs.acme] }, globex: { roots: [dirs.globex] }, initech: { roots: [dirs.initech] } },
    quotas,
    ...extra,
  };
}

describe("quotas config", () => {
  it("parses per principal and tenant limits (default: unlimited) and refuses non-positive or unknown keys", () => {
    const parse = (quotas: unknown) => buildConfig(configFileSchema.parse({ quotas }), undefined, "/tmp").quotas;
    expect(buildConfig(configFileSchema.parse({}), undefined, "/tmp").quotas).toEqual({ principal: {}, tenant: {} });
    expect(
      parse({ principal: { prompts_per_minute: 60, concurrent_loops: 2, stored_bytes: 1e9 }, tenant: { prompts_per_minute: 600 } }),
    ).toEqual({
      principal: { promptsPerMinute: 60, concurrentLoops: 2, storedBytes: 1e9 },
      tenant: { promptsPerMinute: 600, concurrentLoops: undefined, storedBytes: undefined },
    });
    expect(() => parse({ principal: { prompts_per_minute: 0 } })).toThrow();
    expect(() => parse({ principal: { concurrent_loops: 1.5 } })).toThrow();
    expect(() => parse({ principal: { stored_bytes: -1 } })).toThrow();
    expect(() => parse({ principal: { stored_kb: 10 } })).toThrow();
    expect(() => parse({ team: {} })).toThrow();
  });
});

describe(`prompts per minute (${TEST_ENGINE})`, () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger(
      quotaConfig(
        { principal: { prompts_per_minute: 3 }, tenant: { prompts_per_minute: 5 } },
        { command: { hello: { template: "hello" } } },
      ),
      { transport: "http" },
    );
  });
  afterAll(() => t?.close());

  const noReply = (sessionId: string, words: string) => ({ sessionId, parts: [text(words)], noReply: true });

  it("refuses the 4th prompt of a principal in a minute with QuotaFailure and RetryInfo, on every RPC that stores a prompt, storing nothing; others go on", async () => {
    await sameMinute();
    const alice = await as("alice", "acme");
    const session = await sessionOf(t.client, dirs.acme, alice);
    for (const n of [1, 2, 3]) await t.client.prompt(noReply(session, `prompt ${n}`), alice);
    const rows = await storedRows(t.ledger.deps.db, session);
    const seq = await lastSeq(t.ledger.deps.db, session);
    expect(rows).toHaveLength(3);

    const refused = [
      await connectError(t.client.prompt(noReply(session, "4"), alice)),
      await connectError(t.client.promptStream(noReply(session, "4"), alice)),
      await connectError(t.client.promptAsync(noReply(session, "4"), alice)),
      await connectError(t.client.command({ sessionId: session, command: "hello", noReply: true }, alice)),
      await connectError(t.client.shell({ sessionId: session, command: "echo hi", agent: "build" }, alice)),
    ].map(detailsOf);
    for (const r of refused) {
      expect(r).toEqual(perMinute("principal", "alice", 3));
      const left = 60_000 - (Date.now() % 60_000);
      expect(r.retryMs).toBeGreaterThan(0);
      expect(r.retryMs).toBeLessThanOrEqual(60_000);
      expect(Math.abs(r.retryMs! - left)).toBeLessThan(5_000);
    }
    expect(await storedRows(t.ledger.deps.db, session)).toEqual(rows);
    expect(await lastSeq(t.ledger.deps.db, session)).toBe(seq);

    // Other RPCs of the session are not counted; another principal, and the static token, are not limited by alice's quota.
    expect((await t.client.listMessages({ sessionId: session }, alice)).messages).toHaveLength(3);
    const carol = await as("carol", "globex");
    const carols = await sessionOf(t.client, dirs.globex, carol);
    for (const n of [1, 2, 3]) await t.client.prompt(noReply(carols, `carol ${n}`), carol);
    for (const n of [1, 2, 3, 4, 5, 6]) await t.client.prompt(noReply(session, `operator ${n}`), admin);
    expect(await storedRows(t.ledger.deps.db, session)).toHaveLength(9);
  });

  it("counts every principal of a tenant against the tenant's quota; a principal's refusal does not use the tenant's", async () => {
    await sameMinute();
    const [bob, dan, erin] = await Promise.all([as("bob", "initech"), as("dan", "initech"), as("erin", "initech")]);
    const session = await sessionOf(t.client, dirs.initech, bob);
    const dans = await sessionOf(t.client, dirs.initech, dan);
    const erins = await sessionOf(t.client, dirs.initech, erin);
    for (const n of [1, 2, 3]) await t.client.prompt(noReply(session, `bob ${n}`), bob);
    // bob's own quota is full: refused, and the refusal is not counted against initech.
    expect(detailsOf(await connectError(t.client.prompt(noReply(session, "bob 4"), bob)))).toEqual(perMinute("principal", "bob", 3));
    for (const n of [1, 2]) await t.client.prompt(noReply(dans, `dan ${n}`), dan);
    const seq = await lastSeq(t.ledger.deps.db, erins);
    expect(detailsOf(await connectError(t.client.prompt(noReply(erins, "erin 1"), erin)))).toEqual(perMinute("tenant", "initech", 5));
    expect(detailsOf(await connectError(t.client.promptAsync(noReply(dans, "dan 3"), dan)))).toEqual(perMinute("tenant", "initech", 5));
    expect(await storedRows(t.ledger.deps.db, erins)).toEqual([]);
    expect(await lastSeq(t.ledger.deps.db, erins)).toBe(seq);
  });

  it("counts refusals in ledger_quota_exceeded_total by tenant and quota, never by principal", async () => {
    const samples = parseExposition(await (await fetch(`${t.ledger.url}/metrics`, admin)).text());
    expect(sample(samples, "ledger_quota_exceeded_total", { tenant: "acme", quota: "prompts_per_minute" })).toBe(5);
    expect(sample(samples, "ledger_quota_exceeded_total", { tenant: "initech", quota: "prompts_per_minute" })).toBe(3);
    expect(sample(samples, "ledger_quota_exceeded_total", { tenant: "globex", quota: "prompts_per_minute" })).toBeUndefined();
    for (const s of samples.filter((s) => s.name === "ledger_quota_exceeded_total"))
      expect(Object.keys(s.labels).sort()).toEqual(["quota", "tenant"]);
  });
});

describe(`concurrent loops (${TEST_ENGINE})`, () => {
  let t: FakeModelLedger;
  beforeAll(async () => {
    t = await startFakeModelLedger(quotaConfig({ principal: { concurrent_loops: 1 }, tenant: { concurrent_loops: 2 } }), {
      transport: "http",
    });
  });
  afterAll(() => t?.close());

  const ask = (sessionId: string, words: string, noReply = false) => ({ sessionId, parts: [text(words)], noReply });
  /** Waits until the session's answer runs: an assistant message without `time.completed` is stored. */
  const running = (sessionId: string) =>
    waitFor(`a running answer in ${sessionId}`, async () => {
      const messages = (await t.client.listMessages({ sessionId }, admin)).messages;
      return messages.some((m) => m.message?.kind.case === "assistant" && !m.message.kind.value.time?.completed);
    });
  const idle = (sessionId: string) =>
    waitFor(`no running answer in ${sessionId}`, async () => {
      const messages = (await t.client.listMessages({ sessionId }, admin)).messages;
      return messages.length > 0 && messages.every((m) => m.message?.kind.case !== "assistant" || m.message.kind.value.time?.completed);
    });
  const concurrent = (scope: "principal" | "tenant", name: string, limit: number) => ({
    code: Code.ResourceExhausted,
    message: `quota exceeded: ${scope} ${name} already has ${limit} sessions with a running answer, the limit of quotas.${scope}.concurrent_loops (${limit}); nothing was stored, retry when one of its answers has finished`,
    errorInfo: [
      {
        reason: "QUOTA_EXCEEDED",
        domain: "ledger.v1",
        metadata: { quota: "concurrent_loops", scope, subject: `${scope}:${name}`, limit: String(limit) },
      },
    ],
    violations: [
      {
        subject: `${scope}:${name}`,
        description: `quotas.${scope}.concurrent_loops: at most ${limit} sessions with a running answer at once`,
      },
    ],
    retryMs: undefined,
  });

  it("refuses a prompt that would start a loop while the principal's (or tenant's) limit of running answers is reached; allows it once one has finished", async () => {
    const [alice, bob, carl] = await Promise.all([as("alice", "acme"), as("bob", "acme"), as("carl", "acme")]);
    const [a1, a2, b1, c1] = await Promise.all([
      sessionOf(t.client, dirs.acme, alice),
      sessionOf(t.client, dirs.acme, alice),
      sessionOf(t.client, dirs.acme, bob),
      sessionOf(t.client, dirs.acme, carl),
    ]);
    // Replies that block until their loop is aborted.
    t.fake.push({ kind: "stream", chunks: [{ hang: true }] }, { kind: "stream", chunks: [{ hang: true }] });
    await t.client.promptAsync(ask(a1, "first"), alice);
    await running(a1);

    const seq = await lastSeq(t.ledger.deps.db, a2);
    const refused = [
      await connectError(t.client.prompt(ask(a2, "second"), alice)),
      await connectError(t.client.promptStream(ask(a2, "second"), alice)),
      await connectError(t.client.promptAsync(ask(a2, "second"), alice)),
    ].map(detailsOf);
    for (const r of refused) expect(r).toEqual(concurrent("principal", "alice", 1));
    expect(await storedRows(t.ledger.deps.db, a2)).toEqual([]);
    expect(await lastSeq(t.ledger.deps.db, a2)).toBe(seq);
    // A prompt without a reply starts no loop: stored.
    await t.client.prompt(ask(a2, "just a note", true), alice);
    expect(await storedRows(t.ledger.deps.db, a2)).toHaveLength(1);

    // bob (same tenant) may run one: the tenant then has 2 running, and carl is refused by the tenant's limit.
    await t.client.promptAsync(ask(b1, "bob's"), bob);
    await running(b1);
    expect(detailsOf(await connectError(t.client.promptAsync(ask(c1, "carl's"), carl)))).toEqual(concurrent("tenant", "acme", 2));
    expect(await storedRows(t.ledger.deps.db, c1)).toEqual([]);

    // alice's answer ends (aborted): her next prompt runs; carl's too once bob's has ended.
    expect((await t.client.abort({ sessionId: a1 }, admin)).aborted).toBe(true);
    await idle(a1);
    t.fake.push({ kind: "stream", chunks: [{ text: "done" }] });
    const answer = await t.client.prompt(ask(a2, "second"), alice);
    expect(answer.message?.message?.kind.case).toBe("assistant");
    expect((await t.client.abort({ sessionId: b1 }, admin)).aborted).toBe(true);
    await idle(b1);
    t.fake.push({ kind: "stream", chunks: [{ text: "done" }] });
    expect((await t.client.prompt(ask(c1, "carl's"), carl)).message?.message?.kind.case).toBe("assistant");

    const samples = parseExposition(await (await fetch(`${t.ledger.url}/metrics`, admin)).text());
    expect(sample(samples, "ledger_quota_exceeded_total", { tenant: "acme", quota: "concurrent_loops" })).toBe(4);
  });
});

describe(`the tenant label without tenants configured (${TEST_ENGINE})`, () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger(
      { auth: { token: STATIC, jwt: { secret: SECRET, tenant_claim: "org" } }, quotas: { principal: { prompts_per_minute: 1 } } },
      { transport: "http" },
    );
  });
  afterAll(() => t?.close());

  it("counts a tenant not listed in `tenants` as other (and a caller without a tenant, on a server without a tenant claim, as none)", async () => {
    await sameMinute();
    const [zed, zoe] = await Promise.all([as("zed", "zeta"), as("zoe", "omega")]);
    const zeds = await sessionOf(t.client, t.dir, zed);
    const zoes = await sessionOf(t.client, t.dir, zoe);
    const noReply = (sessionId: string) => ({ sessionId, parts: [text("hi")], noReply: true });
    await t.client.prompt(noReply(zeds), zed);
    await t.client.prompt(noReply(zoes), zoe);
    expect(detailsOf(await connectError(t.client.prompt(noReply(zeds), zed)))).toEqual(perMinute("principal", "zed", 1));
    expect(detailsOf(await connectError(t.client.prompt(noReply(zeds), zed)))).toEqual(perMinute("principal", "zed", 1));
    expect(detailsOf(await connectError(t.client.prompt(noReply(zoes), zoe)))).toEqual(perMinute("principal", "zoe", 1));
    const samples = parseExposition(await (await fetch(`${t.ledger.url}/metrics`, admin)).text());
    expect(samples.filter((s) => s.name === "ledger_quota_exceeded_total").map((s) => [s.labels, s.value])).toEqual([
      [{ tenant: "other", quota: "prompts_per_minute" }, 3],
    ]);
    expect(tenantLabel({ tenants: { acme: { roots: [], commands: false } } }, "acme")).toBe("acme");
    expect(tenantLabel({ tenants: { acme: { roots: [], commands: false } } }, "zeta")).toBe("other");
    expect(tenantLabel({}, "acme")).toBe("other");
    expect(tenantLabel({}, null)).toBe("none");
  });
});

// Postgres only: PGlite serves one process.
describe.runIf(TEST_ENGINE === "postgres")("two ledgers on one Postgres database", () => {
  let database: TestDatabase;
  const running: RunningLedger[] = [];
  const clients: Client<typeof SessionService>[] = [];
  beforeAll(async () => {
    database = await createTestDatabase();
    const config = configFileSchema.parse(quotaConfig({ principal: { prompts_per_minute: 3 }, tenant: { prompts_per_minute: 4 } }));
    for (const _ of [0, 1]) {
      const ledger = await startLedger({ config: buildConfig(config, undefined, base), database: database.target });
      running.push(ledger);
      clients.push(createClient(SessionService, createConnectTransport({ baseUrl: ledger.url, httpVersion: "1.1" })));
    }
  });
  afterAll(async () => {
    for (const ledger of running) await ledger.close(1000);
    await database?.drop();
  });

  it("share the count: prompts stored through either replica count against one principal and one tenant", async () => {
    await sameMinute();
    const [a, b] = clients as [Client<typeof SessionService>, Client<typeof SessionService>];
    const [alice, bob] = await Promise.all([as("alice", "acme"), as("bob", "acme")]);
    const session = await sessionOf(a, dirs.acme, alice);
    const bobs = await sessionOf(b, dirs.acme, bob);
    const noReply = (sessionId: string, words: string) => ({ sessionId, parts: [text(words)], noReply: true });
    await a.prompt(noReply(session, "1"), alice);
    await b.prompt(noReply(session, "2"), alice);
    await a.prompt(noReply(session, "3"), alice);
    expect(detailsOf(await connectError(b.prompt(noReply(session, "4"), alice)))).toEqual(perMinute("principal", "alice", 3));
    expect(detailsOf(await connectError(a.prompt(noReply(session, "4"), alice)))).toEqual(perMinute("principal", "alice", 3));
    await a.prompt(noReply(bobs, "bob 1"), bob);
    expect(detailsOf(await connectError(b.prompt(noReply(bobs, "bob 2"), bob)))).toEqual(perMinute("tenant", "acme", 4));
    expect(await storedRows(running[0]!.deps.db, session)).toHaveLength(3);
    expect(await storedRows(running[0]!.deps.db, bobs)).toHaveLength(1);
    const counts = await running[0]!.deps.db.selectFrom("quota_usage").select(["key", "count"]).orderBy("key").execute();
    expect(counts).toEqual([
      { key: "p:acme/alice", count: 3 },
      { key: "p:acme/bob", count: 1 },
      { key: "t:acme", count: 4 },
    ]);
  });
});

describe("stored bytes per principal and tenant", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger(
      {
        auth: { token: STATIC, jwt: { secret: SECRET, tenant_claim: "org" } },
        quotas: { principal: { stored_bytes: 4000 }, tenant: { stored_bytes: 6000 } },
      },
      { transport: "http" },
    );
  });
  afterAll(() => t?.close());

  const big = (n: number) => "x".repeat(n) + Math.random().toString(36);

  it("refuses a prompt once the caller's sessions hold the limit, naming it; other callers and the static token go on", async () => {
    const amy = await as("amy", "umbrella");
    const sessionId = (await t.client.createSession({ directory: t.dir }, amy)).session!.id;
    // Random text: Postgres compresses what repeats, so the stored size follows the entropy.
    const noise = (n: number) => Array.from({ length: n }, () => Math.random().toString(36).slice(2, 3)).join("");
    await t.client.prompt({ sessionId, noReply: true, parts: [text(noise(5000))] }, amy);
    const refused = detailsOf(await connectError(t.client.prompt({ sessionId, noReply: true, parts: [text("one more")] }, amy)));
    expect(refused).toEqual({
      code: Code.ResourceExhausted,
      message:
        "quota exceeded: principal amy has stored 4000 bytes or more in its sessions, the limit of quotas.principal.stored_bytes (4000); nothing was stored, delete sessions to make room",
      errorInfo: [
        {
          reason: "QUOTA_EXCEEDED",
          domain: "ledger.v1",
          metadata: { quota: "stored_bytes", scope: "principal", subject: "principal:amy", limit: "4000" },
        },
      ],
      violations: [{ subject: "principal:amy", description: "quotas.principal.stored_bytes: at most 4000 bytes stored" }],
      retryMs: undefined,
    });
    expect((await t.client.listMessages({ sessionId }, amy)).messages).toHaveLength(1);
    // Another principal of the tenant still has room; the operator is never limited.
    const ben = await as("ben", "umbrella");
    const bens = (await t.client.createSession({ directory: t.dir }, ben)).session!.id;
    expect((await t.client.prompt({ sessionId: bens, noReply: true, parts: [text(big(10))] }, ben)).message).toBeDefined();
    expect((await t.client.prompt({ sessionId, noReply: true, parts: [text("operator")] }, admin)).message).toBeDefined();
  });

  it("counts a tenant's principals together", async () => {
    const noise = (n: number) => Array.from({ length: n }, () => Math.random().toString(36).slice(2, 3)).join("");
    for (const who of ["cy", "di", "ed"]) {
      const caller = await as(who, "initrode");
      const sessionId = (await t.client.createSession({ directory: t.dir }, caller)).session!.id;
      const outcome = await t.client.prompt({ sessionId, noReply: true, parts: [text(noise(3500))] }, caller).then(
        () => "stored",
        (e: unknown) => ConnectError.from(e).findDetails(ErrorInfoSchema)[0]?.metadata.scope,
      );
      expect([who, outcome]).toEqual([who, who === "ed" ? "tenant" : "stored"]);
    }
  });
});
