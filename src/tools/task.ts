import { z } from "zod";
import type { ToolDefinition, ToolOutput } from "./tool-context.js";

/**
 * Runs a subagent for the task tool and returns its final text (implemented by the agent runner:
 * a child session, one loop, its last answer as `output`).
 *
 * @param input - what the model asked for; `agent` is the subagent's name, `model` an optional override.
 * @param signal - aborts the subagent's run.
 */
export type TaskRunner = (
  input: { description: string; prompt: string; agent: string; model?: { providerId: string; modelId: string } },
  signal: AbortSignal,
) => Promise<ToolOutput>;

/** Input of the `task` tool, as the model writes it. Follows OpenCode task.ts parameters. */
export interface TaskInput {
  /** A short (3-5 words) description of the task. */
  description: string;
  /** The task for the subagent. */
  prompt: string;
  /** Name of the subagent to run; one of the subagents the tool was made for. */
  subagent_type: string;
}

/**
 * The model's `task` tool for an agent that may start `subagents`: runs one of them on a focused
 * task in a child session through `runTask` and returns its final answer. Follows OpenCode
 * task.ts. The description lists the subagents and `subagent_type` must name one of them, so the
 * tool is made per agent loop (the registry offers it only when `subagents` is not empty, and
 * leaves out those the `task` permission denies by name). Each call first asks permission `task`
 * with the subagent's name as the pattern (`"task": {"*": "ask", "explore": "allow"}`), except for
 * a subagent the user named in the message being answered (`mentioned`: OpenCode's
 * `bypassAgentCheck`, which skips the check for any subagent once the message names one).
 *
 * @param subagents - names of the subagents the model may choose from (at least one).
 * @param runTask - starts the subagent; gets the call's abort signal, or a signal that never aborts.
 * @param mentioned - subagents the user named (agent parts): run without the permission check.
 * @returns the tool definition; `execute` throws the permission's denial or rejection (a tool
 *   error the model sees), else returns what `runTask` returns and throws what it throws.
 */
export function taskDefinition(subagents: string[], runTask: TaskRunner, mentioned: readonly string[] = []): ToolDefinition<TaskInput> {
  return {
    id: "task",
    asks: true,
    description: `Run a subagent on a focused task in a child session and get its final answer. Subagents: ${subagents.join(", ")}.`,
    inputSchema: z.object({
      description: z.string().describe("A short (3-5 words) description of the task"),
      prompt: z.string().describe("The task for the subagent"),
      subagent_type: z.enum(subagents as [string, ...string[]]),
    }),
    async execute(input, ctx) {
      if (!mentioned.includes(input.subagent_type))
        await ctx.ask?.({
          permission: "task",
          patterns: [input.subagent_type],
          metadata: { description: input.description, subagent_type: input.subagent_type },
        });
      return runTask(
        { description: input.description, prompt: input.prompt, agent: input.subagent_type },
        ctx.signal ?? new AbortController().signal,
      );
    },
  };
}
