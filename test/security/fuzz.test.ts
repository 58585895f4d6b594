import { create, toBinary, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MessageWithPartsSchema } from "../../gen/ledger/v1/message_pb.js";
import { PromptRequestSchema, SessionService } from "../../gen/ledger/v1/service_pb.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { grpcStatusOverH2c } from "../support/h2c.js";

// Property tests against the real server: whatever a client sends, the answer is a success or
// one of the documented refusals, never INTERNAL, and the server stays up. `npm run fuzz` runs
// FUZZ_RUNS=100000; CI runs a few thousand cases.
const RUNS = Number(process.env.FUZZ_RUNS ?? 2500);
// FUZZ_SEED replays a failure fast-check reported ("seed: ..."); unset: a fresh seed each run.
const SEED = process.env.FUZZ_SEED ? { seed: Number(process.env.FUZZ_SEED) } : {};
// A bound against a hang, not a speed goal: generous for a busy CI machine, and growing with RUNS.
const LONG_MS = Math.max(180_000, RUNS * 60);
const ALLOWED = new Set([
  Code.InvalidArgument,
  Code.ResourceExhausted,
  Code.PermissionDenied,
  Code.NotFound,
  Code.AlreadyExists,
  Code.FailedPrecondition,
]);

let t: TestLedger;
let sessionId: string;
beforeAll(async () => {
  t = await startTestLedger({ limits: { request_bytes: 256 * 1024, text_part_bytes: 64 * 1024 } }, { transport: "http" });
  sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
});
afterAll(() => t?.close());

const binary = () => createClient(SessionService, createConnectTransport({ baseUrl: t.ledger.url, httpVersion: "1.1" }));

const ulid = fc.stringMatching(/^[0-9A-HJKMNP-TV-Z]{26}$/);
const oddString = fc.oneof(
  fc.string(),
  fc.string({ unit: "grapheme" }),
  fc.string({ unit: "binary" }),
  fc.constantFrom("", " ", "\u0000", "\uD800", "..", "../../etc/passwd", "%2e%2e/", "a".repeat(70_000)),
);
const url = fc.oneof(
  fc.webUrl(),
  oddString.map((s) => `file://${s}`),
  oddString.map((s) => `file:///${encodeURIComponent(s.toWellFormed())}`),
  fc.constantFrom(
    "file:///etc/passwd",
    "file:///dev/zero",
    "file:///proc/self/environ",
    "file://otherhost/x",
    "file:///C:/x",
    "file:x",
    "data:,",
    "data:text/plain;base64,###",
    "iVBORw0KGgo=",
  ),
  fc
    .tuple(fc.constantFrom("text/plain", "image/png", "application/octet-stream", ""), fc.base64String())
    .map(([m, b]) => `data:${m};base64,${b}`),
  oddString,
);
// Structured fields: Struct keys and values at any depth, nested lists, numbers JSON cannot hold
// (NaN and ±Infinity reach us over the binary protocol).
const jsonLeaf = fc.oneof(oddString, fc.double(), fc.boolean(), fc.constant(null));
const { json } = fc.letrec<{ json: JsonValue }>((tie) => ({
  json: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    jsonLeaf,
    fc.array(tie("json"), { maxLength: 4 }),
    fc.dictionary(oddString, tie("json"), { maxKeys: 4 }),
  ),
}));
const struct = fc.dictionary(oddString, json, { maxKeys: 4 }) as fc.Arbitrary<JsonObject>;
const draft = fc.oneof(
  fc
    .record({ text: oddString, synthetic: fc.boolean(), ignored: fc.boolean() })
    .map((value) => ({ kind: { case: "text" as const, value } })),
  fc.record({ text: oddString, metadata: struct }).map((value) => ({ kind: { case: "text" as const, value } })),
  fc
    .record({ url, mime: fc.oneof(fc.constantFrom("text/plain", "image/png", "application/pdf"), oddString), filename: oddString })
    .map((value) => ({ kind: { case: "file" as const, value } })),
  fc.record({ name: oddString }).map((value) => ({ kind: { case: "agent" as const, value } })),
  fc
    .record({ prompt: oddString, description: oddString, agent: oddString })
    .map((value) => ({ kind: { case: "subtask" as const, value } })),
  fc
    .record({
      id: fc.oneof(
        oddString,
        ulid.map((u) => `prt_${u}`),
      ),
      text: fc.string(),
    })
    .map((value) => ({ kind: { case: "text" as const, value } })),
);
const request = fc.record({
  sessionId: fc.oneof(
    fc.constant("__existing__"),
    ulid.map((u) => `ses_${u}`),
    oddString,
  ),
  messageId: fc.oneof(
    fc.constant(""),
    ulid.map((u) => `msg_${u}`),
    oddString,
  ),
  agent: fc.oneof(fc.constant(""), fc.constantFrom("build", "plan", "explore"), oddString),
  noReply: fc.boolean(),
  variant: fc.oneof(fc.constant(""), oddString),
  system: fc.oneof(fc.constant(""), oddString),
  parts: fc.array(draft, { maxLength: 6 }),
  tools: fc.dictionary(oddString, fc.boolean(), { maxKeys: 3 }),
  format: fc.option(
    struct.map((schema) => ({ kind: { case: "jsonSchema" as const, value: { schema } } })),
    { nil: undefined },
  ),
});

async function outcome(call: Promise<unknown>): Promise<Code | "ok"> {
  return call.then(
    () => "ok" as const,
    (e: unknown) => ConnectError.from(e).code,
  );
}

describe("fuzzing the prompt path", () => {
  it(`answers ${RUNS} random prompts with success or a documented refusal, never INTERNAL`, { timeout: LONG_MS }, async () => {
    const client = binary();
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        const code = await outcome(client.prompt({ ...r, sessionId: r.sessionId === "__existing__" ? sessionId : r.sessionId }));
        if (code !== "ok" && !ALLOWED.has(code)) throw new Error(`unexpected ${Code[code]}`);
      }),
      { numRuns: RUNS, ...SEED },
    );
    expect((await t.client.listAgents({})).defaultAgent).toBe("build");
  });

  it(
    `stores structured fields exactly as it answers them (${Math.ceil(RUNS / 5)} prompts with random Structs and maps)`,
    { timeout: LONG_MS },
    async () => {
      const client = binary();
      const structured = fc.record({
        parts: fc.array(
          fc.record({ text: oddString, metadata: struct }).map((value) => ({ kind: { case: "text" as const, value } })),
          { minLength: 1, maxLength: 3 },
        ),
        tools: request.map((r) => r.tools),
        system: oddString,
      });
      await fc.assert(
        fc.asyncProperty(structured, async (r) => {
          let res;
          try {
            res = await client.prompt({ ...r, sessionId, noReply: true });
          } catch (error) {
            const code = ConnectError.from(error).code;
            if (!ALLOWED.has(code)) throw new Error(`unexpected ${Code[code]}: ${ConnectError.from(error).rawMessage}`);
            return;
          }
          const stored = await client.getMessage({ sessionId, messageId: res.message!.message!.kind.value!.id });
          expect(toJson(MessageWithPartsSchema, stored.message!)).toEqual(toJson(MessageWithPartsSchema, res.message!));
        }),
        { numRuns: Math.ceil(RUNS / 5), ...SEED },
      );
    },
  );

  it("answers randomly mutated binary frames with a Connect error or success, never INTERNAL", { timeout: LONG_MS }, async () => {
    const valid = toBinary(
      PromptRequestSchema,
      create(PromptRequestSchema, {
        sessionId,
        noReply: true,
        parts: [
          { kind: { case: "text", value: { text: "hello" } } },
          { kind: { case: "file", value: { mime: "text/plain", url: "data:text/plain;base64,aGk=" } } },
        ],
      }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.nat(valid.length - 1), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 8 }),
        fc.nat(valid.length),
        async (edits, cut) => {
          const body = Uint8Array.from(valid.subarray(0, Math.max(1, cut)));
          for (const [at, byte] of edits) if (at < body.length) body[at] = byte;
          const res = await fetch(`${t.ledger.url}/ledger.v1.SessionService/Prompt`, {
            method: "POST",
            headers: { "content-type": "application/proto" },
            body,
          });
          if (res.status === 200) return;
          const error = (await res.json()) as { code?: string; message?: string };
          if (error.code === "internal" || error.code === "unknown") throw new Error(`HTTP ${res.status} ${JSON.stringify(error)}`);
        },
      ),
      { numRuns: Math.ceil(RUNS / 2), ...SEED },
    );
    expect((await t.client.listAgents({})).defaultAgent).toBe("build");
  });

  it("answers an undecodable gRPC frame with INVALID_ARGUMENT (grpc-status 3), not INTERNAL", async () => {
    const garbage = Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    const frame = Buffer.alloc(5 + garbage.length);
    frame.writeUInt32BE(garbage.length, 1);
    garbage.copy(frame, 5);
    expect(await grpcStatusOverH2c(t.ledger.url, "Prompt", frame)).toBe("3");
  });
});
