import { create, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import { jsonBytes } from "../../src/ledger/json-fields.js";
import type { LanguageModelV3 } from "@ai-sdk/provider";
import { connectError } from "../support/errors.js";
import { mockResolver, reply, scriptedModel, textReply, toolCallParts, type ModelKey } from "../support/mock-models.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { idOf, lastSeq } from "../support/stored.js";

// limits.metadata_bytes: the JSON a request carries in Struct/Value fields (part metadata, tool
// input, a format's schema) is bounded before anything else works on it. Found by a probe of a
// running server: 1,000,000 list items of metadata (1.9 MiB, within request_bytes) held the
// event loop for 5 s; 15,000,000 (28.6 MiB) for 73 s, 2.8 GB of RSS, then INTERNAL on PGlite.

const MAX = 4096;
const models: Partial<Record<ModelKey, LanguageModelV3>> = {};
let t: TestLedger;
beforeAll(async () => {
  t = await startTestLedger({ model: "mock/model", limits: { metadata_bytes: MAX } }, { models: mockResolver(models) });
});
afterAll(() => t?.close());

/** A metadata object whose compact JSON is exactly `bytes` long (ASCII, at least 10 bytes). */
const metadataOf = (bytes: number): JsonObject => ({ k: "x".repeat(bytes - 8) });
const withMetadata = (s: string, metadata: JsonObject) => ({ kind: { case: "text" as const, value: { text: s, metadata } } });

async function refused(call: Promise<unknown>) {
  const error = await connectError(call);
  const info = error.findDetails(ErrorInfoSchema)[0];
  return { code: error.code, reason: info?.reason, metadata: info?.metadata };
}

describe("metadata_bytes", () => {
  it("counts compact JSON: equal to JSON.stringify's UTF-8 length for values without escapes", () => {
    const key = fc.string({ unit: fc.constantFrom("a", "é", "☕", "😀", " ") });
    const json: fc.Arbitrary<JsonValue> = fc.letrec<{ v: JsonValue }>((tie) => ({
      v: fc.oneof(
        { depthSize: "small" },
        key,
        fc.integer(),
        fc.double({ noNaN: true, noDefaultInfinity: true }).filter((n) => !Object.is(n, -0)),
        fc.boolean(),
        fc.constant(null),
        fc.array(tie("v"), { maxLength: 4 }),
        fc.dictionary(key, tie("v"), { maxKeys: 4 }),
      ),
    })).v;
    fc.assert(
      fc.property(json, (v) => jsonBytes(v) === Buffer.byteLength(JSON.stringify(v), "utf8")),
      { numRuns: 2000 },
    );
  });

  it("a prompt at the limit is stored with its metadata; one byte over is RESOURCE_EXHAUSTED naming the draft; nothing stored", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const atLimit = metadataOf(MAX);
    expect(jsonBytes(atLimit)).toBe(MAX);
    const stored = (await t.client.prompt({ sessionId, noReply: true, parts: [withMetadata("at", atLimit)] })).message!;
    expect(stored.parts[0]!.kind.case === "text" && stored.parts[0]!.kind.value.metadata).toEqual(atLimit);
    const seq = await lastSeq(t.ledger.deps.db, sessionId);

    expect(
      await refused(t.client.prompt({ sessionId, noReply: true, parts: [text("a"), withMetadata("over", metadataOf(MAX + 1))] })),
    ).toEqual({
      code: Code.ResourceExhausted,
      reason: "LIMIT_EXCEEDED",
      metadata: { field: "parts[1].text.metadata", limit: "metadata_bytes", max: String(MAX), actual: String(MAX + 1) },
    });
    // All drafts count together: two halves pass it at the second, which is named.
    const half = metadataOf(MAX / 2 + 1);
    expect(
      await refused(t.client.prompt({ sessionId, noReply: true, parts: [withMetadata("a", half), withMetadata("b", half)] })),
    ).toMatchObject({
      code: Code.ResourceExhausted,
      metadata: { field: "parts[1].text.metadata", actual: String(MAX + 2) },
    });
    // A json_schema format's schema counts too.
    const schema = { type: "object", description: "d".repeat(MAX) };
    expect(
      await refused(
        t.client.prompt({ sessionId, noReply: true, parts: [text("s")], format: { kind: { case: "jsonSchema", value: { schema } } } }),
      ),
    ).toMatchObject({ code: Code.ResourceExhausted, metadata: { field: "format.json_schema.schema" } });
    // The same over PromptAsync and PromptStream.
    const big = [withMetadata("over", metadataOf(MAX + 1))];
    expect(await refused(t.client.promptAsync({ sessionId, noReply: true, parts: big }))).toMatchObject({ code: Code.ResourceExhausted });
    expect(await refused(t.client.promptStream({ sessionId, noReply: true, parts: big }) as never)).toMatchObject({
      code: Code.ResourceExhausted,
    });

    expect(await lastSeq(t.ledger.deps.db, sessionId)).toBe(seq);
    expect((await t.client.listMessages({ sessionId })).messages.length).toBe(1);
  });

  it("a million list items are refused before they are stored, hashed or echoed", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const seq = await lastSeq(t.ledger.deps.db, sessionId);
    const list = new Array<number>(1_000_000).fill(0);
    expect(await refused(t.client.prompt({ sessionId, noReply: true, parts: [withMetadata("m", { a: list })] }))).toEqual({
      code: Code.ResourceExhausted,
      reason: "LIMIT_EXCEEDED",
      metadata: { field: "parts[0].text.metadata", limit: "metadata_bytes", max: String(MAX), actual: String(2_000_007) },
    });
    expect(await lastSeq(t.ledger.deps.db, sessionId)).toBe(seq);
  });

  it("UpdatePart: the part's Struct fields (text metadata, tool input) are bounded alike; nothing written", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const sent = (await t.client.prompt({ sessionId, noReply: true, parts: [text("one")] })).message!;
    const seq = await lastSeq(t.ledger.deps.db, sessionId);
    const part = create(PartSchema, sent.parts[0]!);
    if (part.kind.case === "text") part.kind.value.metadata = metadataOf(MAX + 1);
    expect(await refused(t.client.updatePart({ sessionId, messageId: idOf(sent), part }))).toMatchObject({
      code: Code.ResourceExhausted,
      metadata: { field: "part.text.metadata", limit: "metadata_bytes", actual: String(MAX + 1) },
    });
    if (part.kind.case === "text") part.kind.value.metadata = metadataOf(MAX);
    const updated = await t.client.updatePart({ sessionId, messageId: idOf(sent), part });
    expect(updated.part?.kind.case === "text" && updated.part.kind.value.metadata).toEqual(metadataOf(MAX));
    expect(await lastSeq(t.ledger.deps.db, sessionId)).toBe(seq + 1);
  });

  it("UpdatePart of a part the server stored over the limit (a tool call's input): sent back as stored it is taken, grown it is refused", async () => {
    const pattern = "x".repeat(MAX + 100);
    models["mock/model"] = scriptedModel([reply(toolCallParts("call_1", "glob", { pattern }), "tool-calls"), textReply("done")]);
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    await t.client.prompt({ sessionId, parts: [text("find")] });
    const { messages } = await t.client.listMessages({ sessionId });
    const owner = messages.find((m) => m.parts.some((p) => p.kind.case === "tool"))!;
    const part = create(
      PartSchema,
      owner.parts.find((p) => p.kind.case === "tool")!,
    );
    const state = part.kind.case === "tool" ? part.kind.value.state?.status : undefined;
    if (state?.case !== "completed") throw new Error(`expected a completed tool part, got ${state?.case}`);
    expect(state.value.input).toEqual({ pattern });
    const stored = jsonBytes({ pattern }) + jsonBytes(state.value.metadata ?? {});
    expect(stored).toBeGreaterThan(MAX);

    const seq = await lastSeq(t.ledger.deps.db, sessionId);
    await t.client.updatePart({ sessionId, messageId: idOf(owner), part });
    expect(await lastSeq(t.ledger.deps.db, sessionId)).toBe(seq + 1);

    // The input grew by one byte: the total passes the stored size at the field after it.
    state.value.input = { pattern: `${pattern}y` };
    expect(await refused(t.client.updatePart({ sessionId, messageId: idOf(owner), part }))).toMatchObject({
      code: Code.ResourceExhausted,
      metadata: { field: "part.tool.state.completed.metadata", limit: "metadata_bytes", max: String(stored), actual: String(stored + 1) },
    });
    expect(await lastSeq(t.ledger.deps.db, sessionId)).toBe(seq + 1);
  });
});
