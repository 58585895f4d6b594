import { visibleAgentNames, type AgentInfo } from "../config/agents.js";
import { modelRefProblem, type LedgerConfig } from "../config/config.js";
import { AgentNotFoundError, InvalidArgumentError } from "../errors.js";

/** A model chosen for a turn, as provider/model ids. */
export interface ModelChoice {
  providerId: string;
  modelId: string;
}

/**
 * Resolves the agent of a prompt: `requested` (the prompt's `agent`), else `sessionAgent` (the
 * session keeps its agent: the one given to CreateSession or named by the latest prompt that
 * named one), else the configured default agent (`build`). Hidden agents may be named but are
 * not listed. A deliberate difference from OpenCode `SessionPrompt.prompt`
 * (`Agent.get(input.agent ?? Agent.defaultAgent())`), where a prompt without an agent runs the
 * default, so a session made for `plan` (read-only) would quietly become `build` (all tools).
 * Throws `AgentNotFoundError` (NOT_FOUND, the visible agents in `available`) when the name is
 * unknown: on `agent` for a requested one, on `session.agent` for a session agent that is no
 * longer configured (never replaced silently by the default). OpenCode answers 500 there.
 */
export function resolveAgent(config: LedgerConfig, requested: string | undefined, sessionAgent?: string): AgentInfo {
  const name = requested || sessionAgent || config.defaultAgent;
  const agent = config.agents.get(name);
  if (agent) return agent;
  throw new AgentNotFoundError(name, visibleAgents(config), !requested && sessionAgent ? "session.agent" : "agent");
}

/** Names of agents a client may see, in definition order. */
export function visibleAgents(config: LedgerConfig): string[] {
  return visibleAgentNames(config.agents);
}

/**
 * Resolves the model of a prompt (docs/design.md §3; OpenCode `input.model ?? agent.model ??
 * lastModel(session)`): `requested` ?? the agent's model ?? the session's current (last used)
 * model, when it is configured ?? the configured default (`model`, else the first configured
 * model). Undefined when none is known (no provider configured).
 *
 * A session's last model that is not configured (`isConfiguredModel`: e.g. an unknown model a
 * client asked for, which ended in `model_not_found`, or one removed from `ledger.json`) is
 * skipped, so the session does not stay stuck on it. A requested or agent model is kept even
 * when unknown: the loop then answers with a `model_not_found` error naming the configured models.
 *
 * Throws `InvalidArgumentError` (INVALID_ARGUMENT) on `model.provider_id` / `model.model_id`
 * when `requested` is malformed (see `checkModelRef`); callers run this before storing anything.
 */
export function resolveModel(
  config: LedgerConfig,
  agent: AgentInfo,
  requested: ModelChoice | undefined,
  sessionModel: ModelChoice | undefined,
): ModelChoice | undefined {
  if (requested) checkModelRef(requested);
  const lastModel = sessionModel && isConfiguredModel(config, sessionModel) ? sessionModel : undefined;
  const pick = requested ?? agent.model ?? lastModel ?? config.model;
  return pick ? { providerId: pick.providerId, modelId: pick.modelId } : undefined;
}

/**
 * Checks that a model reference from a request is well formed (`modelRefProblem`): a non-blank
 * provider id without `/` and a non-blank model id. `field` is the request field holding it
 * (default `model`). Throws `InvalidArgumentError` (INVALID_ARGUMENT, `BadRequest` on
 * `<field>.provider_id` or `<field>.model_id`) otherwise. Does not check that it is configured.
 */
export function checkModelRef(ref: ModelChoice, field = "model"): void {
  const problem = modelRefProblem(ref);
  if (problem) throw new InvalidArgumentError(`${field}.${problem.part}`, problem.description);
}

/** True when `ledger.json` lists the model under its provider (`provider.<id>.models.<id>`), i.e. the loop can resolve it. */
export function isConfiguredModel(config: Pick<LedgerConfig, "providers">, ref: ModelChoice): boolean {
  const provider = Object.hasOwn(config.providers, ref.providerId) ? config.providers[ref.providerId] : undefined;
  return provider !== undefined && Object.hasOwn(provider.models, ref.modelId);
}

/**
 * Resolves the variant (docs/design.md §3): `requested` when set; else the agent's variant when the
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
