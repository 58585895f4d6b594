import { createClient } from "@connectrpc/connect";
import { Code } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { startLedger } from "../../src/app.js";
import { buildConfig, ConfigError, configFileSchema } from "../../src/config/config.js";
import { connectError as failure } from "../support/errors.js";
import { createTestDatabase } from "../support/db.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { captureStderr } from "../support/stderr.js";

const TOKEN = "s3cret-token-for-tests-0123456789";

let t: TestLedger;
beforeAll(async () => {
  t = await startTestLedger({ auth: { token: TOKEN } }, { transport: "http" });
});
afterAll(() => t?.close());

function client(headers: Record<string, string>, grpc = false) {
  const interceptors = [
    (next: Parameters<import("@connectrpc/connect").Interceptor>[0]) => (req: Parameters<typeof next>[0]) => {
      for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
      return next(req);
    },
  ];
  const transport = grpc
    ? createGrpcTransport({ baseUrl: t.ledger.url, interceptors })
    : createConnectTransport({ baseUrl: t.ledger.url, httpVersion: "1.1", interceptors });
  return createClient(SessionService, transport);
}

describe("bearer token", () => {
  it("refuses a call without a token with UNAUTHENTICATED (TOKEN_MISSING)", async () => {
    const error = await failure(client({}).listAgents({}));
    expect(error.code).toBe(Code.Unauthenticated);
    expect(error.findDetails(ErrorInfoSchema)[0]?.reason).toBe("TOKEN_MISSING");
  });

  it("refuses a wrong token (TOKEN_INVALID) over Connect and gRPC, without echoing it", async () => {
    for (const grpc of [false, true]) {
      const error = await failure(client({ authorization: "Bearer not-the-token" }, grpc).createSession({}));
      expect(error.code).toBe(Code.Unauthenticated);
      expect(error.findDetails(ErrorInfoSchema)[0]?.reason).toBe("TOKEN_INVALID");
      expect(error.rawMessage).not.toContain("not-the-token");
    }
  });

  it("accepts the right token, streams included", async () => {
    const ok = client({ authorization: `Bearer ${TOKEN}` });
    expect((await ok.listAgents({})).defaultAgent).toBe("build");
    const { session } = await ok.createSession({ directory: t.dir });
    const res = await ok.prompt({ sessionId: session!.id, noReply: true, parts: [{ kind: { case: "text", value: { text: "hi" } } }] });
    expect(res.message?.parts).toHaveLength(1);
  });
});

describe("binding", () => {
  it("refuses to bind a non-loopback address without a token", async () => {
    const db = await createTestDatabase();
    try {
      const config = buildConfig(configFileSchema.parse({}), undefined, t.dir);
      await expect(startLedger({ config, database: db.target, host: "0.0.0.0" })).rejects.toThrow(ConfigError);
    } finally {
      await db.drop();
    }
  });
});

describe("binding a non-loopback address", () => {
  const stderr = captureStderr();
  const WARNING = "any caller allowed to write may create a session in any directory this server can read";

  it.each([
    ["warns once that sessions may use any directory, without session_directories or tenants", {}, 1],
    ["does not warn with session_directories", { session_directories: ["/srv"] }, 0],
    [
      "warns with tenants when the static token is accepted too (its sessions have no tenant's roots)",
      { tenants: { acme: { roots: ["/srv/acme"] } }, auth: { token: TOKEN, jwt: { secret: "s".repeat(32), tenant_claim: "org" } } },
      1,
    ],
    [
      "does not warn with tenants and JSON Web Tokens only",
      { tenants: { acme: { roots: ["/srv/acme"] } }, auth: { jwt: { secret: "s".repeat(32), tenant_claim: "org" } } },
      0,
    ],
  ])("%s", async (_name, extra, warnings) => {
    const db = await createTestDatabase();
    try {
      const config = buildConfig(configFileSchema.parse({ auth: { token: TOKEN }, ...(extra as object) }), undefined, t.dir);
      const ledger = await startLedger({ config, database: db.target, host: "0.0.0.0", port: 0 });
      await ledger.close();
    } finally {
      await db.drop();
    }
    expect(stderr.written().filter((line) => line.includes(WARNING))).toHaveLength(warnings);
  });
});

describe("host names without a token", () => {
  it("refuses a request whose Host is not loopback (DNS rebinding), and accepts localhost", async () => {
    const open = await startTestLedger({}, { transport: "http" });
    try {
      const port = new URL(open.ledger.url).port;
      const { request } = await import("node:http");
      const status = (host: string) =>
        new Promise<number>((resolve, reject) => {
          const req = request(
            {
              host: "127.0.0.1",
              port,
              path: "/ledger.v1.SessionService/ListAgents",
              method: "POST",
              headers: { host, "content-type": "application/json" },
            },
            (res) => {
              res.resume();
              resolve(res.statusCode ?? 0);
            },
          );
          req.on("error", reject);
          req.end("{}");
        });
      expect(await status(`evil.example:${port}`)).toBe(403);
      expect(await status(`localhost:${port}`)).toBe(200);
      expect(await status(`127.0.0.1:${port}`)).toBe(200);
    } finally {
      await open.close();
    }
  });
});
