import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLedger } from "../../src/app.js";
import { buildConfig, configFileSchema } from "../../src/config/config.js";
import { fillDataBytes } from "../../src/storage/backfill.js";
import { TEST_ENGINE } from "../support/db.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";
import { waitFor } from "../support/wait.js";

// A review, 2026-12-03: rows stored before data_bytes existed were measured (their JSON text
// read) by every ListMessages call, for good. The server now fills them in the background.

let t: TestLedger;
let sessionId: string;
beforeAll(async () => {
  t = await startTestLedger({});
  sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  for (const word of ["one", "two", "three"]) await t.client.prompt({ sessionId, noReply: true, parts: [text(word), text(`${word}!`)] });
});
afterAll(() => t?.close());

/** Rows of `table` in the session without data_bytes, and those whose data_bytes is not their JSON text's length. */
async function state(table: "message" | "part"): Promise<{ missing: number; wrong: number }> {
  const row = (
    await sql<{ missing: string; wrong: string }>`
      SELECT count(*) FILTER (WHERE data_bytes IS NULL) AS missing,
             count(*) FILTER (WHERE data_bytes IS NOT NULL AND data_bytes <> octet_length(data::text)) AS wrong
      FROM ${sql.table(table)} WHERE session_id = ${sessionId}`.execute(t.ledger.deps.db)
  ).rows[0]!;
  return { missing: Number(row.missing), wrong: Number(row.wrong) };
}

/** Makes the session's rows look as if they were stored before data_bytes existed. */
async function forget(): Promise<void> {
  for (const table of ["message", "part"] as const)
    await sql`UPDATE ${sql.table(table)} SET data_bytes = NULL WHERE session_id = ${sessionId}`.execute(t.ledger.deps.db);
}

describe("fillDataBytes", () => {
  it("fills at most `limit` rows a call, the JSON text's length, until none is left", async () => {
    await forget();
    expect(await state("part")).toEqual({ missing: 6, wrong: 0 });
    expect(await fillDataBytes(t.ledger.deps.db, "part", 4)).toBe(4);
    expect(await fillDataBytes(t.ledger.deps.db, "part", 4)).toBe(2);
    expect(await fillDataBytes(t.ledger.deps.db, "part", 4)).toBe(0);
    expect(await state("part")).toEqual({ missing: 0, wrong: 0 });
    expect(await fillDataBytes(t.ledger.deps.db, "message", 10)).toBe(3);
    expect(await state("message")).toEqual({ missing: 0, wrong: 0 });
  });

  // A second server on the same database: Postgres only (an embedded one serves one process).
  it.skipIf(TEST_ENGINE === "pglite")("runs when a server starts, in the background", async () => {
    await forget();
    const second = await startLedger({ config: buildConfig(configFileSchema.parse({}), undefined, t.dir), database: t.database.target });
    try {
      await waitFor("the rows to be filled", async () => (await state("part")).missing === 0 && (await state("message")).missing === 0);
    } finally {
      await second.close(1000);
    }
  });
});
