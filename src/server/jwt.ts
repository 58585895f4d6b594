import { readFileSync } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";
import { createLocalJWKSet, createRemoteJWKSet, errors, jwtVerify, type JSONWebKeySet, type JWTPayload } from "jose";
import { ConfigError } from "../config/config-error.js";
import { checkJwtKey, type JwtConfig } from "../config/auth.js";
import { scopesFromClaims, type Principal } from "../ledger/principal.js";
import { unauthenticated } from "./errors.js";

/** How long (ms) fetching a remote key set may take before the RPC fails with `UNAVAILABLE`. */
const JWKS_TIMEOUT_MS = 5000;

/**
 * A verifier of JSON Web Tokens (jose's `jwtVerify`) for `config`: the signature with the shared
 * secret or the key set (a JWKS file read now (synchronously, at start), or a URL fetched on first use and cached by jose,
 * refetched for an unknown `kid`), the `alg` among `config.algorithms`, `exp`/`nbf` with
 * `clockSkewS` seconds of tolerance, `iss` and `aud` when configured, `sub` and the required
 * claims (and the tenant claim, when configured, as a non-empty string). Resolves to the
 * principal; rejects with `ConnectError` `UNAUTHENTICATED` (ErrorInfo reason `TOKEN_EXPIRED`,
 * `TOKEN_CLAIM_INVALID` with metadata `claim`, or `TOKEN_INVALID`) or `UNAVAILABLE` when the
 * remote key set cannot be fetched. Throws `ConfigError` when the JWKS file cannot be read.
 */
export function createJwtVerifier(config: JwtConfig, options: { realm: string }): (token: string) => Promise<Principal> {
  checkJwtKey(config);
  const key = keyOf(config);
  const requiredClaims = [...new Set(["sub", "exp", ...config.requiredClaims, ...(config.tenantClaim ? [config.tenantClaim] : [])])];
  const challenge = (description: string) =>
    `Bearer realm="${options.realm}", error="invalid_token", error_description="${description.replace(/["\\]/g, "")}"`;
  const invalid = (reason: string, message: string, metadata: Record<string, string> = {}) =>
    unauthenticated(reason, `authorization: ${message}`, challenge(message), metadata);
  return async (token) => {
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, key as Parameters<typeof jwtVerify>[1], {
        algorithms: config.algorithms,
        issuer: config.issuer,
        audience: config.audience,
        clockTolerance: config.clockSkewS,
        requiredClaims,
      }));
    } catch (error) {
      throw describe(error, invalid, config);
    }
    if (typeof payload.sub !== "string" || payload.sub === "")
      throw invalid("TOKEN_CLAIM_INVALID", 'the token\'s "sub" claim must be a non-empty string', { claim: "sub" });
    let tenant: string | undefined;
    if (config.tenantClaim) {
      const value = payload[config.tenantClaim];
      if (typeof value !== "string" || value === "")
        throw invalid("TOKEN_CLAIM_INVALID", `the token's "${config.tenantClaim}" claim (the tenant) must be a non-empty string`, {
          claim: config.tenantClaim,
        });
      tenant = value;
    }
    return { subject: payload.sub, tenant, scopes: scopesFromClaims(payload), via: "jwt" };
  };
}

function keyOf(config: JwtConfig): Uint8Array | ReturnType<typeof createLocalJWKSet> | ReturnType<typeof createRemoteJWKSet> {
  if (config.secret !== undefined) return new TextEncoder().encode(config.secret);
  const jwks = config.jwks!;
  if ("url" in jwks) return createRemoteJWKSet(new URL(jwks.url), { timeoutDuration: JWKS_TIMEOUT_MS });
  let set: JSONWebKeySet;
  try {
    set = JSON.parse(readFileSync(jwks.file, "utf8")) as JSONWebKeySet;
    return createLocalJWKSet(set);
  } catch (error) {
    throw new ConfigError(`auth.jwt.jwks: cannot use ${jwks.file}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** The client-facing error for what `jwtVerify` threw; never echoes the token. */
function describe(
  error: unknown,
  invalid: (reason: string, message: string, metadata?: Record<string, string>) => ConnectError,
  config: JwtConfig,
): ConnectError {
  if (error instanceof errors.JWTExpired) return invalid("TOKEN_EXPIRED", "the token has expired (its exp claim is in the past)");
  if (error instanceof errors.JWTClaimValidationFailed) {
    const what = error.reason === "missing" ? "is missing" : "does not match what this server expects";
    return invalid("TOKEN_CLAIM_INVALID", `the token's "${error.claim}" claim ${what}`, { claim: error.claim });
  }
  if (error instanceof errors.JOSEAlgNotAllowed)
    return invalid("TOKEN_INVALID", `the token's algorithm is not accepted (accepted: ${config.algorithms.join(", ")})`);
  if (error instanceof errors.JWSSignatureVerificationFailed) return invalid("TOKEN_INVALID", "the token's signature does not verify");
  if (error instanceof errors.JWKSNoMatchingKey) return invalid("TOKEN_INVALID", "no key of the key set matches the token (kid/alg)");
  if (error instanceof errors.JWKSTimeout || (config.jwks && "url" in config.jwks && !(error instanceof errors.JOSEError)))
    return new ConnectError(
      `authorization: the key set ${(config.jwks as { url: string }).url} cannot be fetched now; retry`,
      Code.Unavailable,
    );
  return invalid("TOKEN_INVALID", "the bearer token is not a valid JWT");
}
