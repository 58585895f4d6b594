/**
 * Built-in agents (design.md §8), as in OpenCode `agent/agent.ts`: `build` (the default, all
 * tools), `plan` (read-only: edits and shell denied), and the subagents `general` and `explore`.
 * Config `agent.<name>` entries override fields of these or add new agents.
 */

/** A permission decision for one tool (or `*`). */
export type PermissionAction = "allow" | "deny" | "ask";

/** One agent as the ledger sees it after config is merged. */
export interface AgentInfo {
  name: string;
  description: string;
  /** `primary` agents answer prompts; `subagent`s run through the task tool; `all` both. */
  mode: "primary" | "subagent" | "all";
  /** Hidden agents exist but are not listed. */
  hidden: boolean;
  /** The agent's own model as "provider/model", when it has one. */
  model?: { providerId: string; modelId: string };
  /** The agent's default variant (applies only with its own model; design.md §3). */
  variant?: string;
  /** System prompt of the agent. */
  prompt?: string;
  /** Tool name (or `*`) → decision. Later rules win. */
  permission: Record<string, PermissionAction>;
  /** Maximum model steps per run. */
  steps?: number;
  builtIn: boolean;
}

/** The agents every ledger has, before config overrides. */
export const BUILT_IN_AGENTS: readonly AgentInfo[] = [
  {
    name: "build",
    description: "The default agent: every tool allowed (read, list, glob, grep, task; no editing tools yet).",
    mode: "primary",
    hidden: false,
    permission: { "*": "allow" },
    builtIn: true,
  },
  {
    name: "plan",
    description: "Read-only agent for analysis and planning; edits and shell commands are denied.",
    mode: "primary",
    hidden: false,
    permission: { "*": "allow", edit: "deny", write: "deny", patch: "deny", bash: "deny" },
    builtIn: true,
  },
  {
    name: "general",
    description: "General-purpose subagent for multi-step research tasks.",
    mode: "subagent",
    hidden: false,
    permission: { "*": "allow" },
    builtIn: true,
  },
  {
    name: "explore",
    description: "Fast read-only subagent for finding files and code.",
    mode: "subagent",
    hidden: false,
    permission: { "*": "allow", edit: "deny", write: "deny", patch: "deny", bash: "deny" },
    builtIn: true,
  },
];
