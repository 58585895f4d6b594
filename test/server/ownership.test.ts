import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { SESSION_SERVICE_ACCESS } from "../../src/server/access.js";
import { bearerClient, callMethod } from "../support/bearer-client.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";

// Who may see which session, for every SessionService method from its descriptor: a caller of
// another tenant (or another owner) gets NOT_FOUND exactly as for a session that does not exist.

const SECRET = "a-shared-secret-of-at-least-32-bytes!!";
const MISSING = "ses_00000000000000000000000000";

function jwt(sub: string, org: string, scope?: string): Promise<string> {
  return new SignJWT({ sub, org, ...(scope ? { scope } : {}) })
    .setProtectedHeader({ alg: "HS256" })
    .setExpirationTime("5m")
    .sign(new TextEncoder().encode(SECRET));
}

/** What each method needs besides `session_id` to pass validation (ids of the owner's session). */
function fieldsOf(method: DescMethod, sessionId: string, ids: { messageId: string; partId: string }): object {
  const extra: Record<string, object> = {
    prompt: { parts: [text("hi")] },
    promptStream: { parts: [text("hi")] },
    promptAsync: { parts: [text("hi")] },
    getMessage: { messageId: ids.messageId },
    deleteMessage: { messageId: ids.messageId },
    deletePart: { messageId: ids.messageId, partId: ids.partId },
    updatePart: {
      messageId: ids.messageId,
      part: { id: ids.partId, sessionId, messageId: ids.messageId, kind: { case: "text", value: { text: "edited" } } },
    },
    revert: { messageId: ids.messageId },
    forkSession: { messageId: ids.messageId },
    command: { command: "none" },
    replyPermission: { permissionId: "per_00000000000000000000000000", reply: 1 },
    shell: { command: "echo hi", agent: "build" },
  };
  return { sessionId, ...(extra[method.localName] ?? {}) };
}

describe("session ownership on every RPC", () => {
  let t: TestLedger;
  let alice: Client<typeof SessionService>;
  let sessionId: string;
  let ids: { messageId: string; partId: string };

  beforeAll(async () => {
    t = await startTestLedger({ auth: { jwt: { secret: SECRET, tenant_claim: "org" } } }, { transport: "http" });
    alice = bearerClient(t.ledger.url, await jwt("alice", "acme"));
    sessionId = (await alice.createSession({ directory: t.dir })).session!.id;
    const { message } = await alice.prompt({ sessionId, noReply: true, parts: [text("mine")] });
    const user = message!.message!.kind.value!;
    ids = { messageId: user.id, partId: message!.parts[0]!.id };
  });
  afterAll(() => t?.close());

  it("another tenant's caller gets NOT_FOUND on every method that names a session, the same answer as for a missing session", async () => {
    const others = {
      "another tenant": bearerClient(t.ledger.url, await jwt("alice", "globex")),
      "another owner, same tenant": bearerClient(t.ledger.url, await jwt("bob", "acme")),
    };
    const sessionMethods = SessionService.methods.filter(
      (m) => SESSION_SERVICE_ACCESS[m.localName as keyof typeof SESSION_SERVICE_ACCESS].resource === "session",
    );
    expect(sessionMethods.length).toBeGreaterThanOrEqual(25);
    for (const [who, client] of Object.entries(others)) {
      for (const method of sessionMethods) {
        const theirs = await callMethod(client, method, fieldsOf(method, sessionId, ids));
        const missing = await callMethod(client, method, fieldsOf(method, MISSING, ids));
        const shape = (e: ConnectError | undefined, id: string) => ({
          code: e?.code,
          message: e?.rawMessage.replace(id, "<id>"),
          info: e?.findDetails(ErrorInfoSchema).map((d) => ({ ...d, metadata: { ...d.metadata, session_id: "<id>" } })),
        });
        expect({ who, method: method.localName, ...shape(theirs, sessionId) }).toEqual({
          who,
          method: method.localName,
          code: Code.NotFound,
          message: "session_id: session <id> not found",
          info: [expect.objectContaining({ reason: "SESSION_NOT_FOUND", metadata: { session_id: "<id>" } })],
        });
        expect(shape(theirs, sessionId)).toEqual(shape(missing, MISSING));
      }
      // CreateSession under another's session.
      const child = await callMethod(client, SessionService.method.createSession, { directory: t.dir, parentId: sessionId });
      expect([child?.code, child?.rawMessage]).toEqual([Code.NotFound, `parent_id: session ${sessionId} not found`]);
    }
    // Nothing was changed: the owner still sees the one message, untouched.
    const page = await alice.listMessages({ sessionId });
    expect(page.messages.map((m) => m.parts.map((p) => (p.kind.case === "text" ? p.kind.value.text : p.kind.case)))).toEqual([["mine"]]);
  });

  it("lists show only what the caller may see; children inherit their parent's owner", async () => {
    const carol = bearerClient(t.ledger.url, await jwt("carol", "acme"));
    const carols = (await carol.createSession({ directory: t.dir })).session!.id;
    const child = (await alice.createSession({ directory: t.dir, parentId: sessionId })).session!.id;
    const mine = (await alice.listSessions({})).sessions.map((s) => s.id);
    expect(mine).toContain(sessionId);
    expect(mine).toContain(child);
    expect(mine).not.toContain(carols);
    expect((await carol.listSessions({})).sessions.map((s) => s.id)).toEqual([carols]);
    expect((await alice.listChildren({ sessionId })).sessions.map((s) => s.id)).toEqual([child]);
    expect((await carol.getStatus({})).statuses).toEqual({});
    // An admin sees everything.
    const admin = bearerClient(t.ledger.url, await jwt("root", "acme", "ledger:admin"));
    const all = (await admin.listSessions({})).sessions.map((s) => s.id);
    expect(all).toEqual(expect.arrayContaining([sessionId, child, carols]));
  });

  it("the same through gRPC and gRPC-Web for a sample: a unary read, a stream, a write", async () => {
    const stranger = await jwt("mallory", "globex");
    for (const protocol of ["grpc", "grpc-web"] as const) {
      const client = bearerClient(t.ledger.url, stranger, protocol);
      for (const name of ["getSession", "watchSession", "promptStream", "deleteSession"] as const) {
        const method = SessionService.method[name];
        expect({ protocol, name, code: (await callMethod(client, method, fieldsOf(method, sessionId, ids)))?.code }).toEqual({
          protocol,
          name,
          code: Code.NotFound,
        });
      }
    }
    expect((await alice.getSession({ sessionId })).session?.id).toBe(sessionId);
  });
});

describe("sessions shared within a tenant (auth.share_within_tenant)", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger({ auth: { share_within_tenant: true, jwt: { secret: SECRET, tenant_claim: "org" } } }, { transport: "http" });
  });
  afterAll(() => t?.close());

  it("callers of one tenant see each other's sessions; another tenant still gets NOT_FOUND", async () => {
    const alice = bearerClient(t.ledger.url, await jwt("alice", "acme"));
    const bob = bearerClient(t.ledger.url, await jwt("bob", "acme"));
    const eve = bearerClient(t.ledger.url, await jwt("eve", "globex"));
    const sessionId = (await alice.createSession({ directory: t.dir })).session!.id;
    expect((await bob.getSession({ sessionId })).session?.id).toBe(sessionId);
    expect((await bob.listSessions({})).sessions.map((s) => s.id)).toEqual([sessionId]);
    expect((await eve.listSessions({})).sessions).toEqual([]);
    expect((await callMethod(eve, SessionService.method.getSession, { sessionId }))?.code).toBe(Code.NotFound);
  });
});
