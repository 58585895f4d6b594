import { z } from "zod";
import { ToolInputError, type ToolDefinition, type ToolOutput } from "./tool-context.js";

/** A todo item's statuses, as OpenCode's `todowrite` describes them (and `ledger.v1.Todo.status`). */
export const TODO_STATUSES = ["pending", "in_progress", "completed", "cancelled"] as const;
/** A todo item's priorities, as OpenCode's `todowrite` describes them (and `ledger.v1.Todo.priority`). */
export const TODO_PRIORITIES = ["high", "medium", "low"] as const;
/** Most items in one list; a longer `todowrite` fails (input validation) with a tool error the model sees. */
export const TODO_MAX_ITEMS = 100;

/** One item of the todo list, as the model writes it. Same fields as `ledger.v1.Todo`. */
export interface TodoItem {
  /** The model's id, unique within the list (1..128 characters). */
  id: string;
  /** A brief description of the task (1..4096 characters). */
  content: string;
  /** One of {@link TODO_STATUSES}. */
  status: string;
  /** One of {@link TODO_PRIORITIES}. */
  priority: string;
}

/** Input of `todowrite`: the whole new list. Follows OpenCode todo.ts `TodoWriteTool` parameters. */
export interface TodoWriteInput {
  todos: TodoItem[];
}

/**
 * Where the todo tools keep the session's list; bound to one session by the agent loop
 * (`replaceTodos` / `getTodos` of src/ledger/todo.ts), so the tools hold no storage.
 */
export interface TodoList {
  /** The list as stored, in order (`[]` when none was written). */
  read(): Promise<TodoItem[]>;
  /** Replaces the whole list, with its `todo_updated` event, in one session write. */
  write(todos: TodoItem[]): Promise<void>;
}

const todoItem = z.object({
  id: z.string().min(1).max(128).describe("Unique identifier for the todo item"),
  content: z.string().min(1).max(4096).describe("Brief description of the task"),
  status: z.enum(TODO_STATUSES).describe("Current status of the task: pending, in_progress, completed, cancelled"),
  priority: z.enum(TODO_PRIORITIES).describe("Priority level of the task: high, medium, low"),
});

/**
 * The `todowrite` and `todoread` tools over `list` (OpenCode tool/todo.ts `TodoWriteTool`,
 * `TodoReadTool`), in that order. Both are checked against the agent's permission rules by the
 * registry with the pattern `*` (the plan agent may use them, as in OpenCode; the built-in
 * subagents may not).
 *
 * - `todowrite {todos: [{id, content, status, priority}]}` replaces the whole list (status one
 *   of {@link TODO_STATUSES}, priority one of {@link TODO_PRIORITIES}, at most
 *   {@link TODO_MAX_ITEMS} items, ids unique: else a tool error naming the problem and nothing
 *   is written) and returns it.
 * - `todoread {}` returns the stored list.
 *
 * Each returns `{ title: "<N> todos", output, metadata: { todos } }` as OpenCode does: `N` counts
 * the items not `completed`, `output` is the list as JSON indented by two spaces
 * (`JSON.stringify(todos, null, 2)`), `metadata.todos` the list itself.
 *
 * @throws ToolInputError from `todowrite` when two items share an id (`todos[i].id: "<id>" is used
 *   twice; ids must be unique`); other bad inputs fail the AI SDK's input validation first.
 * @throws whatever `list` throws (`SessionNotFoundError` when the session is gone); every error
 *   becomes a tool error the model sees.
 */
export function todoDefinitions(list: TodoList): [ToolDefinition<TodoWriteInput>, ToolDefinition<Record<string, never>>] {
  return [
    {
      id: "todowrite",
      description:
        "Create and manage a structured task list for the current session: send the whole updated list each time " +
        "(it replaces the previous one). Use it for multi-step tasks; keep one task in_progress at a time and mark " +
        "tasks completed as soon as they are done.",
      inputSchema: z.object({ todos: z.array(todoItem).max(TODO_MAX_ITEMS).describe("The updated todo list") }),
      execute: async (input) => {
        checkList(input.todos);
        const todos = input.todos.map(({ id, content, status, priority }) => ({ id, content, status, priority }));
        await list.write(todos);
        return todoOutput(todos);
      },
    },
    {
      id: "todoread",
      description: "Read the session's current todo list.",
      inputSchema: z.object({}) as unknown as z.ZodType<Record<string, never>>,
      execute: async () => todoOutput(await list.read()),
    },
  ];
}

/** What both tools return for `todos` (see {@link todoDefinitions}). */
export function todoOutput(todos: TodoItem[]): ToolOutput {
  return {
    title: `${todos.filter((t) => t.status !== "completed").length} todos`,
    output: JSON.stringify(todos, null, 2),
    metadata: { todos },
  };
}

function checkList(todos: TodoItem[]): void {
  const seen = new Set<string>();
  for (const [i, todo] of todos.entries()) {
    if (seen.has(todo.id)) throw new ToolInputError(`todos[${i}].id: "${todo.id}" is used twice; ids must be unique`);
    seen.add(todo.id);
  }
}
