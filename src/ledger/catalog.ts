import type { LedgerConfig } from "../config/config.js";

/** One listed agent (the `ledger.v1.Agent` fields). */
export interface AgentListing {
  name: string;
  description: string;
  mode: string;
  hidden: boolean;
  model?: { providerId: string; modelId: string };
  variant?: string;
  builtIn: boolean;
}

/** One listed model (the `ledger.v1.Model` fields). */
export interface ModelListing {
  providerId: string;
  modelId: string;
  name: string;
  variants: string[];
  inputModalities: string[];
}

/** The visible (not hidden) agents in definition order, and the default agent's name. */
export function listAgents(config: LedgerConfig): { agents: AgentListing[]; defaultAgent: string } {
  const agents = [...config.agents.values()]
    .filter((a) => !a.hidden)
    .map((a) => ({
      name: a.name,
      description: a.description,
      mode: a.mode,
      hidden: a.hidden,
      model: a.model,
      variant: a.variant,
      builtIn: a.builtIn,
    }));
  return { agents, defaultAgent: config.defaultAgent };
}

/** Every configured model (provider order, then model order) and the default model. */
export function listModels(config: LedgerConfig): { models: ModelListing[]; defaultModel?: { providerId: string; modelId: string } } {
  const models = Object.entries(config.providers).flatMap(([providerId, provider]) =>
    Object.entries(provider.models).map(([modelId, model]) => ({
      providerId,
      modelId,
      name: model.name ?? modelId,
      variants: Object.keys(model.variants),
      inputModalities: model.modalities?.input ?? ["text"],
    })),
  );
  return { models, defaultModel: config.model };
}
