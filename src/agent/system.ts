import type { AgentInfo } from "../config/agents.js";
import { agentRules, evaluate } from "../tools/permission.js";

/**
 * The system prompt of a step: the agent's own prompt (or the default one), where the agent
 * works, then the instruction sections (`instructionSections` in ./instructions.ts: AGENTS.md,
 * the global file, `instructions`), then the user message's extra `system` text; blocks
 * separated by a blank line. Without instructions nor extra, the agent's prompt alone.
 */
export function systemPrompt(agent: AgentInfo, directory: string, extra: string | undefined, instructions: string[] = []): string {
  const base =
    agent.prompt ??
    [
      `You are ${agent.name}, a coding agent working in the project directory ${directory}.`,
      "Use the tools to read, list, glob and grep files before you answer; cite file paths.",
      evaluate(agentRules(agent), "edit", "*") === "deny" ? "You are read-only: do not propose to change files yourself." : "",
      "Answer concisely.",
    ]
      .filter(Boolean)
      .join("\n");
  return [base, ...instructions, ...(extra ? [extra] : [])].join("\n\n");
}
