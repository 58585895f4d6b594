import type { Kysely } from "kysely";

// Frozen in time: this migration imports nothing from the app.

/**
 * Adds `session.pruned_seq`: the highest event seq deleted by retention. A reader asking for
 * events after a seq below it has lost events and must reload (WatchSession answers OUT_OF_RANGE).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable("session")
    .addColumn("pruned_seq", "bigint", (c) => c.notNull().defaultTo(0))
    .execute();
  // Retention: events older than a cutoff, oldest first, across sessions.
  await db.schema.createIndex("session_event_time_idx").on("session_event").column("time").execute();
}

/** Drops `session.pruned_seq` and the time index. */
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex("session_event_time_idx").execute();
  await db.schema.alterTable("session").dropColumn("pruned_seq").execute();
}
