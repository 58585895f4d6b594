/**
 * In-process ledgers for the benchmarks, and what a stored prompt wrote (to replay the same
 * rows in baselines).
 */
import type { Kysely } from "kysely";
import type { ModelResolver } from "../src/agent/providers.js";
import { startLedger, type RunningLedger } from "../src/app.js";
import { buildConfig, configFileSchema } from "../src/config/config.js";
import type { DatabaseTarget } from "../src/storage/db.js";
import type { DB } from "../src/storage/schema.js";

/** Starts a ledger on a free loopback port, `config` being the raw ledger.json object. */
export async function startBenchLedger(
  database: DatabaseTarget,
  dir: string,
  options: { config?: Record<string, unknown>; models?: ModelResolver } = {},
): Promise<RunningLedger> {
  return startLedger({
    config: buildConfig(configFileSchema.parse(options.config ?? {}), undefined, dir),
    database,
    models: options.models,
  });
}

/** The rows one stored prompt wrote, as the JSON text of their `data` columns. */
export interface WrittenRows {
  message: { role: string; data: string; requestHash: string };
  parts: Array<{ kind: string; data: string }>;
  events: Array<{ kind: string; data: string }>;
  session: string;
}

/** Reads back what the prompt that stored `messageId` wrote (its events: seq after `afterSeq`). */
export async function writtenRows(db: Kysely<DB>, sessionId: string, messageId: string, afterSeq: number): Promise<WrittenRows> {
  const message = await db
    .selectFrom("message")
    .select((eb) => ["role", "request_hash", eb.cast<string>("data", "text").as("data")])
    .where("id", "=", messageId)
    .executeTakeFirstOrThrow();
  const parts = await db
    .selectFrom("part")
    .select((eb) => ["kind", eb.cast<string>("data", "text").as("data")])
    .where("message_id", "=", messageId)
    .orderBy("position")
    .execute();
  const events = await db
    .selectFrom("session_event")
    .select((eb) => ["kind", eb.cast<string>("data", "text").as("data")])
    .where("session_id", "=", sessionId)
    .where("seq", ">", afterSeq)
    .orderBy("seq")
    .execute();
  const session = await db
    .selectFrom("session")
    .select((eb) => eb.cast<string>("data", "text").as("data"))
    .where("id", "=", sessionId)
    .executeTakeFirstOrThrow();
  return {
    message: { role: message.role, data: message.data, requestHash: message.request_hash ?? "" },
    parts,
    events,
    session: session.data,
  };
}

/** The session's `last_seq`. */
export async function lastSeq(db: Kysely<DB>, sessionId: string): Promise<number> {
  const row = await db.selectFrom("session").select("last_seq").where("id", "=", sessionId).executeTakeFirstOrThrow();
  return Number(row.last_seq);
}
