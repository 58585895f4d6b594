import type { Kysely } from "kysely";

// Frozen in time: this migration imports nothing from the app.

/**
 * Adds `message.data_bytes` and `part.data_bytes`: the UTF-8 byte length of the row's JSON text
 * as written, so a ListMessages page is sized by what its client receives (the stored size,
 * `pg_column_size`, is compressed: 1 MB of repetitive text counts about 12 KB). Null for rows
 * written before this migration (readers estimate those); no backfill: it would read every stored
 * message and part at upgrade.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("message").addColumn("data_bytes", "integer").execute();
  await db.schema.alterTable("part").addColumn("data_bytes", "integer").execute();
}

/** Drops both columns. */
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("part").dropColumn("data_bytes").execute();
  await db.schema.alterTable("message").dropColumn("data_bytes").execute();
}
