import type { LogWarningsFunction, Warning } from "ai";
import { logger as processLogger, type Logger } from "../observe/log.js";

/** Distinct warnings remembered to log only once at `warn`; past this many, every warning is logged at `warn`. */
const REMEMBERED = 1_000;

/**
 * Routes the AI SDK's call warnings (a setting the provider ignores or emulates: `responseFormat`
 * with a JSON schema on an OpenAI-compatible model that sends no schema, `maxOutputTokens` capped
 * for a model id the provider does not know...) into the structured log, instead of the plain
 * `AI SDK Warning ...` lines the SDK writes with `console.warn`, which break a stderr read as
 * JSON Lines. Each distinct warning of a provider and model is logged once per process at
 * `warn` (`msg` "model warning", fields `provider`, `model`, `type`, `feature`, `details` or
 * `message`), later repeats at `debug`. Sets `globalThis.AI_SDK_LOG_WARNINGS`; a value an
 * embedding application set there first (false, or its own function) is kept. Idempotent.
 */
export function routeModelWarnings(log: Logger = processLogger): void {
  if (globalThis.AI_SDK_LOG_WARNINGS !== undefined) return;
  const seen = new Set<string>();
  const route: LogWarningsFunction = ({ warnings, provider, model }) => {
    for (const warning of warnings) {
      const fields = { provider, model, ...describe(warning) };
      const key = JSON.stringify(fields);
      const first = !seen.has(key);
      if (first && seen.size < REMEMBERED) seen.add(key);
      if (first) log.warn("model warning", fields);
      else log.debug("model warning", fields);
    }
  };
  globalThis.AI_SDK_LOG_WARNINGS = route;
}

/** A warning's fields for the log: `type`, and `feature`/`details` or `message`. */
function describe(warning: Warning): Record<string, string | undefined> {
  switch (warning.type) {
    case "unsupported":
    case "compatibility":
      return { type: warning.type, feature: warning.feature, details: warning.details };
    case "other":
      return { type: warning.type, message: warning.message };
    default:
      return { type: "other", message: JSON.stringify(warning) };
  }
}
