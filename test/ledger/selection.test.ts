import { describe, expect, it } from "vitest";
import { buildConfig, configFileSchema } from "../../src/config/config.js";
import { AgentNotFoundError } from "../../src/errors.js";
import { resolveAgent, resolveModel, resolveVariant } from "../../src/ledger/selection.js";

// design.md §3: model = input ?? agent's model ?? session's last model ?? config default;
// variant = input, else the agent's variant when the chosen model is the agent's own model and
// that model defines the variant, else none.
const config = buildConfig(
  configFileSchema.parse({
    model: "cfg/default",
    provider: {
      cfg: { models: { default: {} } },
      agentp: { models: { own: { variants: { high: { reasoningEffort: "high" } } } } },
      other: { models: { m: {} } },
    },
    agent: {
      thinker: { model: "agentp/own", variant: "high" },
      wrongvariant: { model: "agentp/own", variant: "ultra" },
      hidden1: { hidden: true },
    },
  }),
  undefined,
  "/",
);
const ref = (s: string) => ({ providerId: s.split("/")[0]!, modelId: s.split("/")[1]! });
const show = (m: { providerId: string; modelId: string } | undefined) => (m ? `${m.providerId}/${m.modelId}` : undefined);

describe("agent, model and variant precedence", () => {
  const cases: Array<{ name: string; agent?: string; input?: string; session?: string; variant?: string; model: string; wantVariant?: string }> = [
    { name: "config default when nothing else", model: "cfg/default" },
    { name: "session's last model over config", session: "other/m", model: "other/m" },
    { name: "agent's model over session", agent: "thinker", session: "other/m", model: "agentp/own", wantVariant: "high" },
    { name: "input model over agent's", agent: "thinker", input: "other/m", model: "other/m" },
    { name: "input variant always wins", agent: "thinker", input: "other/m", variant: "low", model: "other/m", wantVariant: "low" },
    { name: "agent variant only with its own model", agent: "thinker", input: "agentp/own", model: "agentp/own", wantVariant: "high" },
    { name: "agent variant dropped when the model lacks it", agent: "wrongvariant", model: "agentp/own" },
    { name: "build has no model or variant", agent: "build", session: "other/m", model: "other/m" },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const agent = resolveAgent(config, c.agent);
      const model = resolveModel(config, agent, c.input ? ref(c.input) : undefined, c.session ? ref(c.session) : undefined);
      expect(show(model)).toBe(c.model);
      expect(resolveVariant(config, agent, model, c.variant)).toBe(c.wantVariant);
    });
  }

  it("defaults to build and refuses unknown agents listing only visible ones", () => {
    expect(resolveAgent(config, undefined).name).toBe("build");
    expect(resolveAgent(config, "hidden1").name).toBe("hidden1");
    expect(() => resolveAgent(config, "ghost")).toThrow(AgentNotFoundError);
    try {
      resolveAgent(config, "ghost");
    } catch (error) {
      expect((error as AgentNotFoundError).available).toEqual(["build", "plan", "general", "explore", "thinker", "wrongvariant"]);
    }
  });

  it("has no model when no provider is configured", () => {
    const bare = buildConfig(configFileSchema.parse({}), undefined, "/");
    expect(resolveModel(bare, resolveAgent(bare, undefined), undefined, undefined)).toBeUndefined();
  });
});
