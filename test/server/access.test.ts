import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { SESSION_SERVICE_ACCESS } from "../../src/server/access.js";
import { bearerClient, callMethod } from "../support/bearer-client.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";

// Every RPC of SessionService, from its descriptor (not a hand-written list): each has an access
// rule, needs a token, and needs its scope. A new RPC without a rule fails here.

const SECRET = "a-shared-secret-of-at-least-32-bytes!!";
const token = (scope: string) =>
  new SignJWT({ sub: "alice", scope }).setProtectedHeader({ alg: "HS256" }).setExpirationTime("5m").sign(new TextEncoder().encode(SECRET));

/** Calls `method` with an empty request; resolves with the error's code, or "ok". */
async function call(client: Client<typeof SessionService>, method: DescMethod): Promise<Code | "ok"> {
  return (await callMethod(client, method))?.code ?? "ok";
}

const clientOf = bearerClient;

describe("access rules of every SessionService method", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger({ auth: { jwt: { secret: SECRET } } }, { transport: "http" });
  });
  afterAll(() => t?.close());

  it("the table has exactly the service's methods", () => {
    expect(Object.keys(SESSION_SERVICE_ACCESS).sort()).toEqual(SessionService.methods.map((m) => m.localName).sort());
  });

  it("without a token every method is UNAUTHENTICATED; a read-only token gets PERMISSION_DENIED exactly on the write methods", async () => {
    const anonymous = clientOf(t.ledger.url, undefined);
    const reader = clientOf(t.ledger.url, await token("ledger:read"));
    const outcomes: Record<string, { anonymous: Code | "ok"; reader: "denied" | "allowed" }> = {};
    for (const method of SessionService.methods) {
      const asReader = await call(reader, method);
      outcomes[method.localName] = {
        anonymous: await call(anonymous, method),
        reader: asReader === Code.PermissionDenied ? "denied" : "allowed",
      };
    }
    const expected = Object.fromEntries(
      SessionService.methods.map((m) => [
        m.localName,
        {
          anonymous: Code.Unauthenticated,
          reader: SESSION_SERVICE_ACCESS[m.localName as keyof typeof SESSION_SERVICE_ACCESS].scope === "ledger:read" ? "allowed" : "denied",
        },
      ]),
    );
    expect(outcomes).toEqual(expected);
  });

  it("the same through gRPC, Connect and gRPC-Web for a sample: a unary write, a stream, a read", async () => {
    const reader = await token("ledger:read");
    const sample = ["createSession", "promptStream", "watchSession", "listSessions"].map((name) =>
      SessionService.methods.find((m) => m.localName === name)!,
    );
    for (const protocol of ["connect", "grpc", "grpc-web"] as const) {
      const codes = [];
      for (const method of sample) codes.push(await call(clientOf(t.ledger.url, reader, protocol), method));
      // watchSession with an empty request is refused for its arguments, after the access check.
      expect({ protocol, codes }).toEqual({ protocol, codes: [Code.PermissionDenied, Code.PermissionDenied, Code.InvalidArgument, "ok"] });
    }
    const denied = await clientOf(t.ledger.url, reader, "grpc")
      .deleteSession({ sessionId: "ses_00000000000000000000000000" })
      .catch((e: unknown) => ConnectError.from(e));
    expect((denied as ConnectError).findDetails(ErrorInfoSchema)[0]?.metadata).toEqual({ required_scope: "ledger:write" });
  });
});
