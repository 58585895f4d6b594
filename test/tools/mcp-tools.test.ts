import { describe, expect, it } from "vitest";
import { mcpToolId } from "../../src/mcp/reader.js";
import { mcpToolDefinitions, mcpToolOutput } from "../../src/tools/mcp-tools.js";

const tool = { server: "docs", name: "look-up" };

describe("mcpToolId", () => {
  it("joins server and tool with _ and replaces characters outside [a-zA-Z0-9_-] (OpenCode's naming)", () => {
    expect(mcpToolId("everything", "get-sum")).toBe("everything_get-sum");
    expect(mcpToolId("my server.v2", "files/read")).toBe("my_server_v2_files_read");
  });
});

describe("mcpToolDefinitions", () => {
  it("keeps the first of two tools whose ids collide", () => {
    const schema = { type: "object", properties: {} };
    const defs = mcpToolDefinitions(
      [
        { server: "a b", name: "x", id: "a_b_x", description: "first", inputSchema: schema },
        { server: "a_b", name: "x", id: "a_b_x", description: "second", inputSchema: schema },
      ],
      { callTool: async () => ({ content: [] }) },
      1000,
    );
    expect(defs.map((d) => [d.id, d.description])).toEqual([["a_b_x", "first"]]);
  });
});

describe("mcpToolOutput", () => {
  it("joins every item in order: text, an embedded text resource, binary items and links described", () => {
    const output = mcpToolOutput(
      tool,
      {
        content: [
          { type: "text", text: "found 2" },
          { type: "resource", resource: { uri: "docs://a", mimeType: "text/plain", text: "alpha" } },
          { type: "resource", resource: { uri: "docs://b.zip", mimeType: "application/zip", blob: "AAECAw==" } },
          { type: "image", data: "iVBORw==", mimeType: "image/png" },
          { type: "audio", data: "AAAA", mimeType: "audio/wav" },
          { type: "resource_link", uri: "docs://c", name: "c.md" },
        ],
      },
      10_000,
    );
    expect(output).toEqual({
      title: "look-up",
      output: [
        "found 2",
        "[Resource docs://a]\nalpha",
        "[Resource docs://b.zip: application/zip, 4 bytes, not shown]",
        "[Image: image/png, 4 bytes, not shown]",
        "[Audio: audio/wav, 3 bytes, not shown]",
        "[Resource link: c.md (docs://c)]",
      ].join("\n\n"),
      metadata: { server: "docs", tool: "look-up", truncated: false },
    });
  });

  it("gives structured content as JSON when there is no content", () => {
    expect(mcpToolOutput(tool, { content: [], structuredContent: { temperature: 21 } }, 1000).output).toBe('{"temperature":21}');
  });

  it("cuts the output to the limit and says so", () => {
    const result = mcpToolOutput(tool, { content: [{ type: "text", text: "x".repeat(5000) }] }, 200);
    expect(Buffer.byteLength(result.output)).toBeLessThanOrEqual(200);
    expect(result.output).toMatch(/^x+\n\n\[MCP tool output truncated: 5000 bytes, over limits.mcp_item_bytes \(200 bytes\)\]$/);
    expect(result.metadata).toEqual({ server: "docs", tool: "look-up", truncated: true });
  });

  it("throws the tool's own failure (isError) so the model sees it as the tool's error", () => {
    expect(() => mcpToolOutput(tool, { content: [{ type: "text", text: "no such page" }], isError: true }, 1000)).toThrow(
      new Error("no such page"),
    );
    expect(() => mcpToolOutput(tool, { content: [], isError: true }, 1000)).toThrow('the look-up tool of MCP server "docs" failed');
  });
});
