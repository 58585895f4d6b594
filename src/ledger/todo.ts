import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { TodoSchema, type Todo } from "../../gen/ledger/v1/todo_pb.js";
import { SessionNotFoundError } from "../errors.js";
import { readTodos, saveTodos } from "../storage/todo-store.js";
import { writeSession, type WriterDeps } from "./writer.js";

/**
 * The `GetTodo` RPC (OpenCode `Todo.get`, the `/session/:id/todo` route): the session's todo list
 * as the model last wrote it with `todowrite`, in its order; `[]` when it never wrote one.
 * One statement.
 *
 * @throws SessionNotFoundError (NOT_FOUND) when the session does not exist.
 */
export async function getTodos(deps: WriterDeps, sessionId: string): Promise<Todo[]> {
  const todos = await readTodos(deps.db, sessionId);
  if (!todos) throw new SessionNotFoundError(sessionId);
  return todos;
}

/**
 * Replaces the session's todo list (OpenCode `Todo.update`, which deletes the rows and inserts
 * the new ones, then publishes `todo.updated`): ONE session write (`writeSession`, holding the
 * session row lock) stores the list and appends a `todo_updated` event carrying it, so the list
 * and its event commit together and watchers see the event only after commit. `time_updated`
 * of the session is not touched (as for the loop's own writes). Strings are made storable in
 * place. Returns the list as stored.
 *
 * @param todos - the whole new list, in order; an empty list clears it.
 * @throws SessionNotFoundError (NOT_FOUND) when the session does not exist.
 */
export async function replaceTodos(
  deps: WriterDeps,
  sessionId: string,
  todos: ReadonlyArray<MessageInitShape<typeof TodoSchema>>,
): Promise<Todo[]> {
  const list = todos.map((todo) => create(TodoSchema, todo));
  await writeSession(
    deps,
    sessionId,
    async (w) => {
      await saveTodos(w.trx, sessionId, list, w.now);
      w.emit({ case: "todoUpdated", value: { todos: list } });
    },
    { touch: false },
  );
  return list;
}
