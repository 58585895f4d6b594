import { createHash, timingSafeEqual } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextKey, type Interceptor } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { JwtConfig } from "../config/auth.js";
import { hasScope, LOCAL_PRINCIPAL, TOKEN_PRINCIPAL, type Principal } from "../ledger/principal.js";
import { SESSION_SERVICE_ACCESS } from "./access.js";
import { ERROR_DOMAIN, unauthenticated } from "./errors.js";
import { createJwtVerifier } from "./jwt.js";

/** Services callable without a token (load balancers probe health). */
const PUBLIC_SERVICES = new Set(["grpc.health.v1.Health"]);

/** The realm named in `www-authenticate` challenges. */
const REALM = "session-ledger";

/**
 * The caller of the current RPC, set by {@link authInterceptor} (default: the local principal
 * of a server without authentication). Handlers read it with `ctx.values.get(principalKey)`.
 */
export const principalKey = createContextKey<Principal>(LOCAL_PRINCIPAL, { description: "the authenticated caller" });

/** Checks a request's `authorization` header; see {@link createAuthenticator}. */
export interface Authenticator {
  /** True when RPCs need a token (a static token or JWTs are configured). */
  readonly required: boolean;
  /**
   * The principal of an `authorization` header value. Throws `ConnectError` `UNAUTHENTICATED`
   * (ErrorInfo reason `TOKEN_MISSING`, `TOKEN_INVALID`, `TOKEN_EXPIRED` or `TOKEN_CLAIM_INVALID`,
   * a `www-authenticate` header in its metadata) or `UNAVAILABLE` (a remote key set unreachable).
   */
  principal(header: string | undefined): Promise<Principal>;
}

/**
 * Authentication from config (docs/security.md): nothing configured → every caller is the local
 * principal (the server then binds loopback only); a static `token` → its holder may do
 * everything (compared in constant time: SHA-256 digests with `timingSafeEqual`); `jwt` → JSON
 * Web Tokens verified with jose, the principal being the token's `sub`, its tenant the configured
 * claim, its scopes the `ledger:*` values of `scope`/`scp`. Both may be configured: a bearer equal
 * to the static token is its holder, any other is verified as a JWT. Throws what reading a JWKS
 * file throws (`ConfigError`).
 */
export function createAuthenticator(options: { token?: string; jwt?: JwtConfig }): Authenticator {
  const expected = options.token ? digest(options.token) : undefined;
  const verify = options.jwt ? createJwtVerifier(options.jwt, { realm: REALM }) : undefined;
  const required = expected !== undefined || verify !== undefined;
  return {
    required,
    async principal(header) {
      if (!required) return LOCAL_PRINCIPAL;
      const match = /^Bearer\s+(.+)$/i.exec((header ?? "").trim());
      if (!match)
        throw unauthenticated(
          "TOKEN_MISSING",
          "authorization: a bearer token is required (header `authorization: Bearer <token>`)",
          `Bearer realm="${REALM}"`,
        );
      const bearer = match[1]!.trim();
      if (expected && timingSafeEqual(digest(bearer), expected)) return TOKEN_PRINCIPAL;
      if (verify) return verify(bearer);
      throw unauthenticated(
        "TOKEN_INVALID",
        "authorization: the bearer token is not valid",
        `Bearer realm="${REALM}", error="invalid_token"`,
      );
    },
  };
}

/**
 * The interceptor that authenticates every RPC except health checks and sets {@link principalKey}.
 * For `ledger.v1.SessionService` it also checks the method's scope ({@link SESSION_SERVICE_ACCESS}):
 * a token without it → `PERMISSION_DENIED` (ErrorInfo reason `SCOPE_MISSING`, metadata
 * `required_scope`; `www-authenticate: Bearer error="insufficient_scope"`). Other services
 * (reflection) need any valid token. Errors as {@link Authenticator.principal}.
 */
export function authInterceptor(authenticator: Authenticator): Interceptor {
  return (next) => async (req) => {
    if (!authenticator.required || PUBLIC_SERVICES.has(req.service.typeName)) return next(req);
    const principal = await authenticator.principal(req.header.get("authorization") ?? undefined);
    if (req.service.typeName === "ledger.v1.SessionService") {
      const rule = SESSION_SERVICE_ACCESS[req.method.localName as keyof typeof SESSION_SERVICE_ACCESS];
      // A method without a rule is refused rather than left open (test/server/access.test.ts keeps the table whole).
      const needed = rule?.scope ?? "ledger:admin";
      if (!hasScope(principal, needed)) {
        throw new ConnectError(
          `authorization: ${req.method.name} needs the scope ${needed}; the token grants ${[...principal.scopes].join(" ") || "no ledger scope"}`,
          Code.PermissionDenied,
          { "www-authenticate": `Bearer realm="${REALM}", error="insufficient_scope", scope="${needed}"` },
          [
            {
              desc: ErrorInfoSchema,
              value: create(ErrorInfoSchema, { reason: "SCOPE_MISSING", domain: ERROR_DOMAIN, metadata: { required_scope: needed } }),
            },
          ],
        );
      }
    }
    req.contextValues.set(principalKey, principal);
    return next(req);
  };
}

/** True for addresses only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

function digest(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}
