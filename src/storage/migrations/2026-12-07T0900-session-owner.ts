import { type Kysely } from "kysely";

// Frozen in time: this migration imports nothing from the app.

/**
 * Adds who owns a session (docs/security.md, "Who may see which session"): `owner` (the
 * creating principal's subject, a JWT's `sub`) and `tenant` (its tenant claim), both null for
 * sessions created without a per-user identity (no authentication, or the static token); children
 * and forks inherit their source's. `session_owner_idx` serves `ListSessions` filtered to one
 * owner or tenant, newest-updated first.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("session").addColumn("owner", "text").execute();
  await db.schema.alterTable("session").addColumn("tenant", "text").execute();
  await db.schema.createIndex("session_owner_idx").on("session").columns(["tenant", "owner", "time_updated", "id"]).execute();
}

/** Drops the columns (and with them the index). */
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex("session_owner_idx").execute();
  await db.schema.alterTable("session").dropColumn("tenant").execute();
  await db.schema.alterTable("session").dropColumn("owner").execute();
}
