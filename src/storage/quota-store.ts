import { sql, type Kysely } from "kysely";
import { logger } from "../observe/log.js";
import type { DB } from "./schema.js";

/** One counter a prompt is counted against: its key (`p:<tenant>/<sub>`, `t:<tenant>`) and its limit per window. */
export interface WindowCounter {
  key: string;
  limit: number;
}

/** What {@link countInWindow} found. */
export interface WindowCount {
  /** The index in `counters` of the first one already at its limit (nothing was counted), or undefined (all counted). */
  refused?: number;
  /** The count of `counters[refused]` in this window (its limit: it is full); undefined when nothing was refused. */
  count?: number;
  /** Milliseconds until the current window ends, on the database clock (≥ 1). */
  retryAfterMs: number;
}

/**
 * Counts one event (a prompt) against every counter in the fixed window of `windowSeconds` that
 * holds the database's `now()` (windows start at multiples of `windowSeconds` since the Unix
 * epoch), in ONE transaction: each counter's row is incremented (an upsert that returns the new
 * count, holding its row lock until commit, so replicas sharing the database count together);
 * when a counter passes its limit, the transaction rolls back and nothing is counted, not even
 * the counters before it. Callers list counters in a fixed order (principal, then tenant) so
 * concurrent transactions lock rows in the same order. After a counter's first event in a
 * window, rows of ended windows are deleted (best effort, outside the transaction).
 *
 * ```ts
 * const { refused, retryAfterMs } = await countInWindow(db, [{ key: "p:acme/alice", limit: 60 }, { key: "t:acme", limit: 600 }], 60);
 * ```
 */
export async function countInWindow(db: Kysely<DB>, counters: readonly WindowCounter[], windowSeconds: number): Promise<WindowCount> {
  const w = sql.lit(windowSeconds);
  const windowStart = sql<Date>`to_timestamp(floor(extract(epoch from now()) / ${w}) * ${w})`;
  let fresh = false;
  try {
    const retryAfterMs = await db.transaction().execute(async (trx) => {
      let retry = 1;
      for (const [index, counter] of counters.entries()) {
        const row = await trx
          .insertInto("quota_usage")
          .values({ key: counter.key, window_start: windowStart, count: 1 })
          .onConflict((oc) => oc.columns(["key", "window_start"]).doUpdateSet({ count: sql`quota_usage.count + 1` }))
          .returning([
            "count",
            sql<number>`greatest(1, ceil(extract(epoch from (quota_usage.window_start + make_interval(secs => ${w}) - now())) * 1000))::integer`.as(
              "retry_ms",
            ),
          ])
          .executeTakeFirstOrThrow();
        retry = row.retry_ms;
        if (row.count > counter.limit) throw new Refusal({ refused: index, count: row.count - 1, retryAfterMs: row.retry_ms });
        if (row.count === 1) fresh = true;
      }
      return retry;
    });
    if (fresh) void deleteEndedWindows(db, windowSeconds);
    return { retryAfterMs };
  } catch (error) {
    if (error instanceof Refusal) return error.result;
    throw error;
  }
}

/** Deletes the rows of windows that ended before the current one; a failure is logged, never thrown. */
async function deleteEndedWindows(db: Kysely<DB>, windowSeconds: number): Promise<void> {
  const w = sql.lit(windowSeconds);
  try {
    await db
      .deleteFrom("quota_usage")
      .where("window_start", "<", sql<Date>`to_timestamp(floor(extract(epoch from now()) / ${w}) * ${w})`)
      .execute();
  } catch (error) {
    logger.warn("quota windows not pruned", { error });
  }
}

/** Thrown inside the transaction to roll it back; carries the answer. */
class Refusal extends Error {
  constructor(readonly result: WindowCount) {
    super("quota refused");
  }
}
