import { describe, expect, it } from "vitest";
import { buildConfig, configFileSchema } from "../../src/config/config.js";
import { createModelResolver, ModelUnavailableError } from "../../src/agent/providers.js";
import { compatibleProvider } from "../support/mock-models.js";

// The resolver looks models up in ledger.json only: names that exist on every JavaScript object
// (constructor, toString, __proto__) are unknown models, not crashes.

const config = buildConfig(
  configFileSchema.parse({
    provider: { local: compatibleProvider("http://127.0.0.1:9/v1", { qwen: {} }) },
  }),
  "ledger.json",
  "/",
);

describe("createModelResolver", () => {
  it.each([
    ["constructor", "x"],
    ["__proto__", "x"],
    ["toString", "x"],
    ["local", "toString"],
    ["local", "constructor"],
    ["local", "nope"],
  ])("refuses %s/%s as an unknown model naming the configured ones", (providerId, modelId) => {
    const resolver = createModelResolver(config, {});
    let error: unknown;
    try {
      resolver.resolve({ providerId, modelId });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(ModelUnavailableError);
    expect((error as ModelUnavailableError).available).toEqual(["local/qwen"]);
  });

  it("resolves a configured model", () => {
    const resolved = createModelResolver(config, {}).resolve({ providerId: "local", modelId: "qwen" });
    expect(resolved).toBeDefined();
  });
});
