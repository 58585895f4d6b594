import { getTodos, replaceTodos } from "../ledger/todo.js";
import type { WriterDeps } from "../ledger/writer.js";
import type { TodoList } from "../tools/todo.js";

/**
 * The todo list of `sessionId` for the `todowrite` and `todoread` tools: `read` is `getTodos`
 * (items as plain `{id, content, status, priority}` objects, so the tool's JSON output holds
 * only those fields), `write` is `replaceTodos` (the list and its `todo_updated` event in one
 * session write). Both throw `SessionNotFoundError` when the session is gone.
 */
export function sessionTodoList(deps: WriterDeps, sessionId: string): TodoList {
  return {
    read: async () => (await getTodos(deps, sessionId)).map(({ id, content, status, priority }) => ({ id, content, status, priority })),
    write: async (todos) => void (await replaceTodos(deps, sessionId, todos)),
  };
}
