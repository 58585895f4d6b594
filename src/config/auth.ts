import path from "node:path";
import { z } from "zod";
import { ConfigError } from "./config-error.js";

/** JWT algorithms accepted with a shared secret (`auth.jwt.secret`) unless `algorithms` says otherwise. */
export const DEFAULT_SECRET_ALGORITHMS = ["HS256"];
/** JWT algorithms accepted with a key set (`auth.jwt.jwks`) unless `algorithms` says otherwise. */
export const DEFAULT_JWKS_ALGORITHMS = ["RS256", "ES256", "EdDSA"];
/** Clock skew (seconds) tolerated on `exp`, `nbf` and `iat` unless `clock_skew_s` says otherwise. */
export const DEFAULT_CLOCK_SKEW_S = 30;
/** A shared secret shorter than this (bytes) is refused: HS256 wants at least 256 bits. */
export const MIN_SECRET_BYTES = 32;

/** The `auth` key of ledger.json. */
export const authSchema = z
  .object({
    token: z.string().min(16).optional(),
    share_within_tenant: z.boolean().default(false),
    jwt: z
      .object({
        secret: z.string().optional(),
        jwks: z.string().min(1).optional(),
        // One issuer: a session's owner is the token's `sub`, which is unique per issuer only.
        issuer: z.string().min(1).optional(),
        audience: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]).optional(),
        algorithms: z.array(z.string().min(1)).min(1).optional(),
        clock_skew_s: z.number().int().min(0).max(3600).default(DEFAULT_CLOCK_SKEW_S),
        required_claims: z.array(z.string().min(1)).default([]),
        tenant_claim: z.string().min(1).optional(),
      })
      .strict()
      .optional(),
  })
  .strict()
  .default({ share_within_tenant: false });

/**
 * How JSON Web Tokens are verified (docs/security.md, "JSON Web Tokens"): with a shared secret
 * (HS256) or with a key set (JWKS: a file, or an https/http URL fetched and cached by jose), the
 * issuer and audience when given, `clockSkewS` seconds of tolerance, claims that must be present,
 * and the claim naming the tenant.
 */
export interface JwtConfig {
  /** Shared secret (UTF-8 bytes, at least {@link MIN_SECRET_BYTES}); from `auth.jwt.secret` or `LEDGER_JWT_SECRET`. */
  secret?: string;
  /** A JWKS: an absolute file path, or an http(s) URL. */
  jwks?: { file: string } | { url: string };
  issuer?: string;
  audience?: string | string[];
  /** Accepted `alg` values. */
  algorithms: string[];
  /** Tolerated clock skew, seconds. */
  clockSkewS: number;
  /** Claims a token must carry besides `sub` (always required). */
  requiredClaims: string[];
  /** The claim whose string value names the principal's tenant; none: principals have no tenant. */
  tenantClaim?: string;
}

/**
 * Builds the verified JWT settings from the file's `auth.jwt` (a JWKS path relative to
 * `baseDir`). Returns undefined without `auth.jwt`. Throws {@link ConfigError} when both a secret
 * and a key set are given, when neither is, or when the secret is shorter than
 * {@link MIN_SECRET_BYTES} bytes.
 */
export function buildJwtConfig(file: z.infer<typeof authSchema>["jwt"], baseDir: string): JwtConfig | undefined {
  if (!file) return undefined;
  const jwks = file.jwks;
  if (file.secret !== undefined) checkSecret(file.secret, "auth.jwt.secret");
  if (file.secret && jwks) throw new ConfigError("auth.jwt: give either a secret (HS256) or jwks (a key set), not both");
  if (jwks && !file.audience)
    throw new ConfigError(
      "auth.jwt.audience: required with jwks: without it, any token the identity provider issues to any application would be accepted",
    );
  if (jwks && /^http:\/\//.test(jwks) && !/^http:\/\/(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?\//.test(jwks))
    throw new ConfigError(
      "auth.jwt.jwks: a key set URL must use https (plain http only on loopback): whoever can alter it can forge tokens",
    );
  return {
    secret: file.secret,
    jwks: jwks ? (/^https?:\/\//.test(jwks) ? { url: jwks } : { file: path.resolve(baseDir, jwks) }) : undefined,
    issuer: file.issuer,
    audience: file.audience,
    algorithms: file.algorithms ?? (file.secret ? DEFAULT_SECRET_ALGORITHMS : DEFAULT_JWKS_ALGORITHMS),
    clockSkewS: file.clock_skew_s,
    requiredClaims: file.required_claims,
    tenantClaim: file.tenant_claim,
  };
}

/**
 * `LEDGER_JWT_SECRET` over the file's settings: sets the shared secret (keeping the file's issuer,
 * audience and other checks). Throws {@link ConfigError} when the secret is too short or the file
 * configures a key set (`jwks`) instead.
 */
export function withEnvSecret(jwt: JwtConfig | undefined, secret: string): JwtConfig {
  checkSecret(secret, "LEDGER_JWT_SECRET");
  if (jwt?.jwks) throw new ConfigError("LEDGER_JWT_SECRET: auth.jwt configures a key set (jwks); give one or the other");
  return {
    clockSkewS: DEFAULT_CLOCK_SKEW_S,
    requiredClaims: [],
    ...jwt,
    algorithms: jwt?.algorithms ?? DEFAULT_SECRET_ALGORITHMS,
    secret,
  };
}

function checkSecret(secret: string, where: string): void {
  if (secret === "")
    throw new ConfigError(
      `${where}: is empty (with "{env:LEDGER_JWT_SECRET}", is LEDGER_JWT_SECRET set?); give a secret of at least ${MIN_SECRET_BYTES} bytes`,
    );
  if (Buffer.byteLength(secret, "utf8") < MIN_SECRET_BYTES)
    throw new ConfigError(`${where}: must be at least ${MIN_SECRET_BYTES} bytes (HS256 needs a 256-bit secret)`);
}

/**
 * Throws {@link ConfigError} when `jwt` has neither a secret nor a key set (after
 * `LEDGER_JWT_SECRET` was applied): there would be nothing to verify tokens with.
 */
export function checkJwtKey(jwt: JwtConfig | undefined): void {
  if (jwt && !jwt.secret && !jwt.jwks)
    throw new ConfigError("auth.jwt: needs a secret (auth.jwt.secret or LEDGER_JWT_SECRET) or jwks (a key set's file or URL)");
}

/** The `tenants` key of ledger.json: per tenant, the directories its sessions may use. */
export const tenantsSchema = z
  .record(
    z.string().min(1),
    z
      .object({ roots: z.array(z.string().min(1)).default([]), commands: z.boolean().default(false), mcp: z.boolean().default(false) })
      .strict(),
  )
  .optional();

/** A tenant's settings (docs/security.md, "Per-tenant file roots"). */
export interface TenantConfig {
  /** Absolute directories: its sessions' `directory` must lie in one; file drafts and tools read inside the session directory and these. */
  roots: string[];
  /**
   * May its sessions run shell commands (the `Shell` RPC and the model's `bash` tool)? A command
   * runs with the server's rights and is not confined to any root, so the default is no.
   */
  commands: boolean;
  /**
   * May its sessions use the MCP servers (their tools offered to the model, resource drafts read
   * through them)? The servers run with the server's rights and see no tenant, so the default is no.
   */
  mcp?: boolean;
}

/**
 * Builds `tenants` (roots resolved against `baseDir`). Throws {@link ConfigError} when tenants are
 * configured without `auth.jwt.tenant_claim` (nothing would name a caller's tenant).
 */
export function buildTenants(
  file: z.infer<typeof tenantsSchema>,
  jwt: JwtConfig | undefined,
  baseDir: string,
): Record<string, TenantConfig> | undefined {
  if (!file) return undefined;
  if (!jwt?.tenantClaim) throw new ConfigError("tenants: needs auth.jwt.tenant_claim (the token claim that names a caller's tenant)");
  return Object.fromEntries(
    Object.entries(file).map(([name, t]) => [
      name,
      { roots: t.roots.map((r) => path.resolve(baseDir, r)), commands: t.commands, mcp: t.mcp },
    ]),
  );
}
