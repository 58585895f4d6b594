import { create } from "@bufbuild/protobuf";
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
import type { McpResourceInfo, McpResourceTemplateInfo, McpServerInfo } from "../mcp/reader.js";

const STATUS: Record<McpServerInfo["status"]["status"], McpServerStatus> = {
  idle: McpServerStatus.IDLE,
  connected: McpServerStatus.CONNECTED,
  disabled: McpServerStatus.DISABLED,
  failed: McpServerStatus.FAILED,
  needs_auth: McpServerStatus.NEEDS_AUTH,
};

/** A server of `ListMcpServers` as its `ledger.v1.McpServer` message (`error` empty unless failed or needing auth). */
export function mcpServerMessage(info: McpServerInfo): McpServer {
  return create(McpServerSchema, {
    name: info.name,
    type: info.type === "remote" ? McpServerType.REMOTE : McpServerType.LOCAL,
    status: STATUS[info.status.status],
    error: "error" in info.status ? info.status.error : "",
    toolCount: info.toolCount,
    resourceCount: info.resourceCount,
    resourceTemplateCount: info.resourceTemplateCount,
  });
}

/** A listed resource as its `ledger.v1.McpResource` message (absent texts empty, `size` only when given). */
export function mcpResourceMessage(info: McpResourceInfo): McpResource {
  return create(McpResourceSchema, { ...info, size: info.size === undefined ? undefined : BigInt(info.size) });
}

/** A listed resource template as its `ledger.v1.McpResourceTemplate` message. */
export function mcpResourceTemplateMessage(info: McpResourceTemplateInfo): McpResourceTemplate {
  return create(McpResourceTemplateSchema, info);
}
