/**
 * True when `text` shows nothing: it is empty or holds only whitespace (`\s`: spaces, tabs,
 * newlines, no-break and ideographic spaces) and invisible format characters (Unicode category
 * Cf: zero-width space U+200B, word joiner U+2060, BOM U+FEFF, ...). A title or command made only
 * of these looks empty to the person reading it, so it is treated as empty.
 */
export function isBlank(text: string): boolean {
  return /^[\s\p{Cf}]*$/u.test(text);
}
