import type { ServiceImpl } from "@connectrpc/connect";
import type { SessionService } from "../../gen/ledger/v1/service_pb.js";
import type { Scope } from "../ledger/principal.js";

/**
 * What an RPC of `ledger.v1.SessionService` needs (docs/security.md, "Scopes"): the scope a
 * caller's token must grant, and what it touches — `session` (it names one by `session_id`),
 * `list` (it lists sessions or what they hold), `create` (it makes a new session) or `catalog`
 * (agents, models and MCP servers: no session's data).
 */
export interface AccessRule {
  scope: Scope;
  resource: "session" | "list" | "create" | "catalog";
}

const read = (resource: AccessRule["resource"]): AccessRule => ({ scope: "ledger:read", resource });
const write = (resource: AccessRule["resource"]): AccessRule => ({ scope: "ledger:write", resource });

/**
 * The rule of every SessionService method, by its local name. Typed as a record over the service's
 * methods, so a new RPC does not compile without one; test/server/access.test.ts checks it
 * against the service descriptor too.
 */
export const SESSION_SERVICE_ACCESS: Readonly<Record<keyof ServiceImpl<typeof SessionService>, AccessRule>> = {
  createSession: write("create"),
  getSession: read("session"),
  listSessions: read("list"),
  updateSession: write("session"),
  deleteSession: write("session"),
  forkSession: write("session"),
  prompt: write("session"),
  promptStream: write("session"),
  promptAsync: write("session"),
  listMessages: read("session"),
  getMessage: read("session"),
  watchSession: read("session"),
  abort: write("session"),
  listAgents: read("catalog"),
  listModels: read("catalog"),
  resumeSession: write("session"),
  revert: write("session"),
  unrevert: write("session"),
  deleteMessage: write("session"),
  deletePart: write("session"),
  updatePart: write("session"),
  listChildren: read("session"),
  getStatus: read("list"),
  command: write("session"),
  listPermissions: read("session"),
  replyPermission: write("session"),
  getDiff: read("session"),
  shell: write("session"),
  getTodo: read("session"),
  summarize: write("session"),
  // Discovery starts servers on demand (as a prompt's resource read does) but reads no session.
  listMcpServers: read("catalog"),
  listMcpResources: read("catalog"),
};
