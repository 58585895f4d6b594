import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { mcpToolId, type McpResourceInfo, type McpResourceListing, type McpResourceTemplateInfo, type McpTool } from "./reader.js";

// How a connected server's tools and resources are listed: every page of the MCP list requests
// (cursors), up to a bound on the pages, mapped to the reader's shapes.

/** Most pages of `tools/list` read from one server (a server paging forever lists the first ones only). */
export const MAX_TOOL_PAGES = 50;
/** Most pages of `resources/list` (and of `resources/templates/list`) read from one server. */
export const MAX_RESOURCE_PAGES = 50;

/** Each request's abort signal and timeout (ms). */
type Options = { signal?: AbortSignal; timeout: number };

/**
 * Every tool of server `name` (`tools/list`, at most {@link MAX_TOOL_PAGES} pages), named
 * `<name>_<tool>`; none when the server does not declare the `tools` capability (asking would
 * fail). Errors: the SDK's (an `McpError` for the server's error or a timeout).
 */
export async function listAllTools(client: Client, name: string, options: Options): Promise<McpTool[]> {
  if (!client.getServerCapabilities()?.tools) return [];
  return allPages(MAX_TOOL_PAGES, async (cursor) => {
    const result = await client.listTools(cursor ? { cursor } : {}, options);
    const items = result.tools.map((t): McpTool => ({
      server: name,
      name: t.name,
      id: mcpToolId(name, t.name),
      description: t.description ?? "",
      inputSchema: t.inputSchema as Record<string, unknown>,
    }));
    return { items, nextCursor: result.nextCursor };
  });
}

/**
 * Every resource (`resources/list`), then every resource template (`resources/templates/list`),
 * at most {@link MAX_RESOURCE_PAGES} pages of each; none when the server does not declare the
 * `resources` capability. Errors: as {@link listAllTools}.
 */
export async function listAllResources(client: Client, options: Options): Promise<McpResourceListing> {
  if (!client.getServerCapabilities()?.resources) return { resources: [], templates: [] };
  const resources = await allPages(MAX_RESOURCE_PAGES, async (cursor) => {
    const result = await client.listResources(cursor ? { cursor } : {}, options);
    const items = result.resources.map((r): McpResourceInfo => ({
      uri: r.uri,
      name: r.name,
      ...described(r),
      ...(typeof r.size === "number" ? { size: r.size } : {}),
    }));
    return { items, nextCursor: result.nextCursor };
  });
  const templates = await allPages(MAX_RESOURCE_PAGES, async (cursor) => {
    const result = await client.listResourceTemplates(cursor ? { cursor } : {}, options);
    const items = result.resourceTemplates.map((t): McpResourceTemplateInfo => ({
      uriTemplate: t.uriTemplate,
      name: t.name,
      ...described(t),
    }));
    return { items, nextCursor: result.nextCursor };
  });
  return { resources, templates };
}

/**
 * The items of every page `page` gives from a cursor (the first page without one), until a page
 * has no next cursor, at most `maxPages` pages (a server paging forever gives its first ones).
 */
async function allPages<T>(
  maxPages: number,
  page: (cursor: string | undefined) => Promise<{ items: T[]; nextCursor?: string }>,
): Promise<T[]> {
  const items: T[] = [];
  let cursor: string | undefined;
  for (let n = 0; n < maxPages; n++) {
    const result = await page(cursor);
    items.push(...result.items);
    cursor = result.nextCursor;
    if (!cursor) break;
  }
  return items;
}

/** The optional descriptive fields of a listed resource or template, those the server gave. */
function described(entry: { title?: string; description?: string; mimeType?: string }): {
  title?: string;
  description?: string;
  mimeType?: string;
} {
  return {
    ...(entry.title ? { title: entry.title } : {}),
    ...(entry.description ? { description: entry.description } : {}),
    ...(entry.mimeType ? { mimeType: entry.mimeType } : {}),
  };
}
