import { describe, expect, it } from "vitest";
import { buildConfig, configFileSchema } from "../../src/config/config.js";
import { AgentNotFoundError, InvalidArgumentError } from "../../src/errors.js";
import { checkModelRef, isConfiguredModel, resolveAgent, resolveModel, resolveVariant } from "../../src/ledger/selection.js";

// docs/design.md §3: model = input ?? agent's model ?? session's last model (when configured) ?? config default;
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
      ghostly: { model: "ghost/own" },
    },
  }),
  undefined,
  "/",
);
const ref = (s: string) => ({ providerId: s.split("/")[0]!, modelId: s.split("/")[1]! });
const show = (m: { providerId: string; modelId: string } | undefined) => (m ? `${m.providerId}/${m.modelId}` : undefined);

describe("agent, model and variant precedence", () => {
  const cases: Array<{
    name: string;
    agent?: string;
    input?: string;
    session?: string;
    variant?: string;
    model: string;
    wantVariant?: string;
  }> = [
    { name: "config default when nothing else", model: "cfg/default" },
    { name: "session's last model over config", session: "other/m", model: "other/m" },
    { name: "agent's model over session", agent: "thinker", session: "other/m", model: "agentp/own", wantVariant: "high" },
    { name: "input model over agent's", agent: "thinker", input: "other/m", model: "other/m" },
    { name: "input variant always wins", agent: "thinker", input: "other/m", variant: "low", model: "other/m", wantVariant: "low" },
    { name: "agent variant only with its own model", agent: "thinker", input: "agentp/own", model: "agentp/own", wantVariant: "high" },
    { name: "agent variant dropped when the model lacks it", agent: "wrongvariant", model: "agentp/own" },
    { name: "build has no model or variant", agent: "build", session: "other/m", model: "other/m" },
    { name: "session's last model skipped when its provider is not configured", session: "ghost/m", model: "cfg/default" },
    { name: "session's last model skipped when its provider lacks it", session: "other/nope", model: "cfg/default" },
    {
      name: "unconfigured last model skipped for the agent's own model too",
      agent: "thinker",
      session: "ghost/m",
      model: "agentp/own",
      wantVariant: "high",
    },
    { name: "an unknown input model is kept (it ends in model_not_found)", input: "ghost/m", session: "other/m", model: "ghost/m" },
    { name: "an agent's unknown model is kept", agent: "ghostly", session: "other/m", model: "ghost/own" },
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
      expect((error as AgentNotFoundError).available).toEqual([
        "build",
        "plan",
        "general",
        "explore",
        "thinker",
        "wrongvariant",
        "ghostly",
      ]);
    }
  });

  it("has no model when no provider is configured", () => {
    const bare = buildConfig(configFileSchema.parse({}), undefined, "/");
    expect(resolveModel(bare, resolveAgent(bare, undefined), undefined, undefined)).toBeUndefined();
  });

  it("has no model when no provider is configured, even with a session model", () => {
    const bare = buildConfig(configFileSchema.parse({}), undefined, "/");
    expect(resolveModel(bare, resolveAgent(bare, undefined), undefined, ref("x/y"))).toBeUndefined();
  });
});

describe("isConfiguredModel", () => {
  it("is true only for a model listed under its provider", () => {
    expect(isConfiguredModel(config, ref("other/m"))).toBe(true);
    expect(isConfiguredModel(config, ref("other/x"))).toBe(false);
    expect(isConfiguredModel(config, ref("ghost/m"))).toBe(false);
    expect(isConfiguredModel(config, ref("constructor/m"))).toBe(false);
    expect(isConfiguredModel(config, ref("other/constructor"))).toBe(false);
  });
});

describe("malformed requested models", () => {
  const bad: Array<{ name: string; model: { providerId: string; modelId: string }; field: string }> = [
    { name: "empty provider id", model: { providerId: "", modelId: "m" }, field: "model.provider_id" },
    { name: "blank provider id", model: { providerId: " \t", modelId: "m" }, field: "model.provider_id" },
    { name: "provider id with a slash", model: { providerId: "a/b", modelId: "m" }, field: "model.provider_id" },
    { name: "empty model id", model: { providerId: "other", modelId: "" }, field: "model.model_id" },
    { name: "blank model id", model: { providerId: "other", modelId: "  " }, field: "model.model_id" },
  ];
  for (const c of bad) {
    it(`resolveModel refuses a requested model with ${c.name}: InvalidArgumentError on ${c.field}`, () => {
      const agent = resolveAgent(config, undefined);
      let error: unknown;
      try {
        resolveModel(config, agent, c.model, undefined);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(c.field);
      expect(() => checkModelRef(c.model, "command.model")).toThrow(`command.${c.field}`);
    });
  }

  it("accepts model ids with slashes and colons", () => {
    expect(() => checkModelRef({ providerId: "openrouter", modelId: "anthropic/claude:beta" })).not.toThrow();
  });
});
