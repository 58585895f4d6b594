import { decodeJwt, SignJWT } from "jose";
import { loadConfig } from "../config/config.js";
import { ConfigError } from "../config/config-error.js";
import { SCOPES } from "../ledger/principal.js";
import type { CliIo } from "./io.js";

/** Options of `ledger token`. */
export interface TokenOptions {
  /** The subject (`sub`): who the token is for. */
  sub: string;
  /** The tenant, written to the configured `auth.jwt.tenant_claim` (else a claim named `tenant`). */
  tenant?: string;
  /** Space- or comma-separated scopes (`ledger:read`, `ledger:write`, `ledger:admin`); none: read and write. */
  scope?: string;
  /** Lifetime, as jose reads it: "1h", "30m", "7d" (default "1h"). */
  expires: string;
  config?: string;
  /** `--lenient-config`: unknown config keys do not stop it (also `LEDGER_LENIENT_CONFIG=1`); the config's warnings are not printed. */
  lenientConfig?: boolean;
}

/**
 * `ledger token`: mints an HS256 JSON Web Token with the server's shared secret (`auth.jwt.secret`
 * or `LEDGER_JWT_SECRET`, from the config found as `serve` finds it), with the configured issuer
 * and audience (the first of each), for development and tests; in production the identity
 * provider mints tokens (docs/security.md). Resolves with the token (one line on stdout).
 * Throws `ConfigError` when no secret is configured (a key set cannot sign), a scope is unknown,
 * `--tenant` is missing while the server requires a tenant claim, or `--expires` is no positive
 * lifetime.
 */
export async function mintToken(opts: TokenOptions, io: Pick<CliIo, "cwd" | "env">): Promise<string> {
  const config = loadConfig({ explicitPath: opts.config, cwd: io.cwd, env: io.env, lenient: opts.lenientConfig || undefined });
  const jwt = config.jwt;
  if (!jwt?.secret)
    throw new ConfigError(
      "ledger token signs with the shared secret: set LEDGER_JWT_SECRET (32+ bytes) or auth.jwt.secret; with a key set (jwks) your identity provider mints the tokens",
    );
  const scopes = (opts.scope ?? "").split(/[\s,]+/).filter(Boolean);
  const unknown = scopes.filter((s) => !(SCOPES as readonly string[]).includes(s));
  if (unknown.length > 0) throw new ConfigError(`--scope: unknown ${unknown.join(", ")}; expected ${SCOPES.join(", ")}`);
  if (jwt.tenantClaim && !opts.tenant)
    throw new ConfigError(`--tenant: required: this server's tokens carry the tenant claim "${jwt.tenantClaim}" (auth.jwt.tenant_claim)`);
  const badLifetime = (why: string) =>
    new ConfigError(
      `--expires: expected a positive lifetime of at most 366d such as "30m", "1h" or "7d", got ${JSON.stringify(opts.expires)}${why}`,
    );
  if (!/^\d+\s*[a-z]+$/i.test(opts.expires.trim())) throw badLifetime("");
  const claims: Record<string, unknown> = { sub: opts.sub };
  if (opts.tenant) claims[jwt.tenantClaim ?? "tenant"] = opts.tenant;
  if (scopes.length > 0) claims.scope = scopes.join(" ");
  let token = new SignJWT(claims).setProtectedHeader({ alg: "HS256", typ: "JWT" }).setIssuedAt();
  try {
    token = token.setExpirationTime(opts.expires);
  } catch (error) {
    // jose's own reading of the period (its units: s, m, h, d, w, y and their long names).
    throw badLifetime(` (${error instanceof Error ? error.message : String(error)})`);
  }
  const issuer = [jwt.issuer ?? []].flat()[0];
  const audience = [jwt.audience ?? []].flat()[0];
  if (issuer) token = token.setIssuer(issuer);
  if (audience) token = token.setAudience(audience);
  const signed = await token.sign(new TextEncoder().encode(jwt.secret));
  const { iat = 0, exp = 0 } = decodeJwt(signed);
  // "0m" would mint a token that is expired when it is made; a lifetime of years is no test token.
  if (exp - iat <= 0) throw badLifetime(": that token would be expired when it is made");
  if (exp - iat > MAX_LIFETIME_S) throw badLifetime("");
  return signed;
}

/** The longest `--expires` (s): 366 days. A development token; production tokens come from the identity provider. */
const MAX_LIFETIME_S = 366 * 24 * 3600;
