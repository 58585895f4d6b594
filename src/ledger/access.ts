import { realpath, stat } from "node:fs/promises";
import type { Kysely } from "kysely";
import { allowedRoots } from "../config/config.js";
import { CommandsNotAllowedError, PathNotAllowedError, PreconditionError, SessionNotFoundError } from "../errors.js";
import { isInside, isSpecialPath } from "../files/confine.js";
import type { DB } from "../storage/schema.js";
import type { LedgerDeps } from "./deps.js";
import { hasScope, type Principal } from "./principal.js";
import * as store from "../storage/session-store.js";
import type { SessionOwnership, SessionVisibility } from "../storage/session-store.js";

/**
 * Who may see which session (docs/security.md, "Who may see which session"): a caller with
 * `ledger:admin` (the static token, a server without authentication, an admin JWT) sees every
 * session; any other caller sees the sessions it owns — created with its `sub` in its tenant —
 * and, with `auth.share_within_tenant`, every owned session of its tenant. Sessions created
 * without a per-user identity (owner null) are visible to admins only.
 */
export interface AccessPolicy {
  /** `auth.share_within_tenant`: callers of one tenant see each other's sessions. */
  shareWithinTenant: boolean;
}

/** The ownership a session created by `principal` records: its subject and tenant, or none for admins without a JWT identity. */
export function ownershipFor(principal: Principal): SessionOwnership {
  return principal.via === "jwt" ? { owner: principal.subject, tenant: principal.tenant ?? null } : store.NO_OWNER;
}

/** True when `principal` may see and use a session owned as `ownership`. */
export function mayAccess(principal: Principal, ownership: SessionOwnership, policy: AccessPolicy): boolean {
  if (hasScope(principal, "ledger:admin")) return true;
  if (ownership.owner === null || ownership.tenant !== (principal.tenant ?? null)) return false;
  return ownership.owner === principal.subject || (policy.shareWithinTenant && principal.tenant !== undefined);
}

/**
 * The filter of `ListSessions` for `principal` (undefined: sees everything). Matches
 * {@link mayAccess} row by row.
 */
export function visibilityFor(principal: Principal, policy: AccessPolicy): SessionVisibility | undefined {
  if (hasScope(principal, "ledger:admin")) return undefined;
  const tenant = principal.tenant ?? null;
  return policy.shareWithinTenant && tenant !== null ? { tenant } : { tenant, owner: principal.subject };
}

/**
 * Checks that `principal` may use session `sessionId` before anything else is read or written.
 * Admins are not checked here (the RPC itself answers NOT_FOUND for a missing session). Throws
 * `SessionNotFoundError` (NOT_FOUND, naming `field`) both when the session does not exist and
 * when the caller may not see it: the same code, message and details, so a caller learns nothing
 * about sessions it may not see.
 */
export async function checkSessionAccess(
  deps: Pick<LedgerDeps, "db" | "config">,
  principal: Principal,
  sessionId: string,
  field = "session_id",
): Promise<void> {
  if (hasScope(principal, "ledger:admin")) return;
  const ownership = sessionId ? await ownershipOf(deps.db, sessionId) : undefined;
  if (!ownership || !mayAccess(principal, ownership, policyOf(deps))) throw new SessionNotFoundError(sessionId, field);
}

/**
 * Keeps the entries of `bySession` (keyed by session id) that `principal` may see; one read of
 * their owners. Admins get the map as it is.
 */
export async function filterVisible<T>(
  deps: Pick<LedgerDeps, "db" | "config">,
  principal: Principal,
  bySession: Map<string, T>,
): Promise<Map<string, T>> {
  if (hasScope(principal, "ledger:admin")) return bySession;
  const owners = await store.listSessionOwnerships(deps.db, [...bySession.keys()]);
  const policy = policyOf(deps);
  return new Map(
    [...bySession].filter(([id]) => {
      const ownership = owners.get(id);
      return ownership !== undefined && mayAccess(principal, ownership, policy);
    }),
  );
}

/** The access policy of `deps.config`. */
export function policyOf(deps: Pick<LedgerDeps, "config">): AccessPolicy {
  return { shareWithinTenant: deps.config.shareWithinTenant ?? false };
}

/**
 * Checks that a session of `tenant` (null: none) may use `directory` (absolute; called with the
 * path as written, then resolved), in this order:
 * - never a special filesystem directory (`/proc`, `/sys`, `/dev` or below: nothing there is read);
 * - with `tenants` configured and a tenant, inside one of the tenant's roots;
 * - with `session_directories` configured, inside one of them (for every session).
 * Entries are compared as configured and resolved (realpath). Throws `PathNotAllowedError`
 * (PERMISSION_DENIED, reason PATH_NOT_ALLOWED, field `directory`, naming the path as the caller
 * wrote it, `shown`, and the config key that refused it).
 */
export async function checkSessionDirectory(
  deps: Pick<LedgerDeps, "config">,
  tenant: string | null,
  directory: string,
  shown = directory,
): Promise<void> {
  if (isSpecialPath(directory))
    throw new PathNotAllowedError("directory", shown, "is a special filesystem path (/proc, /sys and /dev are never read)");
  const tenants = deps.config.tenants;
  if (tenants && tenant) {
    const roots = tenants[tenant]?.roots;
    if (!roots)
      throw new PathNotAllowedError(
        "directory",
        shown,
        `cannot be used: tenant ${tenant} has no roots configured (tenants.${tenant}.roots)`,
      );
    if (!(await insideAny(roots, directory)))
      throw new PathNotAllowedError("directory", shown, `is outside the roots of tenant ${tenant} (tenants.${tenant}.roots)`);
  }
  const allowed = deps.config.sessionDirectories;
  if (allowed && !(await insideAny(allowed, directory)))
    throw new PathNotAllowedError("directory", shown, "is outside the directories sessions may use (session_directories)");
}

/**
 * Refuses to work on a session whose directory the configuration no longer allows: outside
 * `session_directories` (it was created before they were set, they changed, or the directory,
 * or one above it, was since replaced by a link leading out of them), or, for a tenant's session
 * with `tenants` configured, outside that tenant's roots (the same ways). Compared as stored and
 * as resolved now (realpath), so a link cannot take the session's files and tools out of where
 * it may work; without either setting a session may use any directory (docs/security.md), and
 * one whose path now leads elsewhere simply works there. Also refuses one whose directory no
 * longer exists (deleted since the session was created): its files, tools and commands have
 * nowhere to run. Called before a prompt is stored, a Command, a Shell command or a
 * ResumeSession runs, a fork is made and a revert is set or undone.
 * Throws `PathNotAllowedError` (PERMISSION_DENIED, PATH_NOT_ALLOWED, field `session_id`, naming
 * the session's directory), then `PreconditionError` (FAILED_PRECONDITION,
 * SESSION_DIRECTORY_MISSING, metadata `session_id`, `directory`).
 */
export async function checkSessionStillAllowed(
  deps: Pick<LedgerDeps, "config" | "db">,
  session: { id: string; directory: string },
): Promise<void> {
  // Resolved only when a setting confines the session (a prompt's hot path otherwise pays one stat).
  const inside = async (roots: string[]) =>
    (await insideAny(roots, session.directory)) &&
    (await insideAny(roots, await realpath(session.directory).catch(() => session.directory)));
  const refuse = (why: string) =>
    new PathNotAllowedError("session_id", session.directory, `(the directory of session ${session.id}) ${why}`);
  const allowed = deps.config.sessionDirectories;
  if (allowed && !(await inside(allowed)))
    throw refuse("is outside the directories sessions may use (session_directories): create a session inside them");
  const tenant = deps.config.tenants ? await tenantOf(deps.db, session.id) : null;
  if (tenant) {
    const roots = deps.config.tenants?.[tenant]?.roots;
    if (!roots || !(await inside(roots)))
      throw refuse(`is outside the roots of tenant ${tenant} (tenants.${tenant}.roots): create a session inside them`);
  }
  const info = await stat(session.directory).catch(() => undefined);
  if (!info?.isDirectory()) {
    throw new PreconditionError(
      "SESSION_DIRECTORY_MISSING",
      `the directory of session ${session.id}, ${session.directory}, no longer exists on the server (or is not a directory): recreate it, or create a session in an existing directory`,
      { session_id: session.id, directory: session.directory },
    );
  }
}

/** Whether `directory` is one of `roots` or inside one, each root as configured or resolved. */
async function insideAny(roots: string[], directory: string): Promise<boolean> {
  const reals = await Promise.all(roots.map((r) => realpath(r).catch(() => r)));
  return [...roots, ...reals].some((root) => isInside(root, directory));
}

/**
 * Throws `CommandsNotAllowedError` (PERMISSION_DENIED) when session `sessionId` belongs to a
 * tenant whose `tenants.<name>.commands` is not true: shell commands run with the server's rights,
 * outside every root. Servers without `tenants`, and sessions without a tenant, may run them.
 */
export async function checkCommandsAllowed(deps: Pick<LedgerDeps, "db" | "config">, sessionId: string): Promise<void> {
  if (!(await commandsAllowed(deps, sessionId))) throw new CommandsNotAllowedError((await tenantOf(deps.db, sessionId))!);
}

/** Whether session `sessionId` may run shell commands; see {@link checkCommandsAllowed}. */
export async function commandsAllowed(deps: Pick<LedgerDeps, "db" | "config">, sessionId: string): Promise<boolean> {
  if (!deps.config.tenants) return true;
  const tenant = await tenantOf(deps.db, sessionId);
  return !tenant || deps.config.tenants[tenant]?.commands === true;
}

/**
 * Why session `sessionId` may not use the MCP servers (their tools, and resource drafts), or
 * undefined when it may: always on servers without `tenants` and for sessions without a tenant;
 * a tenant's session only when `tenants.<name>.mcp` is true (docs/security.md, "Per-tenant file
 * roots"). The reason reads `MCP servers are not available to sessions of tenant acme (tenants.acme.mcp)`.
 */
export async function mcpRefusal(deps: Pick<LedgerDeps, "db" | "config">, sessionId: string): Promise<string | undefined> {
  if (!deps.config.tenants) return undefined;
  const tenant = await tenantOf(deps.db, sessionId);
  if (!tenant || deps.config.tenants[tenant]?.mcp === true) return undefined;
  return `MCP servers are not available to sessions of tenant ${tenant} (tenants.${tenant}.mcp)`;
}

/**
 * The roots (besides the session directory) that `file:` drafts and tools of session `sessionId`
 * may read: `allowedRoots` of its tenant. Reads the session's tenant only when `tenants` is
 * configured, once per session and process (a session's tenant never changes).
 */
export async function rootsForSession(deps: Pick<LedgerDeps, "db" | "config">, sessionId: string): Promise<string[]> {
  if (!deps.config.tenants) return allowedRoots(deps.config);
  return allowedRoots(deps.config, await tenantOf(deps.db, sessionId));
}

/**
 * The roots of the tenant that owns session `sessionId` (absolute), or undefined when it is not
 * a tenant's session (or `tenants` is not configured): the project instruction files of such a
 * session are looked up inside them only (src/agent/instructions.ts).
 */
export async function tenantRootsOf(deps: Pick<LedgerDeps, "db" | "config">, sessionId: string): Promise<string[] | undefined> {
  if (!deps.config.tenants) return undefined;
  const tenant = await tenantOf(deps.db, sessionId);
  return tenant ? allowedRoots(deps.config, tenant) : undefined;
}

/** Sessions whose ownership this process remembers, per database handle. */
const OWNERSHIP_CACHE_ENTRIES = 10_000;
const ownerships = new WeakMap<Kysely<DB>, Map<string, SessionOwnership>>();

/**
 * The owner and tenant of session `sessionId`, or undefined when it does not exist. Remembered
 * once read (a session's owner and tenant never change and ids are never reused, so a remembered
 * entry is never wrong; a deleted session's entry only lets the RPC answer its own NOT_FOUND),
 * so the access check of every RPC reads the database once per session and process.
 */
async function ownershipOf(db: Kysely<DB>, sessionId: string): Promise<SessionOwnership | undefined> {
  let cache = ownerships.get(db);
  if (!cache) ownerships.set(db, (cache = new Map()));
  const known = cache.get(sessionId);
  if (known) return known;
  const ownership = await store.getSessionOwnership(db, sessionId);
  if (!ownership) return undefined;
  cache.set(sessionId, ownership);
  if (cache.size > OWNERSHIP_CACHE_ENTRIES) cache.delete(cache.keys().next().value!);
  return ownership;
}

async function tenantOf(db: Kysely<DB>, sessionId: string): Promise<string | null> {
  return (await ownershipOf(db, sessionId))?.tenant ?? null;
}
