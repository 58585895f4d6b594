import { sql, type Kysely } from "kysely";

// Frozen in time: this migration imports nothing from the app.

/**
 * Adds `message.parent_id`: an assistant message's `parent_id` (the user message it answers),
 * null for user messages, filled from the stored proto JSON (`data.assistant.parentId`) for the
 * rows already there, and indexed so the answer to a prompt is one index read instead of a scan
 * of the session's later messages.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("message").addColumn("parent_id", "text").execute();
  await sql`update message set parent_id = nullif(data #>> '{assistant,parentId}', '') where role = 'assistant'`.execute(db);
  // The answer to a prompt (getLastAnswerRow): parent_id = the user message, newest position first.
  await db.schema.createIndex("message_parent_id_position_idx").on("message").columns(["parent_id", "position"]).execute();
}

/** Drops the index and `message.parent_id`. */
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex("message_parent_id_position_idx").execute();
  await db.schema.alterTable("message").dropColumn("parent_id").execute();
}
