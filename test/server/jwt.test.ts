import { mkdtemp, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { Code, type ConnectError } from "@connectrpc/connect";
import { exportJWK, generateKeyPair, SignJWT, type JWTPayload } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { buildConfig, ConfigError, configFileSchema, loadConfig } from "../../src/config/config.js";
import { connectError as failure } from "../support/errors.js";
import { bearerClient } from "../support/bearer-client.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";

// JSON Web Tokens (docs/security.md): a real server, tokens minted here with jose, sent by real
// Connect, gRPC and gRPC-Web clients.

const SECRET = "a-shared-secret-of-at-least-32-bytes!!";
const ISSUER = "https://issuer.test";
const AUDIENCE = "session-ledger";
const STATIC = "static-token-for-the-operator-0123";

async function mint(claims: JWTPayload, options: { secret?: string; alg?: string; expiresIn?: string | number } = {}): Promise<string> {
  let jwt = new SignJWT(claims).setProtectedHeader({ alg: options.alg ?? "HS256" }).setIssuedAt();
  if (options.expiresIn !== undefined) jwt = jwt.setExpirationTime(options.expiresIn);
  return jwt.sign(new TextEncoder().encode(options.secret ?? SECRET));
}

const good = (extra: JWTPayload = {}) => mint({ sub: "alice", org: "acme", iss: ISSUER, aud: AUDIENCE, ...extra }, { expiresIn: "5m" });

function infoOf(error: ConnectError) {
  const info = error.findDetails(ErrorInfoSchema)[0];
  return { reason: info?.reason, metadata: info?.metadata };
}

describe("JWTs with a shared secret (HS256), issuer, audience and a tenant claim", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger(
      { auth: { token: STATIC, jwt: { secret: SECRET, issuer: ISSUER, audience: AUDIENCE, tenant_claim: "org", clock_skew_s: 30 } } },
      { transport: "http" },
    );
  });
  afterAll(() => t?.close());

  it("accepts a valid token over Connect, gRPC and gRPC-Web, streams included", async () => {
    const token = await good();
    for (const protocol of ["connect", "grpc", "grpc-web"] as const) {
      const client = bearerClient(t.ledger.url, token, protocol);
      expect((await client.listAgents({})).defaultAgent).toBe("build");
      const { session } = await client.createSession({ directory: t.dir });
      const events = [];
      for await (const res of client.promptStream({
        sessionId: session!.id,
        noReply: true,
        parts: [{ kind: { case: "text", value: { text: protocol } } }],
      }))
        events.push(res.event!.kind.case);
      expect(events).toEqual(["agentSwitched", "messageUpdated", "partUpdated", "prompted", "sessionUpdated"]);
    }
    // The static token still works beside JWTs.
    expect((await bearerClient(t.ledger.url, STATIC).listAgents({})).defaultAgent).toBe("build");
  });

  it("refuses what does not verify with UNAUTHENTICATED, the reason, the claim and a www-authenticate challenge", async () => {
    const cases: [string, Promise<string> | string, string, Record<string, string>][] = [
      [
        "expired",
        mint({ sub: "alice", org: "acme", iss: ISSUER, aud: AUDIENCE }, { expiresIn: Math.floor(Date.now() / 1000) - 120 }),
        "TOKEN_EXPIRED",
        {},
      ],
      ["another issuer", good({ iss: "https://evil.test" }), "TOKEN_CLAIM_INVALID", { claim: "iss" }],
      ["another audience", good({ aud: "someone-else" }), "TOKEN_CLAIM_INVALID", { claim: "aud" }],
      ["no sub", mint({ org: "acme", iss: ISSUER, aud: AUDIENCE }, { expiresIn: "5m" }), "TOKEN_CLAIM_INVALID", { claim: "sub" }],
      ["no tenant", mint({ sub: "alice", iss: ISSUER, aud: AUDIENCE }, { expiresIn: "5m" }), "TOKEN_CLAIM_INVALID", { claim: "org" }],
      ["a tenant that is no string", good({ org: 7 }), "TOKEN_CLAIM_INVALID", { claim: "org" }],
      [
        "another secret",
        mint({ sub: "alice", org: "acme", iss: ISSUER, aud: AUDIENCE }, { secret: "x".repeat(40), expiresIn: "5m" }),
        "TOKEN_INVALID",
        {},
      ],
      [
        "HS512 (not accepted)",
        mint({ sub: "alice", org: "acme", iss: ISSUER, aud: AUDIENCE }, { alg: "HS512", expiresIn: "5m" }),
        "TOKEN_INVALID",
        {},
      ],
      ["not a JWT", "garbage.token.here", "TOKEN_INVALID", {}],
      [
        "no exp (it would never expire)",
        mint({ sub: "alice", org: "acme", iss: ISSUER, aud: AUDIENCE }),
        "TOKEN_CLAIM_INVALID",
        { claim: "exp" },
      ],
    ];
    for (const [name, token, reason, metadata] of cases) {
      const raw = await token;
      const error = await failure(bearerClient(t.ledger.url, raw).listSessions({}));
      expect({ name, code: error.code, ...infoOf(error) }).toEqual({ name, code: Code.Unauthenticated, reason, metadata });
      expect(error.metadata.get("www-authenticate")).toMatch(
        /^Bearer realm="session-ledger", error="invalid_token", error_description=".+"$/,
      );
      expect(error.rawMessage).not.toContain(raw);
    }
    const missing = await failure(bearerClient(t.ledger.url, undefined).listSessions({}));
    expect({ code: missing.code, ...infoOf(missing) }).toEqual({ code: Code.Unauthenticated, reason: "TOKEN_MISSING", metadata: {} });
    expect(missing.metadata.get("www-authenticate")).toBe('Bearer realm="session-ledger"');
  });

  it("tolerates the configured clock skew", async () => {
    const late = await mint({ sub: "alice", org: "acme", iss: ISSUER, aud: AUDIENCE }, { expiresIn: Math.floor(Date.now() / 1000) - 10 });
    expect((await bearerClient(t.ledger.url, late).listAgents({})).defaultAgent).toBe("build");
  });

  it("limits a token to its scopes: read-only may list but not write (PERMISSION_DENIED, SCOPE_MISSING), on every protocol", async () => {
    const reader = await good({ scope: "openid ledger:read" });
    for (const protocol of ["connect", "grpc", "grpc-web"] as const) {
      const client = bearerClient(t.ledger.url, reader, protocol);
      expect((await client.listSessions({})).sessions).toBeDefined();
      const error = await failure(client.createSession({ directory: t.dir }));
      expect({ code: error.code, ...infoOf(error) }).toEqual({
        code: Code.PermissionDenied,
        reason: "SCOPE_MISSING",
        metadata: { required_scope: "ledger:write" },
      });
      expect(error.rawMessage).toBe("authorization: CreateSession needs the scope ledger:write; the token grants ledger:read");
    }
    // `scp` as an array works the same; a token with no ledger scope at all may do nothing.
    const writer = await good({ scp: ["ledger:write"] });
    expect((await bearerClient(t.ledger.url, writer).createSession({ directory: t.dir })).session?.id).toMatch(/^ses_/);
    const none = await failure(bearerClient(t.ledger.url, await good({ scope: "openid" })).listAgents({}));
    expect(none.code).toBe(Code.PermissionDenied);
  });

  it("/metrics needs ledger:admin: 401 without a valid token, 403 without the scope, 200 with it or the static token", async () => {
    const scrape = (token?: string) => fetch(`${t.ledger.url}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
    expect((await scrape()).status).toBe(401);
    const expired = await scrape(await mint({ sub: "a", org: "o", iss: ISSUER, aud: AUDIENCE }, { expiresIn: 1 }));
    expect([expired.status, await expired.text()]).toEqual([
      401,
      "unauthorized: authorization: the token has expired (its exp claim is in the past)\n",
    ]);
    const user = await scrape(await good());
    expect([user.status, user.headers.get("www-authenticate")]).toEqual([403, 'Bearer error="insufficient_scope", scope="ledger:admin"']);
    expect((await scrape(await good({ scope: "ledger:admin" }))).status).toBe(200);
    expect((await scrape(STATIC)).status).toBe(200);
  });
});

describe("JWTs with a key set (ES256 and EdDSA)", () => {
  let dir: string;
  let es: Awaited<ReturnType<typeof generateKeyPair>>;
  let ed: Awaited<ReturnType<typeof generateKeyPair>>;
  let other: Awaited<ReturnType<typeof generateKeyPair>>;
  let jwks: { keys: object[] };
  let keyServer: http.Server;
  let keyUrl: string;
  let fetches = 0;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "ledger-jwks-"));
    es = await generateKeyPair("ES256");
    ed = await generateKeyPair("EdDSA");
    other = await generateKeyPair("ES256");
    jwks = {
      keys: [
        { ...(await exportJWK(es.publicKey)), kid: "es-1", alg: "ES256", use: "sig" },
        { ...(await exportJWK(ed.publicKey)), kid: "ed-1", alg: "EdDSA", use: "sig" },
      ],
    };
    await writeFile(path.join(dir, "jwks.json"), JSON.stringify(jwks));
    keyServer = http.createServer((req, res) => {
      fetches++;
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(jwks));
    });
    await new Promise<void>((resolve) => keyServer.listen(0, "127.0.0.1", resolve));
    keyUrl = `http://127.0.0.1:${(keyServer.address() as AddressInfo).port}/.well-known/jwks.json`;
  });
  afterAll(async () => {
    await new Promise((resolve) => keyServer.close(resolve));
    await rm(dir, { recursive: true, force: true });
  });

  const sign = (key: Parameters<SignJWT["sign"]>[0], alg: string, kid: string) =>
    new SignJWT({ sub: "bob", aud: AUDIENCE }).setProtectedHeader({ alg, kid }).setIssuedAt().setExpirationTime("5m").sign(key);

  it("verifies tokens against a JWKS file and a JWKS URL (fetched once, then cached); an unknown key is TOKEN_INVALID", async () => {
    for (const jwksSource of [path.join(dir, "jwks.json"), keyUrl]) {
      const t = await startTestLedger({ auth: { jwt: { jwks: jwksSource, audience: AUDIENCE } } }, { transport: "http" });
      try {
        for (const token of [await sign(es.privateKey, "ES256", "es-1"), await sign(ed.privateKey, "EdDSA", "ed-1")])
          expect((await bearerClient(t.ledger.url, token).listAgents({})).defaultAgent).toBe("build");
        const stranger = await failure(bearerClient(t.ledger.url, await sign(other.privateKey, "ES256", "es-1")).listAgents({}));
        expect({ code: stranger.code, ...infoOf(stranger) }).toEqual({ code: Code.Unauthenticated, reason: "TOKEN_INVALID", metadata: {} });
      } finally {
        await t.close();
      }
    }
    expect(fetches).toBeGreaterThanOrEqual(1);
    expect(fetches).toBeLessThanOrEqual(3);
  });

  it("answers UNAVAILABLE while a JWKS URL cannot be fetched", async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const t = await startTestLedger(
      { auth: { jwt: { jwks: `http://127.0.0.1:${port}/jwks.json`, audience: AUDIENCE } } },
      {
        transport: "http",
      },
    );
    try {
      const error = await failure(bearerClient(t.ledger.url, await sign(es.privateKey, "ES256", "es-1")).listAgents({}));
      expect(error.code).toBe(Code.Unavailable);
      expect(error.rawMessage).toBe(`authorization: the key set http://127.0.0.1:${port}/jwks.json cannot be fetched now; retry`);
    } finally {
      await t.close();
    }
  });
});

describe("JWT configuration", () => {
  it("takes LEDGER_JWT_SECRET, and refuses short secrets, a secret with a key set, and neither", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-jwt-config-"));
    try {
      expect(loadConfig({ cwd: dir, env: { LEDGER_JWT_SECRET: SECRET } }).jwt).toMatchObject({
        secret: SECRET,
        algorithms: ["HS256"],
        clockSkewS: 30,
      });
      expect(() => loadConfig({ cwd: dir, env: { LEDGER_JWT_SECRET: "short" } })).toThrow(
        new ConfigError("LEDGER_JWT_SECRET: must be at least 32 bytes (HS256 needs a 256-bit secret)"),
      );
      const parse = (jwt: object) => () => buildConfig(configFileSchema.parse({ auth: { jwt } }), undefined, dir);
      expect(parse({ secret: SECRET, jwks: "keys.json" })).toThrow(
        new ConfigError("auth.jwt: give either a secret (HS256) or jwks (a key set), not both"),
      );
      await writeFile(path.join(dir, "ledger.json"), JSON.stringify({ auth: { jwt: { issuer: ISSUER } } }));
      expect(() => loadConfig({ cwd: dir, env: {} })).toThrow(
        new ConfigError("auth.jwt: needs a secret (auth.jwt.secret or LEDGER_JWT_SECRET) or jwks (a key set's file or URL)"),
      );
      expect(loadConfig({ cwd: dir, env: { LEDGER_JWT_SECRET: SECRET } }).jwt).toMatchObject({ secret: SECRET, issuer: ISSUER });
      expect(parse({ jwks: "keys.json", audience: AUDIENCE })().jwt?.jwks).toEqual({ file: path.join(dir, "keys.json") });
      expect(parse({ jwks: "keys.json" })).toThrow(
        new ConfigError(
          "auth.jwt.audience: required with jwks: without it, any token the identity provider issues to any application would be accepted",
        ),
      );
      expect(parse({ jwks: "http://login.example.com/jwks.json", audience: AUDIENCE })).toThrow(
        new ConfigError("auth.jwt.jwks: a key set URL must use https (plain http only on loopback): whoever can alter it can forge tokens"),
      );
      expect(parse({ jwks: "https://login.example.com/jwks.json", audience: AUDIENCE })().jwt?.jwks).toEqual({
        url: "https://login.example.com/jwks.json",
      });
      expect(() => configFileSchema.parse({ auth: { jwt: { secret: SECRET, issuer: ["a", "b"] } } })).toThrow(/issuer/);
      expect(() => configFileSchema.parse({ auth: { jwt: { secret: SECRET, tenant: "org" } } })).toThrow(/tenant/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
