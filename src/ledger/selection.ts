import type { AgentInfo } from "../config/agents.js";
import type { LedgerConfig } from "../config/config.js";
import { AgentNotFoundError } from "../errors.js";

/** A model chosen for a turn, as provider/model ids. */
export interface ModelChoice {
  providerId: string;
  modelId: string;
}

/**
 * Resolves the agent of a prompt: `requested` or the configured default agent (`build`).
 * Hidden agents may be named but are not listed. Throws `AgentNotFoundError` (NOT_FOUND) with
 * the visible agents when the name is unknown. Follows OpenCode `SessionPrompt.prompt`
 * (`Agent.get(input.agent ?? Agent.defaultAgent())`), which answers 500 there instead.
 */
export function resolveAgent(config: LedgerConfig, requested: string | undefined): AgentInfo {
  const name = requested || config.defaultAgent;
  const agent = config.agents.get(name);
  if (agent) return agent;
  throw new AgentNotFoundError(name, visibleAgents(config));
}

/** Names of agents a client may see, in definition order. */
export function visibleAgents(config: LedgerConfig): string[] {
  return [...config.agents.values()].filter((a) => !a.hidden).map((a) => a.name);
}

/**
 * Resolves the model of a prompt (design.md §3): `requested` ?? the agent's model ?? the
 * session's current (last used) model ?? the configured default. Undefined when none is known
 * (no provider configured).
 */
export function resolveModel(
  config: LedgerConfig,
  agent: AgentInfo,
  requested: ModelChoice | undefined,
  sessionModel: ModelChoice | undefined,
): ModelChoice | undefined {
  const pick = requested ?? agent.model ?? sessionModel ?? config.model;
  return pick ? { providerId: pick.providerId, modelId: pick.modelId } : undefined;
}

/**
 * Resolves the variant (design.md §3): `requested` when set; else the agent's variant when the
 * chosen model is the agent's own model and that model (in config) defines the variant; else none.
 */
export function resolveVariant(
  config: LedgerConfig,
  agent: AgentInfo,
  model: ModelChoice | undefined,
  requested: string | undefined,
): string | undefined {
  if (requested) return requested;
  if (!agent.variant || !agent.model || !model) return undefined;
  if (!sameModel(agent.model, model)) return undefined;
  const variants = config.providers[model.providerId]?.models[model.modelId]?.variants ?? {};
  return agent.variant in variants ? agent.variant : undefined;
}

/** True when both name the same provider and model. */
export function sameModel(a: ModelChoice | undefined, b: ModelChoice | undefined): boolean {
  return a?.providerId === b?.providerId && a?.modelId === b?.modelId;
}
