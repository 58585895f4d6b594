import type { ModelConfig } from "../config/config.js";
import type { StepUsage } from "./ai-sdk-events.js";

/**
 * Cost of a step in USD from the model's price table in config (`cost`: USD per 1,000,000
 * tokens for input, output, cache_read, cache_write, as on models.dev and in OpenCode).
 * Reasoning tokens are billed as output. 0 when the model has no price table.
 */
export function stepCost(model: ModelConfig | undefined, usage: StepUsage): number {
  const price = model?.cost;
  if (!price) return 0;
  const total =
    usage.input * price.input +
    usage.output * price.output +
    usage.cacheRead * (price.cache_read ?? 0) +
    usage.cacheWrite * (price.cache_write ?? 0);
  return total / 1_000_000;
}
