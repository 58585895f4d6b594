// The open session's todo list (the model's `todowrite`), shown above the transcript.
import type { Todo } from "../../gen/ledger/v1/todo_pb.js";

/** The box shown for each status, as `ledger prompt` prints it. */
const MARKS: Record<string, string> = { pending: "[ ]", in_progress: "[~]", completed: "[x]", cancelled: "[-]" };

/**
 * Shows `todos` in `container` (hidden when the list is empty): a heading `Todo (D/N done)` and
 * one `<li data-todo-id data-status>` per item in order, with its box, content and priority.
 * Called with GetTodo's answer when a session opens and with each `todo_updated` event.
 */
export function renderTodos(container: HTMLElement, todos: readonly Todo[]): void {
  container.hidden = todos.length === 0;
  const done = todos.filter((t) => t.status === "completed").length;
  const heading = document.createElement("div");
  heading.className = "todos-head";
  heading.textContent = `Todo (${done}/${todos.length} done)`;
  const list = document.createElement("ul");
  for (const todo of todos) {
    const item = document.createElement("li");
    item.dataset.todoId = todo.id;
    item.dataset.status = todo.status;
    const mark = document.createElement("span");
    mark.className = "todo-mark";
    mark.textContent = MARKS[todo.status] ?? "[?]";
    const content = document.createElement("span");
    content.className = "todo-content";
    content.textContent = todo.content;
    const priority = document.createElement("span");
    priority.className = "todo-priority";
    priority.textContent = todo.priority;
    item.append(mark, " ", content, " ", priority);
    list.append(item);
  }
  container.replaceChildren(...(todos.length === 0 ? [] : [heading, list]));
}
