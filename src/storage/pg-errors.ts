/**
 * Postgres errors the domain reacts to, recognised by SQLSTATE (the same codes from `pg` and
 * PGlite, both of which set `code`, `constraint` and `detail` on the error they throw). The only
 * place that knows Postgres error codes: the domain asks these questions and maps the answers to
 * its own errors (e.g. a duplicate `message_id` → `AlreadyExistsError`).
 */

/** SQLSTATE of a unique violation (a duplicate primary key or unique constraint). */
const UNIQUE_VIOLATION = "23505";
/** SQLSTATE of a foreign-key violation (a row naming a parent that does not exist). */
const FOREIGN_KEY_VIOLATION = "23503";

/** True when `error` is a foreign-key violation (SQLSTATE 23503) from `pg` or PGlite. */
export function isForeignKeyViolation(error: unknown): boolean {
  return typeof error === "object" && error !== null && (error as { code?: unknown }).code === FOREIGN_KEY_VIOLATION;
}

/**
 * True when `error` is a unique violation (SQLSTATE 23505) from `pg` or PGlite, optionally of
 * the named constraint (e.g. `message_pkey`, `part_pkey`).
 */
export function isUniqueViolation(error: unknown, constraint?: string): boolean {
  if (!error || typeof error !== "object") return false;
  const e = error as { code?: unknown; constraint?: unknown };
  return e.code === UNIQUE_VIOLATION && (constraint === undefined || e.constraint === constraint);
}

/**
 * The `id` value a unique violation on an `id` key names, read from its detail
 * (`Key (id)=(prt_…) already exists.`), or undefined when the error says none.
 */
export function duplicateId(error: unknown): string | undefined {
  if (!error || typeof error !== "object") return undefined;
  return /\(id\)=\(([^)]+)\)/.exec(String((error as { detail?: unknown }).detail))?.[1];
}
