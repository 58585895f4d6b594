import { sql, type Kysely } from "kysely";
import type { DB } from "./schema.js";

/**
 * Sets `data_bytes` on at most `limit` rows of `table` stored before the column existed (null),
 * to the byte length of their JSON text (`octet_length(data::text)`, the estimate ListMessages
 * used for them on every call), found through the partial index of migration
 * 2026-12-10T0900. Returns how many it set: 0 once none is left. Safe to run from several
 * replicas at once (a row already set is left alone).
 */
export async function fillDataBytes(db: Kysely<DB>, table: "message" | "part", limit: number): Promise<number> {
  const result = await sql`
    UPDATE ${sql.table(table)} SET data_bytes = octet_length(data::text)
    WHERE id IN (SELECT id FROM ${sql.table(table)} WHERE data_bytes IS NULL LIMIT ${limit}) AND data_bytes IS NULL`.execute(db);
  return Number(result.numAffectedRows ?? 0n);
}
