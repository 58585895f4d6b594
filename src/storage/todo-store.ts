import { fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import type { Kysely, Transaction } from "kysely";
import { TodoSchema, type Todo } from "../../gen/ledger/v1/todo_pb.js";
import { makeStorable } from "./jsonb.js";
import type { DB, SessionTodoRow } from "./schema.js";

/**
 * Replaces the session's todo list (`session_todo`, one upsert on its key `session_id`), inside
 * the caller's session write (so it commits with its `todo_updated` event). Strings are made
 * storable in place (`makeStorable`), so the caller's objects are what was stored. An empty list
 * is stored as one (the row stays: "the model cleared its list" is not "never wrote one").
 */
export async function saveTodos(trx: Transaction<DB>, sessionId: string, todos: Todo[], now: Date): Promise<void> {
  const data = JSON.stringify(todos.map((todo) => toJson(TodoSchema, makeStorable(todo))));
  await trx
    .insertInto("session_todo")
    .values({ session_id: sessionId, data, time_updated: now })
    .onConflict((oc) => oc.column("session_id").doUpdateSet({ data, time_updated: now }))
    .execute();
}

/**
 * The session's todo list in the model's order: `[]` when it never wrote one, undefined when the
 * session does not exist. One statement (the session row left-joined to its list).
 */
export async function readTodos(db: Kysely<DB>, sessionId: string): Promise<Todo[] | undefined> {
  const row = await db
    .selectFrom("session")
    .leftJoin("session_todo", "session_todo.session_id", "session.id")
    .select(["session.id", "session_todo.data"])
    .where("session.id", "=", sessionId)
    .executeTakeFirst();
  if (!row) return undefined;
  return row.data ? rowToTodos({ data: row.data }) : [];
}

/** Maps a row's `data` to the list: the one decoder of `session_todo.data`. */
export function rowToTodos(row: Pick<SessionTodoRow, "data">): Todo[] {
  return row.data.map((item) => fromJson(TodoSchema, item as JsonObject, { ignoreUnknownFields: true }));
}
