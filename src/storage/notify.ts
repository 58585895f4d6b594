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

/**
 * Sends several notifications in one autocommit statement, in the given order (Postgres delivers
 * a transaction's notifications in the order it sent them). Each payload under 8000 bytes.
 * Throws what the database throws. Nothing is sent when `items` is empty.
 */
export async function notifyMany(db: Kysely<DB>, items: ReadonlyArray<readonly [channel: string, payload: string]>): Promise<void> {
  if (items.length === 0) return;
  if (items.length === 1) return notify(db, items[0]![0], items[0]![1]);
  await sql`select pg_notify(n.e ->> 0, n.e ->> 1) from (select e from jsonb_array_elements(${JSON.stringify(items)}::jsonb) with ordinality as x(e, ord) order by ord) as n`.execute(
    db,
  );
}
