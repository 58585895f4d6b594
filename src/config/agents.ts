/**
 * Built-in agents (docs/design.md §8), as in OpenCode `agent/agent.ts`: `build` (the default, all
 * tools), `plan` (read-only: edits and shell denied; the todo tools allowed, as in OpenCode), and
 * the subagents `general` and `explore` (the todo tools denied: OpenCode's `general` denies
 * `todowrite`/`todoread`, its `explore` allows only search and read tools).
 * Config `agent.<name>` entries override fields of these or add new agents.
 */

import { AgentNotFoundError, InvalidArgumentError } from "../errors.js";

/** A permission decision for one tool (or `*`). */
export type PermissionAction = "allow" | "deny" | "ask";

/**
 * An agent's permission for one tool: one action, or an action per pattern (a file path relative
 * to the session directory, a bash command), the last matching pattern winning
 * (`{"git status*": "allow", "*": "ask"}`). See `agentRules` in src/tools/permission.ts.
 */
export type PermissionSetting = PermissionAction | Record<string, PermissionAction>;

/**
 * One permission rule: `action` for calls of the tool `permission` whose pattern (a file path
 * relative to the session directory, a bash command, ...) matches `pattern`. Both are wildcards
 * where `*` matches any characters, `/` and spaces included (case sensitive). Follows OpenCode
 * `Permission.Rule`.
 */
export interface AgentRule {
  permission: string;
  pattern: string;
  action: PermissionAction;
}

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
  /** The agent's default variant (applies only with its own model; docs/design.md §3). */
  variant?: string;
  /** System prompt of the agent. */
  prompt?: string;
  /**
   * Tool name (or `*`) → decision, or pattern → decision. `*` is weighed first, then later entries
   * win. For an agent built from config, the agent's own layer merged over the built-in one (for
   * reading); what is weighed is `rules`.
   */
  permission: Record<string, PermissionSetting>;
  /**
   * The rules weighed for this agent, in order (the last match wins): the built-in agent's, then
   * the top-level `tools` and `permission`, then the agent's own `tools` and `permission` (OpenCode
   * `Permission.merge(defaults, agent, user, agentConfig)`). Set by the config loader; when absent
   * (an agent built by hand), `permission` alone is weighed.
   */
  rules?: AgentRule[];
  /** Maximum model steps per run (`steps`, or OpenCode's older `maxSteps`). */
  steps?: number;
  /** Sampling temperature sent with each model call (`temperature`); the provider's default when absent. */
  temperature?: number;
  /** Nucleus sampling sent with each model call (`top_p`); the provider's default when absent. */
  topP?: number;
  /**
   * Provider options of this agent's model calls (`options`), laid over the model's `options` and
   * under the variant's (OpenCode merges model, agent, variant options in that order).
   */
  options?: Record<string, unknown>;
  builtIn: boolean;
}

/** The agents every ledger has, before config overrides. */
export const BUILT_IN_AGENTS: readonly AgentInfo[] = [
  {
    name: "build",
    description:
      "The default agent: every tool (read, list, glob, grep, write, edit, bash, task, todowrite, todoread) unless the permission config says otherwise.",
    mode: "primary",
    hidden: false,
    permission: { "*": "allow" },
    builtIn: true,
  },
  {
    name: "plan",
    description: "Read-only agent for analysis and planning: edits and shell commands are denied unless the permission config allows them.",
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
    permission: { "*": "allow", todowrite: "deny", todoread: "deny" },
    builtIn: true,
  },
  {
    name: "explore",
    description: "Fast read-only subagent for finding files and code.",
    mode: "subagent",
    hidden: false,
    permission: { "*": "allow", edit: "deny", write: "deny", patch: "deny", bash: "deny", todowrite: "deny", todoread: "deny" },
    builtIn: true,
  },
];

/** Names of the agents a client may see (not `hidden`), in definition order. */
export function visibleAgentNames(agents: ReadonlyMap<string, AgentInfo>): string[] {
  return [...agents.values()].filter((a) => !a.hidden).map((a) => a.name);
}

/**
 * The agent a prompt delegates to by name: an agent mention (`AgentPartInput.name`) or a
 * subtask's `agent`. It must be configured (hidden ones may be named) and able to run as a
 * subagent (`mode` `subagent` or `all`). `field` is the request field holding the name
 * (`parts[1].agent.name`, `parts[0].subtask.agent`, `command.agent`).
 * Throws `AgentNotFoundError` (NOT_FOUND, the visible agents in `available`) for an unknown
 * name, `InvalidArgumentError` (INVALID_ARGUMENT on `field`) for a primary-only agent.
 */
export function requireSubagent(agents: ReadonlyMap<string, AgentInfo>, name: string, field: string): AgentInfo {
  const agent = agents.get(name);
  if (!agent) throw new AgentNotFoundError(name, visibleAgentNames(agents), field);
  if (agent.mode === "primary") {
    const subagents = [...agents.values()].filter((a) => a.mode !== "primary" && !a.hidden).map((a) => a.name);
    throw new InvalidArgumentError(
      field,
      `agent "${name}" is a primary agent, not a subagent; delegate to one of: ${subagents.join(", ") || "(no subagents configured)"}`,
    );
  }
  return agent;
}
