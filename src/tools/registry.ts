import { tool, type Tool, type ToolSet } from "ai";
import type { PermissionRule } from "../../gen/ledger/v1/session_pb.js";
import { PermissionAction } from "../../gen/ledger/v1/session_pb.js";
import type { AgentInfo } from "../config/agents.js";
import { globDefinition } from "./glob.js";
import { grepDefinition } from "./grep.js";
import { listDefinition } from "./list.js";
import { readDefinition } from "./read.js";
import { taskDefinition, type TaskRunner } from "./task.js";
import type { ToolContext, ToolDefinition } from "./tool-context.js";

/**
 * The tools offered to every agent, in the order the model sees them: `read`, `list`, `glob`,
 * `grep`. `task` comes after them when offered (see {@link createTools}). Follows OpenCode
 * registry.ts `builtin` (the read-only tools of it).
 */
export const BUILTIN_TOOLS: readonly ToolDefinition<unknown>[] = [readDefinition, listDefinition, globDefinition, grepDefinition];

/**
 * Whether `agent` may use `toolName` in this session: the session's rules (from a prompt's
 * deprecated `tools` map) win over the agent's `permission` map; within each, the last matching
 * rule wins and `*` matches every tool. `ask` counts as deny: this service has no one to ask.
 */
export function isAllowed(agent: AgentInfo, sessionRules: PermissionRule[], toolName: string): boolean {
  const rule = sessionRules.filter((r) => r.permission === toolName || r.permission === "*").at(-1);
  if (rule) return rule.action === PermissionAction.ALLOW;
  return (agent.permission[toolName] ?? agent.permission["*"] ?? "allow") === "allow";
}

/**
 * The model's tools for one agent loop (OpenCode `read`, `list`, `glob`, `grep`, `task`), as an
 * AI SDK tool set keyed by tool id, each confined to the session directory and roots. Every tool
 * is offered; a call the agent may not make ({@link isAllowed}) fails with
 * `permission denied: the <agent> agent may not use the <tool> tool`, and that error, like any a
 * tool throws, becomes a tool error the model sees (never a failed run). `task` is offered only
 * with a `runTask`, to agents that are not themselves subagents, and when there are `subagents`.
 *
 * @param options.agent - the agent answering; its name and `permission` map.
 * @param options.rules - the session's permission rules.
 * @param options.context - the session directory and roots; a call's abort signal, when the AI
 *   SDK gives one, replaces `context.signal`.
 * @param options.subagents - names of the subagents `task` may run.
 * @param options.runTask - runs a subagent (absent inside subagents).
 */
export function createTools(options: {
  agent: AgentInfo;
  rules: PermissionRule[];
  context: ToolContext;
  subagents: string[];
  runTask?: TaskRunner;
}): ToolSet {
  const { agent, rules, context } = options;
  const definitions = [...BUILTIN_TOOLS];
  if (options.runTask && agent.mode !== "subagent" && options.subagents.length > 0) {
    definitions.push(taskDefinition(options.subagents, options.runTask));
  }
  const tools: ToolSet = {};
  for (const definition of definitions) tools[definition.id] = guarded(definition, agent, rules, context);
  return tools;
}

/** The AI SDK tool for `definition`: checks the permission, then runs it with the call's abort signal. */
function guarded(definition: ToolDefinition<unknown>, agent: AgentInfo, rules: PermissionRule[], context: ToolContext): Tool {
  const name = definition.id;
  return tool({
    description: definition.description,
    inputSchema: definition.inputSchema,
    execute: async (input, call) => {
      if (!isAllowed(agent, rules, name)) throw new Error(`permission denied: the ${agent.name} agent may not use the ${name} tool`);
      return definition.execute(input, { ...context, signal: call.abortSignal ?? context.signal });
    },
  });
}
