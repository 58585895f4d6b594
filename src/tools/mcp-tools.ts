import { jsonSchema } from "ai";
import { truncateText } from "../mcp/client.js";
import type { McpReader, McpTool, McpToolContent, McpToolResult } from "../mcp/reader.js";
import type { ToolDefinition, ToolOutput } from "./tool-context.js";

/** The input of an MCP tool: whatever JSON object its schema asks for. */
export type McpToolInput = Record<string, unknown>;

/**
 * The model tools of MCP servers (docs/configuration.md#mcp), one per tool of `tools`, with the
 * id OpenCode gives them (`<server>_<tool>`, sanitized; see `mcpToolId`), the server's
 * description and its input JSON Schema (as an object schema without other properties, as
 * OpenCode sends it). A second tool with an id already taken is left out. Each call goes to the
 * server through `mcp.callTool` with the call's abort signal (an abort cancels it on the server);
 * its result becomes a {@link ToolOutput} by {@link mcpToolOutput}, cut to `maxTextBytes`
 * (`limits.mcp_item_bytes`).
 * Permission rules name the tool by its id, weighed on the pattern `*` (by the registry).
 */
export function mcpToolDefinitions(
  tools: readonly McpTool[],
  mcp: Pick<McpReader, "callTool">,
  maxTextBytes: number,
): ToolDefinition<McpToolInput>[] {
  const seen = new Set<string>();
  return tools.flatMap((tool) => {
    if (seen.has(tool.id)) return [];
    seen.add(tool.id);
    const schema = { ...tool.inputSchema, type: "object", properties: tool.inputSchema.properties ?? {}, additionalProperties: false };
    return [
      {
        id: tool.id,
        description: tool.description,
        inputSchema: jsonSchema<McpToolInput>(schema),
        async execute(input, ctx) {
          const result = await mcp.callTool(tool.server, tool.name, input ?? {}, ctx.signal);
          return mcpToolOutput(tool, result, maxTextBytes);
        },
      },
    ];
  });
}

/**
 * A tool call's result as the tool part stores it: `output` is every content item in order,
 * separated by blank lines — text as it is, an embedded text resource as `[Resource <uri>]` and
 * its text, binary items as one line describing them (`[Image: image/png, 1234 bytes, not
 * shown]`; their bytes are neither stored nor sent to the model), a resource link as `[Resource
 * link: <name> (<uri>)]` — or, with no content, the structured content as JSON; cut to
 * `maxTextBytes` of UTF-8 (`limits.mcp_item_bytes`) with a notice naming that limit. `title` is the tool's name on its server; `metadata`
 * `{ server, tool, truncated }`. Throws an `Error` with that output when the tool reports a
 * failure (`isError`), which the model sees as the tool's error.
 */
export function mcpToolOutput(tool: Pick<McpTool, "server" | "name">, result: McpToolResult, maxTextBytes: number): ToolOutput {
  const items = (result.content ?? []).map(describe);
  if (items.length === 0 && result.structuredContent) items.push(JSON.stringify(result.structuredContent));
  const full = items.join("\n\n");
  const output = truncateText(full, maxTextBytes, "MCP tool output");
  if (result.isError) throw new Error(output || `the ${tool.name} tool of MCP server ${JSON.stringify(tool.server)} failed`);
  return { title: tool.name, output, metadata: { server: tool.server, tool: tool.name, truncated: output !== full } };
}

function describe(item: McpToolContent): string {
  if (item.type === "text" && "text" in item) return item.text;
  if ((item.type === "image" || item.type === "audio") && "data" in item)
    return `[${item.type === "image" ? "Image" : "Audio"}: ${item.mimeType}, ${base64Bytes(item.data)} bytes, not shown]`;
  if (item.type === "resource" && "resource" in item) {
    const r = item.resource;
    if (typeof r.text === "string") return `[Resource ${r.uri}]\n${r.text}`;
    return `[Resource ${r.uri}: ${r.mimeType ?? "binary"}, ${base64Bytes(r.blob ?? "")} bytes, not shown]`;
  }
  if (item.type === "resource_link" && "uri" in item) return `[Resource link: ${item.name} (${item.uri})]`;
  return `[${item.type} content, not shown]`;
}

/** The decoded size of base64 `data`, in bytes. */
function base64Bytes(data: string): number {
  const padding = data.endsWith("==") ? 2 : data.endsWith("=") ? 1 : 0;
  return Math.max(0, Math.floor((data.length * 3) / 4) - padding);
}
