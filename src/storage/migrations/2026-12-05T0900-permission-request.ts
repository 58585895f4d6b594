import { sql, type Kysely } from "kysely";

// Frozen in time: this migration imports nothing from the app.

/**
 * Creates `permission_request`: one row per tool call a rule with `ask` paused (OpenCode
 * `PermissionNext` pending requests, kept in the database so a reply reaches the loop on any
 * replica and recovery finds what a dead process left waiting). `reply` is null while pending.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("permission_request")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("session_id", "text", (c) => c.notNull().references("session.id").onDelete("cascade"))
    .addColumn("data", "jsonb", (c) => c.notNull())
    .addColumn("reply", "text")
    .addColumn("reply_message", "text")
    .addColumn("time_created", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("time_replied", "timestamptz")
    .execute();
  // ListPermissions and recovery: a session's requests, oldest first.
  await db.schema
    .createIndex("permission_request_session_id_idx")
    .on("permission_request")
    .columns(["session_id", "time_created"])
    .execute();
}

/** Drops `permission_request`. */
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("permission_request").execute();
}
