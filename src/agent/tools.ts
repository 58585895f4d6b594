import { tool, type ToolSet } from "ai";
import { z } from "zod";
import type { PermissionRule } from "../../gen/ledger/v1/session_pb.js";
import { PermissionAction } from "../../gen/ledger/v1/session_pb.js";
import type { AgentInfo } from "../config/agents.js";
import { globTool } from "../tools/glob.js";
import { grepTool } from "../tools/grep.js";
import { listTool } from "../tools/list.js";
import { readTool } from "../tools/read-tool.js";
import type { ToolContext, ToolOutput } from "../tools/tool-context.js";

/** Runs a subagent for the task tool and returns its final text. */
export type TaskRunner = (
  input: { description: string; prompt: string; agent: string; model?: { providerId: string; modelId: string } },
  signal: AbortSignal,
) => Promise<ToolOutput>;

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
 * The model's tools (OpenCode `read`, `list`, `glob`, `grep`, `task`), each confined to the
 * session directory and roots. A call the agent may not make, or one that fails, becomes a tool
 * error the model sees (never a failed run). `task` is offered only with a `runTask` and to
 * agents that are not themselves subagents.
 */
export function createTools(options: {
  agent: AgentInfo;
  rules: PermissionRule[];
  context: ToolContext;
  subagents: string[];
  runTask?: TaskRunner;
}): ToolSet {
  const { agent, rules, context } = options;
  const guard =
    <I, O>(name: string, run: (input: I, signal: AbortSignal | undefined) => Promise<O>) =>
    async (input: I, call: { abortSignal?: AbortSignal }) => {
      if (!isAllowed(agent, rules, name)) throw new Error(`permission denied: the ${agent.name} agent may not use the ${name} tool`);
      return run(input, call.abortSignal ?? context.signal);
    };
  const ctx = (signal: AbortSignal | undefined): ToolContext => ({ ...context, signal });
  const tools: ToolSet = {
    read: tool({
      description:
        "Read a file (numbered lines, 2000 lines from `offset`) or list a directory. Images and PDFs are returned as attachments.",
      inputSchema: z.object({
        filePath: z.string().describe("Absolute path, or relative to the project directory"),
        offset: z.number().int().min(1).optional().describe("First line to read, 1-based"),
        limit: z.number().int().min(1).optional().describe("Number of lines to read (default 2000)"),
      }),
      execute: guard("read", (input, signal) => readTool(input, ctx(signal))),
    }),
    list: tool({
      description: "List a directory as a tree (common build and VCS folders are ignored).",
      inputSchema: z.object({
        path: z.string().optional().describe("Directory; default the project directory"),
        ignore: z.array(z.string()).optional(),
      }),
      execute: guard("list", (input, signal) => listTool({ path: input.path ?? ".", ignore: input.ignore }, ctx(signal))),
    }),
    glob: tool({
      description: "Find files by glob pattern (e.g. **/*.ts), newest first.",
      inputSchema: z.object({ pattern: z.string(), path: z.string().optional() }),
      execute: guard("glob", (input, signal) => globTool(input, ctx(signal))),
    }),
    grep: tool({
      description:
        "Search file contents with a regular expression (RE2/ripgrep syntax: no lookaround or backreferences); `include` filters files by glob.",
      inputSchema: z.object({ pattern: z.string(), path: z.string().optional(), include: z.string().optional() }),
      execute: guard("grep", (input, signal) => grepTool(input, ctx(signal))),
    }),
  };
  if (options.runTask && agent.mode !== "subagent" && options.subagents.length > 0) {
    const runTask = options.runTask;
    tools.task = tool({
      description: `Run a subagent on a focused task in a child session and get its final answer. Subagents: ${options.subagents.join(", ")}.`,
      inputSchema: z.object({
        description: z.string().describe("A short (3-5 words) description of the task"),
        prompt: z.string().describe("The task for the subagent"),
        subagent_type: z.enum(options.subagents as [string, ...string[]]),
      }),
      execute: guard("task", (input, signal) =>
        runTask(
          { description: input.description, prompt: input.prompt, agent: input.subagent_type },
          signal ?? new AbortController().signal,
        ),
      ),
    });
  }
  return tools;
}
