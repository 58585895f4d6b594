import { createHash } from "node:crypto";
import pg from "pg";

/**
 * Marks a statement that each Postgres connection keeps prepared: a statement whose SQL text
 * starts with this comment is sent by {@link PreparingClient} as a named statement, so Postgres
 * parses and plans it once per connection instead of on every call (pg's default is an unnamed
 * statement, parsed and planned each time). For statements whose text never changes (all values
 * are parameters) and that run on every prompt: the one-statement session write. Measured with
 * pgbench on the ledger's write statement, one client: 0.84 → 0.35 ms (1 part), 1.38 → 0.47 ms
 * (5 parts), 3.56 → 0.95 ms (20 parts) per statement with `-M prepared` instead of `-M extended`
 * (bench/README.md). PGlite ignores the comment (it is one).
 */
export const PREPARED = "/* ledger-prepared */ ";

/** Names already computed, by statement text (a handful of texts: hashed once each). */
const names = new Map<string, string>();

/** The statement name for `text`: `ledger_` and 16 hex characters of its SHA-1 (pg requires one text per name). */
function statementName(text: string): string {
  let name = names.get(text);
  if (name === undefined) {
    name = `ledger_${createHash("sha1").update(text).digest("hex").slice(0, 16)}`;
    names.set(text, name);
  }
  return name;
}

/**
 * The `pg.Client` of the ledger's pool: a query whose text starts with {@link PREPARED} goes as
 * a named prepared statement (pg prepares it on the connection's first use and keeps it for the
 * connection's life); every other query is unchanged. Kysely's `PostgresDialect` calls
 * `client.query(text, values)`, which is the form intercepted.
 */
export class PreparingClient extends pg.Client {
  // pg's overloads are many; Kysely uses (text, values) and (config).
  override query(...args: unknown[]): never {
    const [text, values] = args;
    if (typeof text === "string" && text.startsWith(PREPARED) && (values === undefined || Array.isArray(values)) && args.length <= 2) {
      return super.query({ name: statementName(text), text, values: values as unknown[] | undefined }) as never;
    }
    return (super.query as (...rest: unknown[]) => unknown)(...args) as never;
  }
}
