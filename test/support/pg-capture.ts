import pg from "pg";

/** A statement a `pg` client sent: its text and parameters. */
export interface SentStatement {
  text: string;
  values: unknown[];
}

/** Records every query `pg` clients of this process send while `fn` runs (and `settleMs` after it). */
export async function captureStatements(fn: () => Promise<void>, settleMs = 0): Promise<SentStatement[]> {
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  const seen: SentStatement[] = [];
  proto.query = function (this: unknown, ...args: unknown[]) {
    const query = args[0];
    const text = typeof query === "string" ? query : typeof query === "object" && query && "text" in query ? String(query.text) : "?";
    // (text, values), or a config object: the ledger's PreparingClient sends its prepared
    // statements as {name, text, values}.
    const values = Array.isArray(args[1]) ? args[1] : typeof query === "object" && query && "values" in query ? query.values : undefined;
    seen.push({ text, values: Array.isArray(values) ? [...(values as unknown[])] : [] });
    return original.apply(this, args);
  };
  try {
    await fn();
    if (settleMs > 0) await new Promise((r) => setTimeout(r, settleMs));
  } finally {
    proto.query = original;
  }
  return seen;
}
