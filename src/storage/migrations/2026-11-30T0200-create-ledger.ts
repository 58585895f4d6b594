import { sql, type Kysely } from "kysely";

// Frozen in time: this migration imports nothing from the app.

/** Creates `session`, `message`, `part` and `session_event` (docs/design.md §5). */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("session")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("directory", "text", (c) => c.notNull())
    .addColumn("parent_id", "text", (c) => c.references("session.id").onDelete("cascade"))
    .addColumn("data", "jsonb", (c) => c.notNull())
    .addColumn("last_seq", "bigint", (c) => c.notNull().defaultTo(0))
    .addColumn("last_position", "bigint", (c) => c.notNull().defaultTo(0))
    .addColumn("time_created", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("time_updated", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  // ListSessions: newest updated first, keyset-paged on (time_updated, id).
  await db.schema.createIndex("session_time_updated_idx").on("session").columns(["time_updated desc", "id desc"]).execute();
  // ForkSession/children lookups and the cascade from a parent.
  await db.schema.createIndex("session_parent_id_idx").on("session").column("parent_id").execute();

  await db.schema
    .createTable("message")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("session_id", "text", (c) => c.notNull().references("session.id").onDelete("cascade"))
    .addColumn("position", "bigint", (c) => c.notNull())
    .addColumn("role", "text", (c) => c.notNull())
    .addColumn("data", "jsonb", (c) => c.notNull())
    .addColumn("request_hash", "text")
    .addColumn("time_created", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    // ListMessages: a session's messages in position order (keyset-paged on position).
    .addUniqueConstraint("message_session_id_position_key", ["session_id", "position"])
    .execute();

  await db.schema
    .createTable("part")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("session_id", "text", (c) => c.notNull().references("session.id").onDelete("cascade"))
    .addColumn("message_id", "text", (c) => c.notNull().references("message.id").onDelete("cascade"))
    .addColumn("position", "bigint", (c) => c.notNull())
    .addColumn("kind", "text", (c) => c.notNull())
    .addColumn("data", "jsonb", (c) => c.notNull())
    .addUniqueConstraint("part_session_id_position_key", ["session_id", "position"])
    .execute();
  // Parts of a page of messages, in position order.
  await db.schema.createIndex("part_message_id_position_idx").on("part").columns(["message_id", "position"]).execute();

  await db.schema
    .createTable("session_event")
    .addColumn("session_id", "text", (c) => c.notNull().references("session.id").onDelete("cascade"))
    .addColumn("seq", "bigint", (c) => c.notNull())
    .addColumn("kind", "text", (c) => c.notNull())
    .addColumn("data", "jsonb", (c) => c.notNull())
    .addColumn("time", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    // WatchSession replay: events of a session with seq > after_seq, in order.
    .addPrimaryKeyConstraint("session_event_pkey", ["session_id", "seq"])
    .execute();
}

/** Drops the ledger tables. */
export async function down(db: Kysely<any>): Promise<void> {
  for (const table of ["session_event", "part", "message", "session"]) await db.schema.dropTable(table).ifExists().execute();
}
