import type { Kysely } from "kysely";

// Frozen in time: this migration imports nothing from the app.

/**
 * Adds `session_event.data_bytes`: the UTF-8 byte length of the event's JSON text as written,
 * so a replay can size its pages without reading the rows. Null for rows written before this
 * migration (readers estimate those; retention removes them in time). No backfill: it would
 * read every stored event at upgrade.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("session_event").addColumn("data_bytes", "integer").execute();
}

/** Drops `session_event.data_bytes`. */
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("session_event").dropColumn("data_bytes").execute();
}
