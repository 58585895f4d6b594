import { sql, type Kysely } from "kysely";
import type { DB } from "./schema.js";

/**
 * Sends a Postgres notification (`select pg_notify(channel, payload)`) to every connection
 * listening on `channel`. Given a transaction, Postgres queues it and delivers it only when that
 * transaction commits (dropping it on rollback); given the pool, at once. Payloads must stay
 * under 8000 bytes (Postgres refuses longer ones). Throws what the database throws.
 */
export async function notify(db: Kysely<DB>, channel: string, payload: string): Promise<void> {
  await sql`select pg_notify(${channel}, ${payload})`.execute(db);
}
