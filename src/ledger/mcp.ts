import {
  McpNotAllowedError,
  McpServerNotFoundError,
  McpServerUnavailableError,
  InvalidArgumentError,
  PreconditionError,
} from "../errors.js";
import type { McpResourceInfo, McpResourceTemplateInfo, McpServerInfo } from "../mcp/reader.js";
import type { LedgerDeps } from "./deps.js";
import { decodePageToken, encodePageToken } from "./page-token.js";
import { hasScope, type Principal } from "./principal.js";

/** Entries of a `ListMcpResources` page when `page_size` is 0. */
export const DEFAULT_MCP_RESOURCES_PAGE = 100;

/** One page of a server's resources, then its resource templates (the `ListMcpResources` answer). */
export interface McpResourcePage {
  resources: McpResourceInfo[];
  templates: McpResourceTemplateInfo[];
  /** Empty on the last page. */
  nextPageToken: string;
}

/**
 * The configured MCP servers for `ListMcpServers` (docs/api.md, "MCP discovery"): every server
 * in config order with its status and, when connected, its counts (`McpReader.servers`);
 * `connect` starts the enabled servers not running first. Throws `McpNotAllowedError`
 * (PERMISSION_DENIED) for a caller of a tenant without `tenants.<name>.mcp`.
 */
export async function listMcpServers(
  deps: Pick<LedgerDeps, "config" | "mcp">,
  principal: Principal,
  options: { connect: boolean },
  signal?: AbortSignal,
): Promise<McpServerInfo[]> {
  checkMcpAllowed(deps, principal);
  if (!deps.mcp) return [];
  return deps.mcp.servers({ connect: options.connect }, signal);
}

/**
 * One page of server `server`'s resources, then its resource templates, for `ListMcpResources`:
 * the whole listing is read from the server (starting it when it is not running) and paged
 * here, `pageSize` entries (resources and templates together; 0: {@link DEFAULT_MCP_RESOURCES_PAGE}).
 * The page token holds the server's name and the last entry given (its kind and URI, and its
 * position, used when that entry is no longer listed), so a list that changes between pages
 * goes on after the entry last seen. Throws `McpNotAllowedError` (PERMISSION_DENIED, as
 * {@link listMcpServers}), `McpServerNotFoundError` (NOT_FOUND on `server`, listing the
 * configured ones), `PreconditionError` `MCP_SERVER_DISABLED` (FAILED_PRECONDITION) for a
 * disabled server, `McpServerUnavailableError` (UNAVAILABLE) with the server's error when it
 * cannot start or list within its `timeout`, `InvalidArgumentError` on `page_token` for a token
 * not ours or of another server.
 */
export async function listMcpResources(
  deps: Pick<LedgerDeps, "config" | "mcp">,
  principal: Principal,
  request: { server: string; pageSize: number; pageToken: string },
  signal?: AbortSignal,
): Promise<McpResourcePage> {
  checkMcpAllowed(deps, principal);
  const { server } = request;
  // Own keys only: "__proto__" or "toString" must not find Object.prototype members.
  const entry = Object.hasOwn(deps.config.mcp, server) ? deps.config.mcp[server] : undefined;
  if (!entry) throw new McpServerNotFoundError(server, Object.keys(deps.config.mcp));
  if (!entry.enabled)
    throw new PreconditionError("MCP_SERVER_DISABLED", `server: MCP server ${JSON.stringify(server)} is disabled ("enabled": false)`, {
      server,
    });
  const after = request.pageToken ? readToken(request.pageToken, server) : undefined;
  if (!deps.mcp) throw new McpServerUnavailableError(server, "MCP is not running");
  let listing;
  try {
    listing = await deps.mcp.resources(server, signal);
  } catch (error) {
    if (signal?.aborted) throw error;
    throw new McpServerUnavailableError(server, error instanceof Error ? error.message : String(error));
  }
  const entries: Entry[] = [
    ...listing.resources.map((value): Entry => ({ kind: "r", key: value.uri, value })),
    ...listing.templates.map((value): Entry => ({ kind: "t", key: value.uriTemplate, value })),
  ];
  const start = after ? startAfter(entries, after) : 0;
  const end = start + (request.pageSize || DEFAULT_MCP_RESOURCES_PAGE);
  const page = entries.slice(start, end);
  const last = page.at(-1);
  return {
    resources: page.flatMap((e) => (e.kind === "r" ? [e.value as McpResourceInfo] : [])),
    templates: page.flatMap((e) => (e.kind === "t" ? [e.value as McpResourceTemplateInfo] : [])),
    nextPageToken: last && end < entries.length ? encodePageToken({ s: server, k: last.kind, u: last.key, i: end }) : "",
  };
}

/**
 * Throws `McpNotAllowedError` when `principal` belongs to a tenant whose `tenants.<name>.mcp` is
 * not true (the rule `mcpRefusal` applies to sessions). Admins, callers without a tenant and
 * servers without `tenants` may use MCP.
 */
export function checkMcpAllowed(deps: Pick<LedgerDeps, "config">, principal: Principal): void {
  const tenants = deps.config.tenants;
  if (!tenants || principal.tenant === undefined || hasScope(principal, "ledger:admin")) return;
  if (tenants[principal.tenant]?.mcp !== true) throw new McpNotAllowedError(principal.tenant);
}

type Entry = { kind: "r" | "t"; key: string; value: McpResourceInfo | McpResourceTemplateInfo };
type Position = { kind: string; key: string; index: number };

function readToken(token: string, server: string): Position {
  const cursor = decodePageToken("page_token", token, { s: "string", k: "string", u: "string", i: "int" });
  if (cursor.k !== "r" && cursor.k !== "t") throw new InvalidArgumentError("page_token", "is not a page token issued by this service");
  if (cursor.s !== server)
    throw new InvalidArgumentError(
      "page_token",
      `continues the resources of MCP server ${JSON.stringify(cursor.s)}, not ${JSON.stringify(server)}`,
    );
  return { kind: String(cursor.k), key: String(cursor.u), index: Number(cursor.i) };
}

/** The index after the entry `after` names: where it was, else where it is now, else its old position. */
function startAfter(entries: Entry[], after: Position): number {
  const same = (e: Entry | undefined) => e !== undefined && e.kind === after.kind && e.key === after.key;
  if (same(entries[after.index - 1])) return after.index;
  const found = entries.findIndex(same);
  return found >= 0 ? found + 1 : Math.min(after.index, entries.length);
}
