import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { AgentSchema, ModelSchema } from "../../gen/ledger/v1/model_pb.js";
import { PartSchema } from "../../gen/ledger/v1/part_pb.js";
import {
  PromptRequestSchema,
  PromptStreamResponseSchema,
  ResumeSessionResponseSchema,
  WatchSessionResponseSchema,
  type PromptAsyncRequest,
  type PromptRequest,
  type PromptStreamRequest,
  type SessionService,
} from "../../gen/ledger/v1/service_pb.js";
import { listAgents, listModels } from "../ledger/catalog.js";
import { runCommand } from "../ledger/command.js";
import type { LedgerDeps } from "../ledger/deps.js";
import { getMessage, listMessages } from "../ledger/messages.js";
import { prompt, promptAsync, promptStream } from "../ledger/prompt.js";
import { abortSession, resumeSession } from "../ledger/resume.js";
import { deleteMessage, deletePart, updatePart } from "../ledger/edits.js";
import { revertSession, unrevertSession } from "../ledger/revert.js";
import { getStatus } from "../ledger/status.js";
import { getDiff } from "../ledger/diff.js";
import { listPermissions, replyPermission } from "../ledger/permissions.js";
import { runShell } from "../ledger/shell.js";
import { getTodos } from "../ledger/todo.js";
import { summarizeSession } from "../ledger/summarize.js";
import { watchSession } from "../ledger/watch.js";
import * as sessions from "../ledger/sessions.js";
import { filterVisible, ownershipFor, policyOf, visibilityFor } from "../ledger/access.js";
import { listMcpResources, listMcpServers } from "../ledger/mcp.js";
import { principalKey } from "./auth.js";
import { eventResponse } from "./shared-frames.js";
import { mcpResourceMessage, mcpResourceTemplateMessage, mcpServerMessage } from "./mcp-messages.js";

/**
 * The `ledger.v1.SessionService` implementation: thin adapters that decode a request, make one
 * domain call and encode the answer. Domain errors are mapped to codes by `errorInterceptor`.
 * The caller (`principalKey`) decides whose sessions are created, listed and counted; the access
 * check of the methods on one session wraps these handlers (`guardSessionService`).
 *
 * ```ts
 * router.service(SessionService, createLedgerHandlers(deps));
 * ```
 */
export function createLedgerHandlers(deps: LedgerDeps): ServiceImpl<typeof SessionService> {
  return {
    async createSession(req, ctx) {
      return { session: await sessions.createSession(deps, req, ownershipFor(ctx.values.get(principalKey))) };
    },
    async getSession(req) {
      return { session: await sessions.getSession(deps, req.sessionId) };
    },
    async listSessions(req, ctx) {
      return sessions.listSessions(deps, req, visibilityFor(ctx.values.get(principalKey), policyOf(deps)));
    },
    async updateSession(req) {
      return { session: await sessions.updateSession(deps, req.sessionId, { title: req.title }) };
    },
    async deleteSession(req) {
      await sessions.deleteSession(deps, req.sessionId);
      return {};
    },
    async forkSession(req) {
      return { session: await sessions.forkSession(deps, req.sessionId, req.messageId) };
    },
    async prompt(req, ctx) {
      return { message: await prompt(deps, req, ctx.signal) };
    },
    async *promptStream(req, ctx) {
      for await (const event of promptStream(deps, asPromptRequest(req), ctx.signal))
        yield eventResponse(ctx, PromptStreamResponseSchema, event);
    },
    async command(req, ctx) {
      return { message: await runCommand(deps, req, ctx.signal) };
    },
    async promptAsync(req, ctx) {
      return { message: await promptAsync(deps, asPromptRequest(req), ctx.signal) };
    },
    async listMessages(req) {
      return listMessages(deps, req.sessionId, req);
    },
    async getMessage(req) {
      return { message: await getMessage(deps, req.sessionId, req.messageId) };
    },
    async *watchSession(req, ctx) {
      for await (const event of watchSession(deps, req.sessionId, req.afterSeq, ctx.signal))
        yield eventResponse(ctx, WatchSessionResponseSchema, event);
    },
    async *resumeSession(req, ctx) {
      for await (const event of resumeSession(deps, req.sessionId, ctx.signal))
        yield eventResponse(ctx, ResumeSessionResponseSchema, event);
    },
    async abort(req) {
      return { aborted: await abortSession(deps, req.sessionId) };
    },
    async revert(req) {
      return { session: await revertSession(deps, req.sessionId, req.messageId, req.partId) };
    },
    async unrevert(req) {
      return { session: await unrevertSession(deps, req.sessionId) };
    },
    async deleteMessage(req) {
      await deleteMessage(deps, req.sessionId, req.messageId);
      return {};
    },
    async deletePart(req) {
      await deletePart(deps, req.sessionId, req.messageId, req.partId);
      return {};
    },
    async updatePart(req) {
      return { part: await updatePart(deps, req.sessionId, req.messageId, req.part ?? create(PartSchema)) };
    },
    async listChildren(req) {
      return { sessions: await sessions.listChildren(deps, req.sessionId) };
    },
    async getStatus(_req, ctx) {
      const statuses = await filterVisible(deps, ctx.values.get(principalKey), new Map(Object.entries(await getStatus(deps))));
      return { statuses: Object.fromEntries(statuses) };
    },
    async listAgents() {
      const { agents, defaultAgent } = listAgents(deps.config);
      return { agents: agents.map((a) => create(AgentSchema, a)), defaultAgent };
    },
    async listModels() {
      const { models, defaultModel } = listModels(deps.config);
      return { models: models.map((m) => create(ModelSchema, m)), defaultModel };
    },
    async listPermissions(req) {
      return { permissions: await listPermissions(deps, req.sessionId) };
    },
    async replyPermission(req) {
      await replyPermission(deps, req.sessionId, req.permissionId, req.reply, req.message);
      return {};
    },
    async getDiff(req) {
      return { diffs: await getDiff(deps, req.sessionId, req.messageId) };
    },
    async shell(req, ctx) {
      return { message: await runShell(deps, req, ctx.signal) };
    },
    async getTodo(req) {
      return { todos: await getTodos(deps, req.sessionId) };
    },
    async summarize(req, ctx) {
      return { message: await summarizeSession(deps, req, ctx.signal) };
    },
    async listMcpServers(req, ctx) {
      const servers = await listMcpServers(deps, ctx.values.get(principalKey), { connect: req.connect }, ctx.signal);
      return { servers: servers.map(mcpServerMessage) };
    },
    async listMcpResources(req, ctx) {
      const page = await listMcpResources(deps, ctx.values.get(principalKey), req, ctx.signal);
      return {
        resources: page.resources.map(mcpResourceMessage),
        resourceTemplates: page.templates.map(mcpResourceTemplateMessage),
        nextPageToken: page.nextPageToken,
      };
    },
  };
}

/** PromptStreamRequest and PromptAsyncRequest carry PromptRequest's fields, number for number. */
function asPromptRequest(req: PromptStreamRequest | PromptAsyncRequest): PromptRequest {
  const { $typeName: _, ...fields } = req;
  return create(PromptRequestSchema, fields);
}
