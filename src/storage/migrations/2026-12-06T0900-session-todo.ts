import { sql, type Kysely } from "kysely";

// Frozen in time: this migration imports nothing from the app.

/**
 * Creates `session_todo`: a session's todo list (OpenCode `TodoTable`), one row per session
 * that has one. The model always replaces the whole list (`todowrite`), so the row holds it whole
 * as a JSONB array of `ledger.v1.Todo` in proto JSON, in the model's order (OpenCode keeps a row
 * per item with a `position`; one row makes the replace one upsert and the read one lookup).
 * A table of its own, not a column of `session`: the session row is read and rewritten by every
 * write to the session, and the list has no business in those. The key is `session_id`, a
 * foreign key with `on delete cascade`, so the list goes with its session.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("session_todo")
    .addColumn("session_id", "text", (c) => c.primaryKey().references("session.id").onDelete("cascade"))
    .addColumn("data", "jsonb", (c) => c.notNull())
    .addColumn("time_updated", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
}

/** Drops `session_todo`. */
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("session_todo").execute();
}
