import { create } from "@bufbuild/protobuf";
import { sql } from "kysely";
import { Migrator } from "kysely/migration";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MessageSchema, type Message } from "../../gen/ledger/v1/message_pb.js";
import { newId } from "../../src/ids.js";
import { migrate, type Database } from "../../src/storage/db.js";
import { toJsonb } from "../../src/storage/jsonb.js";
import {
  getLastAnswerRow,
  getLastPromptId,
  insertMessage,
  listOpenAnswerRows,
  listSessionsWithOpenAnswers,
  rowToMessage,
  updateMessageRow,
} from "../../src/storage/message-store.js";
import { migrations } from "../../src/storage/migrations/index.js";
import { insertTestSession, migrationsAfter, openTestDatabase, TEST_ENGINE } from "../support/db.js";

// The message queries that look past the columns: a prompt's answer (by the `parent_id`
// column, filled from the stored JSON for rows written before it existed), the last prompt
// that asks for an answer, and the answers left open by a dead runner.

let database: Database;
beforeAll(async () => {
  database = await openTestDatabase();
});
afterAll(() => database?.close());

const newSession = () => insertTestSession(database.db);

function user(sessionId: string, options: { noReply?: boolean } = {}): Message {
  return create(MessageSchema, { kind: { case: "user", value: { id: newId("msg"), sessionId, noReply: options.noReply ?? false } } });
}

function assistant(sessionId: string, parentId: string, options: { completed?: boolean; finish?: string } = {}): Message {
  const time = options.completed === false ? { created: { seconds: 1n } } : { created: { seconds: 1n }, completed: { seconds: 2n } };
  return create(MessageSchema, {
    kind: { case: "assistant", value: { id: newId("msg"), sessionId, parentId, time, finish: options.finish ?? "stop" } },
  });
}

/** Inserts the messages at positions 1, 2, 3... after `from`. */
async function store(messages: Message[], from = 0): Promise<void> {
  await database.db.transaction().execute(async (trx) => {
    for (const [i, message] of messages.entries()) await insertMessage(trx, { message, position: from + i + 1 });
  });
}

const idOf = (message: Message) => message.kind.value!.id;

describe(`message store on ${TEST_ENGINE}`, () => {
  it("finds a prompt's answer: its last assistant message by position, whatever answers other prompts around it", async () => {
    const sessionId = await newSession();
    const first = user(sessionId);
    const second = user(sessionId);
    const steps = [assistant(sessionId, idOf(first), { finish: "tool-calls" }), assistant(sessionId, idOf(first))];
    // A prompt stored while the first is being answered lands between its steps.
    await store([first, steps[0]!, second, steps[1]!, assistant(sessionId, idOf(second))]);
    const answer = await getLastAnswerRow(database.db, sessionId, idOf(first));
    expect(answer?.id).toBe(idOf(steps[1]!));
    expect(rowToMessage(answer!)).toEqual(steps[1]);
    expect(await getLastAnswerRow(database.db, sessionId, idOf(user(sessionId)))).toBeUndefined();
    // Only answers in the session asked about.
    expect(await getLastAnswerRow(database.db, await newSession(), idOf(first))).toBeUndefined();
  });

  it("keeps parent_id with the stored JSON when a message is updated", async () => {
    const sessionId = await newSession();
    const prompt = user(sessionId);
    const answer = assistant(sessionId, idOf(prompt), { completed: false });
    await store([prompt, answer]);
    expect(await getLastAnswerRow(database.db, sessionId, idOf(prompt))).toMatchObject({ id: idOf(answer), parent_id: idOf(prompt) });
    if (answer.kind.case === "assistant") answer.kind.value.parentId = "";
    await database.db.transaction().execute((trx) => updateMessageRow(trx, answer));
    expect(await getLastAnswerRow(database.db, sessionId, idOf(prompt))).toBeUndefined();
  });

  it("finds the last prompt that asks for an answer, skipping no_reply ones", async () => {
    const sessionId = await newSession();
    expect(await getLastPromptId(database.db, sessionId)).toBeUndefined();
    const asked = user(sessionId);
    await store([asked, assistant(sessionId, idOf(asked)), user(sessionId, { noReply: true }), user(sessionId, { noReply: true })]);
    expect(await getLastPromptId(database.db, sessionId)).toBe(idOf(asked));
  });

  it("lists assistant messages without time.completed, and their sessions", async () => {
    const sessionId = await newSession();
    const prompt = user(sessionId);
    const open = [assistant(sessionId, idOf(prompt), { completed: false }), assistant(sessionId, idOf(prompt), { completed: false })];
    await store([prompt, open[0]!, assistant(sessionId, idOf(prompt)), open[1]!]);
    expect((await listOpenAnswerRows(database.db, sessionId)).map((r) => r.id)).toEqual(open.map(idOf));
    expect(await listSessionsWithOpenAnswers(database.db)).toContain(sessionId);
    expect(await listSessionsWithOpenAnswers(database.db)).not.toContain(await newSession());
  });

  it("fills parent_id from the stored JSON for messages written before the column existed", async () => {
    const migrator = new Migrator({ db: database.db, provider: { getMigrations: async () => migrations } });
    const down = await migrator.migrateTo("2026-11-30T2200-event-data-bytes");
    expect(down.error).toBeUndefined();
    // Every later migration goes down, newest first.
    expect(down.results?.map((r) => r.migrationName)).toEqual(migrationsAfter("2026-11-30T2200-event-data-bytes"));
    expect(down.results?.at(-1)?.migrationName).toBe("2026-12-02T0900-message-parent-id");
    const sessionId = await newSession();
    const prompt = user(sessionId);
    const answers = [assistant(sessionId, idOf(prompt), { finish: "tool-calls" }), assistant(sessionId, idOf(prompt))];
    const orphan = assistant(sessionId, "");
    for (const [i, message] of [prompt, ...answers, orphan].entries()) {
      await sql`insert into message (id, session_id, position, role, data) values (${idOf(message)}, ${sessionId}, ${i + 1}, ${message.kind.case}, ${toJsonb(MessageSchema, message)}::jsonb)`.execute(
        database.db,
      );
    }
    await migrate(database.db);
    const rows = await database.db
      .selectFrom("message")
      .select(["id", "parent_id"])
      .where("session_id", "=", sessionId)
      .orderBy("position")
      .execute();
    expect(rows).toEqual([
      { id: idOf(prompt), parent_id: null },
      { id: idOf(answers[0]!), parent_id: idOf(prompt) },
      { id: idOf(answers[1]!), parent_id: idOf(prompt) },
      { id: idOf(orphan), parent_id: null },
    ]);
    expect((await getLastAnswerRow(database.db, sessionId, idOf(prompt)))?.id).toBe(idOf(answers[1]!));
  });
});
