import { sql, type Kysely } from "kysely";

// Frozen in time: this migration imports nothing from the app.

/**
 * Adds `session.message_count`: the number of the session's messages, kept by the statement that
 * inserts or deletes them (under the session row lock) instead of a `count(*)` of the session's
 * messages on every read and every write, which grew with the session. Filled for the rows
 * already there.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable("session")
    .addColumn("message_count", "bigint", (c) => c.notNull().defaultTo(0))
    .execute();
  await sql`update session set message_count = (select count(*) from message m where m.session_id = session.id)`.execute(db);
}

/** Drops `session.message_count`. */
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("session").dropColumn("message_count").execute();
}
