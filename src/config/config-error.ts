/** A config file, key or environment variable that cannot work; the message names it. */
export class ConfigError extends Error {
  override name = "ConfigError";
}
