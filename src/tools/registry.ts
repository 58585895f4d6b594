import { tool, type Tool, type ToolSet } from "ai";
import type { PermissionRule } from "../../gen/ledger/v1/session_pb.js";
import type { AgentInfo } from "../config/agents.js";
import { inSpan } from "../observe/spans.js";
import { bashDefinition } from "./bash.js";
import { editDefinition } from "./edit.js";
import { globDefinition } from "./glob.js";
import { grepDefinition } from "./grep.js";
import { listDefinition } from "./list.js";
import { checkPermission, disabledTools, evaluate, permissionRules, type Asker, type Rule } from "./permission.js";
import { readDefinition } from "./read.js";
import { taskDefinition, type TaskRunner } from "./task.js";
import { todoDefinitions, type TodoList } from "./todo.js";
import type { ToolAsk, ToolContext, ToolDefinition } from "./tool-context.js";
import { writeDefinition } from "./write.js";

/**
 * The tools offered to every agent, in the order the model sees them: `read`, `list`, `glob`,
 * `grep`, `write`, `edit`, `bash`. `task`, then `todowrite` and `todoread`, come after them when
 * offered (see {@link createTools}).
 * Follows OpenCode registry.ts `builtin`.
 */
export const BUILTIN_TOOLS: readonly ToolDefinition<unknown>[] = [
  readDefinition,
  listDefinition,
  globDefinition,
  grepDefinition,
  writeDefinition as ToolDefinition<unknown>,
  editDefinition as ToolDefinition<unknown>,
  bashDefinition as ToolDefinition<unknown>,
];

/** Reports a running call's progress (bash output so far) for its tool part. */
export type ProgressSink = (callId: string, update: { title?: string; metadata: Record<string, unknown> }) => void;

/**
 * The model's tools for one agent loop (OpenCode `read`, `list`, `glob`, `grep`, `write`,
 * `edit`, `bash`, `task`, `todowrite`, `todoread`), as an AI SDK tool set keyed by tool id, each confined to the session
 * directory and roots. A tool denied outright (its last rule: pattern `*`, `deny`) is not
 * offered; each call of the others is weighed against {@link permissionRules} — by the tool
 * itself with its own patterns (write/edit: the path relative to the session directory; bash:
 * the command; task: the subagent's name) through `ctx.ask`, by the registry with the pattern `*`
 * for the others. `deny` fails the call with `permission denied: the <agent> agent may not use
 * the <tool> tool` (plus ` on "<pattern>"` for a pattern other than `*`); `ask` pauses it through
 * `asker` (without one, `ask` is a denial). Those errors, like any a tool throws, become a tool
 * error the model sees (never a failed run). `task` is offered only with a `runTask`, to agents
 * that are not themselves subagents, and when some of `subagents` remain once those the `task`
 * permission denies by name are left out (OpenCode task.ts); a subagent the user named
 * (`mentioned`) stays, and its calls are not weighed (see `taskDefinition`), but a `task` denied
 * outright (`"task": "deny"`) is not offered, mentions or not (OpenCode drops it too); `todowrite` and
 * `todoread` only with a `todos` list (the session's, bound by the loop).
 *
 * @param options.agent - the agent answering; its name and `permission` map.
 * @param options.rules - the session's permission rules.
 * @param options.context - the session directory and roots; a call's abort signal, when the AI
 *   SDK gives one, replaces `context.signal`.
 * @param options.subagents - names of the subagents `task` may run.
 * @param options.mentioned - subagents the user named in the message being answered (agent parts).
 * @param options.runTask - runs a subagent (absent inside subagents).
 * @param options.todos - the session's todo list, for `todowrite` and `todoread`.
 * @param options.asker - pauses a call on an `ask` rule until the user answers.
 * @param options.progress - receives running calls' progress by call id.
 * @param options.beforeChange - awaited before a tool that may change files (write, edit, bash)
 *   runs: the step's snapshot is taken there.
 * @param options.withoutCommands - offer no `bash` tool (docs/security.md, "Per-tenant file roots").
 * @param options.mcpTools - the MCP servers' tools (`mcpToolDefinitions` in ./mcp-tools.ts),
 *   offered after the built-in ones and weighed like `read` (their id, the pattern `*`).
 */
export function createTools(options: {
  agent: AgentInfo;
  rules: PermissionRule[];
  context: ToolContext;
  subagents: string[];
  mentioned?: readonly string[];
  runTask?: TaskRunner;
  todos?: TodoList;
  asker?: Asker;
  progress?: ProgressSink;
  beforeChange?: () => Promise<void>;
  /** Leave out `bash` (a tenant's session without `tenants.<name>.commands`). */
  withoutCommands?: boolean;
  /** The MCP servers' tools, offered last. */
  mcpTools?: readonly ToolDefinition<unknown>[];
}): ToolSet {
  const { agent, context } = options;
  const rules = permissionRules(agent, options.rules);
  const definitions = BUILTIN_TOOLS.filter((d) => !(options.withoutCommands && d.id === "bash"));
  const mentioned = options.mentioned ?? [];
  const subagents = options.subagents.filter((name) => mentioned.includes(name) || evaluate(rules, "task", name) !== "deny");
  if (options.runTask && agent.mode !== "subagent" && subagents.length > 0) {
    definitions.push(taskDefinition(subagents, options.runTask, mentioned));
  }
  if (options.todos) definitions.push(...(todoDefinitions(options.todos) as ToolDefinition<unknown>[]));
  if (options.mcpTools) definitions.push(...options.mcpTools);
  // Tools denied outright are not offered (OpenCode drops them too): the model cannot spend a step on them.
  const disabled = disabledTools(
    rules,
    definitions.map((d) => d.id),
  );
  const tools: ToolSet = {};
  for (const definition of definitions)
    if (!disabled.has(definition.id)) tools[definition.id] = guarded(definition, agent.name, rules, context, options);
  return tools;
}

/**
 * The AI SDK tool for `definition`: checks the permission, then runs it with the call's abort
 * signal; while tracing runs, inside a span `ledger.tool` (`ledger.tool.name`,
 * `ledger.tool.call_id`; a failed call is recorded on it) (docs/operations.md#tracing).
 */
function guarded(
  definition: ToolDefinition<unknown>,
  agentName: string,
  rules: Rule[],
  context: ToolContext,
  options: { asker?: Asker; progress?: ProgressSink; beforeChange?: () => Promise<void> },
): Tool {
  const name = definition.id;
  return tool({
    description: definition.description,
    inputSchema: definition.inputSchema,
    execute: (input, call) =>
      inSpan("ledger.tool", { "ledger.tool.name": name, "ledger.tool.call_id": call.toolCallId }, async () => {
        const signal = call.abortSignal ?? context.signal ?? new AbortController().signal;
        const ask = (request: ToolAsk) => checkPermission(agentName, rules, { ...request, callId: call.toolCallId }, signal, options.asker);
        if (!definition.asks) await ask({ permission: name, patterns: ["*"], metadata: {} });
        if (definition.changesFiles) await options.beforeChange?.();
        return definition.execute(input, {
          ...context,
          signal: call.abortSignal ?? context.signal,
          ask,
          progress: options.progress && ((update) => options.progress!(call.toolCallId, update)),
        });
      }),
  });
}
