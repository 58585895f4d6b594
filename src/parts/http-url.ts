/**
 * Whether `url` is an `http:` or `https:` URL that parses and names a host (`https://` and
 * `http://exa mple.com/x.pdf` are not): the only non-`data:` file URL a provider can be sent.
 * Admission refuses the others (`checkFileUrl` in ./resolve.ts); history names them instead of
 * sending them (src/agent/history.ts).
 */
export function isHttpUrlWithHost(url: string): boolean {
  const parsed = URL.canParse(url) ? new URL(url) : undefined;
  return (parsed?.protocol === "http:" || parsed?.protocol === "https:") && parsed.hostname !== "";
}
