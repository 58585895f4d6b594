import { create, toJsonString } from "@bufbuild/protobuf";
import {
  McpResourceSchema,
  McpResourceTemplateSchema,
  McpServerSchema,
  McpServerStatus,
  McpServerType,
  type McpResource,
  type McpResourceTemplate,
  type McpServer,
} from "../../gen/ledger/v1/mcp_pb.js";
import { PartInputSchema, type PartInput } from "../../gen/ledger/v1/part_pb.js";
import type { Ledger } from "./client.js";

/** A `--resource SERVER:URI` of `ledger prompt`: the server's name and the resource's URI. */
export interface ResourceRef {
  server: string;
  uri: string;
}

/**
 * Splits `--resource` `SERVER:URI` at its first `:` (a server name holds none; the URI keeps its
 * own scheme: `everything:demo://resource/static/document/architecture.md`). Throws an `Error`
 * naming the option when either side is empty.
 */
export function parseResourceOption(value: string): ResourceRef {
  const at = value.indexOf(":");
  const server = at > 0 ? value.slice(0, at) : "";
  const uri = at > 0 ? value.slice(at + 1) : "";
  if (!server || !uri)
    throw new Error(`--resource ${value}: expected SERVER:URI, e.g. everything:demo://resource/static/document/architecture.md`);
  return { server, uri };
}

/**
 * The file draft of `--resource SERVER:URI` as a client that offers MCP resources builds it
 * (OpenCode's prompt input): `url` the resource's URI, `filename` its listed name (else the URI's
 * last segment), `mime` its listed media type (else `text/plain`), `source.resource`
 * `{client_name: SERVER, uri}`. The name and type come from `ListMcpResources` (every page of
 * the server), so an unknown server (NOT_FOUND), a disabled one (FAILED_PRECONDITION) or one
 * that cannot start (UNAVAILABLE) fails here with the RPC's `ConnectError`, before anything is
 * sent. A URI the server does not list (one made from a template) is attached all the same.
 */
export async function resourceDraft(client: Ledger, ref: ResourceRef): Promise<PartInput> {
  let listed: McpResource | undefined;
  await eachResourcePage(client, ref.server, (page) => (listed = page.resources.find((r) => r.uri === ref.uri)) !== undefined);
  const filename = listed?.name || ref.uri.replace(/\/+$/, "").split("/").at(-1) || ref.uri;
  return create(PartInputSchema, {
    kind: {
      case: "file",
      value: {
        mime: listed?.mimeType || "text/plain",
        filename,
        url: ref.uri,
        source: { kind: { case: "resource", value: { clientName: ref.server, uri: ref.uri } } },
      },
    },
  });
}

/**
 * `ledger mcp`: every configured server (`ListMcpServers` with `connect`, so each enabled one is
 * started and shows connected or why not), one line each: `<name>  <type>  <status>` then its
 * counts (`12 tools, 7 resources, 2 resource templates`) or its error. With `json`, one
 * `McpServer` per line (proto JSON).
 */
export async function listServers(client: Ledger, json: boolean, print: (line: string) => void): Promise<void> {
  const { servers } = await client.listMcpServers({ connect: true });
  if (json) return servers.forEach((s) => print(toJsonString(McpServerSchema, s)));
  if (servers.length === 0) return print('no MCP servers are configured (add them under "mcp" in ledger.json)');
  const width = Math.max(...servers.map((s) => s.name.length));
  for (const s of servers) print(`${s.name.padEnd(width)}  ${TYPE[s.type] ?? "?"}  ${describeServer(s)}`);
}

/**
 * `ledger mcp SERVER`: every page of `ListMcpResources`, one line per resource (`<uri>  <name>
 * <mime>`), then `resource templates:` and one line per template; `no resources` when it lists
 * none. With `json`, one `McpResource` per line, then one `McpResourceTemplate` per line.
 */
export async function listResources(client: Ledger, server: string, json: boolean, print: (line: string) => void): Promise<void> {
  const resources: McpResource[] = [];
  const templates: McpResourceTemplate[] = [];
  await eachResourcePage(client, server, (page) => {
    resources.push(...page.resources);
    templates.push(...page.resourceTemplates);
  });
  if (json) {
    for (const r of resources) print(toJsonString(McpResourceSchema, r));
    for (const t of templates) print(toJsonString(McpResourceTemplateSchema, t));
    return;
  }
  if (resources.length === 0 && templates.length === 0) return print(`MCP server "${server}" lists no resources`);
  for (const r of resources) print(columns([r.uri, r.name, r.mimeType]));
  if (templates.length > 0) {
    print("resource templates:");
    for (const t of templates) print(`  ${columns([t.uriTemplate, t.name, t.mimeType])}`);
  }
}

/**
 * Calls `onPage` with each page of `ListMcpResources` for `server` (1000 entries a page), in
 * order, until the last page or until `onPage` returns true. Errors are the RPC's `ConnectError`.
 */
async function eachResourcePage(
  client: Ledger,
  server: string,
  onPage: (page: Awaited<ReturnType<Ledger["listMcpResources"]>>) => boolean | void,
): Promise<void> {
  let pageToken = "";
  do {
    const page = await client.listMcpResources({ server, pageSize: 1000, pageToken });
    if (onPage(page)) return;
    pageToken = page.nextPageToken;
  } while (pageToken);
}

const TYPE: Partial<Record<McpServerType, string>> = { [McpServerType.LOCAL]: "local", [McpServerType.REMOTE]: "remote" };

function describeServer(s: McpServer): string {
  switch (s.status) {
    case McpServerStatus.CONNECTED: {
      const counts = [
        s.toolCount !== undefined ? plural(s.toolCount, "tool") : undefined,
        s.resourceCount !== undefined ? plural(s.resourceCount, "resource") : undefined,
        s.resourceTemplateCount !== undefined ? plural(s.resourceTemplateCount, "resource template") : undefined,
      ].filter((c) => c !== undefined);
      return counts.length > 0 ? `connected  ${counts.join(", ")}` : "connected";
    }
    case McpServerStatus.DISABLED:
      return 'disabled ("enabled": false)';
    case McpServerStatus.FAILED:
      return `failed: ${s.error}`;
    case McpServerStatus.NEEDS_AUTH:
      return `needs auth: ${s.error}`;
    default:
      return "idle";
  }
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function columns(cells: string[]): string {
  return cells.filter((c) => c !== "").join("  ");
}
