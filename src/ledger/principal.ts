/**
 * Who is calling (docs/security.md): the principal an RPC runs for, as the server's
 * authentication established it. The domain receives it; it never parses tokens.
 */

/** What a token may do: `ledger:admin` includes `ledger:write`, which includes `ledger:read`. */
export type Scope = "ledger:read" | "ledger:write" | "ledger:admin";

/** Every scope, weakest first. */
export const SCOPES: readonly Scope[] = ["ledger:read", "ledger:write", "ledger:admin"];

/** The caller of an RPC. */
export interface Principal {
  /** Who: a JWT's `sub`; `"local"` without authentication; `"token"` for the static bearer token. */
  subject: string;
  /** The tenant (the configured tenant claim of a JWT); undefined without one. */
  tenant?: string;
  /** What the caller may do; see {@link hasScope}. */
  scopes: ReadonlySet<Scope>;
  /** How the caller was established: no authentication (loopback default), the static token, or a JWT. */
  via: "none" | "token" | "jwt";
}

/** The caller when the server runs without authentication (loopback only): may do everything. */
export const LOCAL_PRINCIPAL: Principal = Object.freeze({ subject: "local", scopes: new Set(SCOPES), via: "none" as const });

/** The caller holding the static bearer token (`LEDGER_TOKEN`): may do everything. */
export const TOKEN_PRINCIPAL: Principal = Object.freeze({ subject: "token", scopes: new Set(SCOPES), via: "token" as const });

/** True when `principal` may do what `needed` allows (admin ⊇ write ⊇ read). */
export function hasScope(principal: Principal, needed: Scope): boolean {
  const rank = SCOPES.indexOf(needed);
  return SCOPES.some((scope, i) => i >= rank && principal.scopes.has(scope));
}

/**
 * The scopes a JWT grants from its `scope` claim (space-separated, RFC 8693 / OAuth 2.0) or `scp`
 * (a string or an array of strings): the `ledger:*` values in it, others ignored. A token with
 * neither claim may read and write (not admin): scopes only ever narrow what a user's token does.
 */
export function scopesFromClaims(claims: Record<string, unknown>): Set<Scope> {
  const raw = claims.scope ?? claims.scp;
  if (raw === undefined) return new Set<Scope>(["ledger:read", "ledger:write"]);
  const values = Array.isArray(raw)
    ? raw.filter((v): v is string => typeof v === "string")
    : typeof raw === "string"
      ? raw.split(/\s+/)
      : [];
  return new Set(values.filter((v): v is Scope => (SCOPES as readonly string[]).includes(v)));
}
