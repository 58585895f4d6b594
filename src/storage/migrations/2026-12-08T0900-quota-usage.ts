import { sql, type Kysely } from "kysely";

// Frozen in time: this migration imports nothing from the app.

/**
 * Adds `quota_usage` (docs/security.md, "Quotas"): how many prompts a quota key (`p:<tenant>/<sub>`
 * for a principal, `t:<tenant>` for a tenant) stored in the fixed window starting at
 * `window_start`, shared by every replica. The primary key serves the increment-and-read upsert of
 * each prompt; `quota_usage_window_idx` serves the deletion of windows that have ended.
 *
 * Also adds `message_open_answer_idx`, a partial index on the assistant messages without
 * `time.completed` (running answers, a few at any time): it serves the `concurrent_loops` count
 * (running answers of a principal's or tenant's sessions) and the startup scan for open answers.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("quota_usage")
    .addColumn("key", "text", (c) => c.notNull())
    .addColumn("window_start", "timestamptz", (c) => c.notNull())
    .addColumn("count", "integer", (c) => c.notNull().defaultTo(sql`0`))
    .addPrimaryKeyConstraint("quota_usage_pkey", ["key", "window_start"])
    .execute();
  await db.schema.createIndex("quota_usage_window_idx").on("quota_usage").column("window_start").execute();
  await db.schema
    .createIndex("message_open_answer_idx")
    .on("message")
    .column("session_id")
    .where(sql.ref("role"), "=", "assistant")
    .where(sql<boolean>`not (data -> 'assistant' -> 'time' ? 'completed')`)
    .execute();
}

/** Drops the table and the index. */
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex("message_open_answer_idx").execute();
  await db.schema.dropTable("quota_usage").execute();
}
