import { sql, type Kysely } from "kysely";

// Frozen in time: this migration imports nothing from the app.

/**
 * Partial indexes on the message and part rows still without `data_bytes` (written before
 * 2026-12-09T0900): the server fills them in the background a batch at a time (`fillDataBytes`),
 * finding them through these indexes instead of scanning the tables; rows written since always
 * have it, so both stay empty once the rows are filled. Building them reads each table's rows
 * once (not their TOASTed data).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`CREATE INDEX message_data_bytes_missing_idx ON message (id) WHERE data_bytes IS NULL`.execute(db);
  await sql`CREATE INDEX part_data_bytes_missing_idx ON part (id) WHERE data_bytes IS NULL`.execute(db);
}

/** Drops both indexes. */
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP INDEX part_data_bytes_missing_idx`.execute(db);
  await sql`DROP INDEX message_data_bytes_missing_idx`.execute(db);
}
