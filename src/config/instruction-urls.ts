// The URLs of `instructions`: OpenCode fetches them; here they are out of scope, set aside and
// warned about once at start (docs/configuration.md#instructions).

/** Whether an `instructions` entry is an `http://` or `https://` URL. */
export function isInstructionUrl(entry: string): boolean {
  return entry.startsWith("https://") || entry.startsWith("http://");
}

/**
 * The start-up warning about the URLs among `entries` (the `instructions` of a config file),
 * e.g. `instructions: URLs are not fetched (out of scope); ignoring "https://example.com/rules.md"`,
 * or undefined when there are none; a URL is shown without its query, fragment and user info,
 * which may hold a token. One entry of `LedgerConfig.warnings`.
 */
export function instructionUrlWarning(entries: readonly string[]): string | undefined {
  const urls = entries.filter(isInstructionUrl);
  if (urls.length === 0) return undefined;
  return `instructions: URLs are not fetched (out of scope); ignoring ${urls.map((u) => JSON.stringify(withoutSecrets(u))).join(", ")}`;
}

/** `url` as origin and path only (`https://example.com/rules.md?token=x` → `https://example.com/rules.md`). */
function withoutSecrets(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.origin}${parsed.pathname}`;
  } catch {
    return url.split(/[?#]/, 1)[0]!;
  }
}
