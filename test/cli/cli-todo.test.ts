import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../support/cli.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import type { ScriptedReply } from "../support/openai-server.js";

// The CLI side of the todo list (issue 16 item 5), in-process (`main(argv, io)`) against a
// running server (--url) answered by the fake OpenAI server: `ledger prompt` prints the list each
// time a `todo_updated` event arrives, `ledger todo` prints GetTodo.

let t: FakeModelLedger;
beforeAll(async () => {
  t = await startFakeModelLedger({ retry: { attempts: 0 } });
});
afterAll(async () => {
  await t?.close();
});

const todowrite = (id: string, todos: unknown[]): ScriptedReply => ({
  kind: "stream",
  chunks: [{ toolCall: { id, name: "todowrite", arguments: JSON.stringify({ todos }) } }],
});
const place = () => ({ cwd: t.dir, env: { PATH: process.env.PATH } });

const FIRST = [
  { id: "1", content: "Read the parser", status: "in_progress", priority: "high" },
  { id: "2", content: "Add a test", status: "pending", priority: "medium" },
];
const SECOND = [
  { id: "1", content: "Read the parser", status: "completed", priority: "high" },
  { id: "2", content: "Add a test", status: "in_progress", priority: "medium" },
  { id: "3", content: "Drop the old lexer", status: "cancelled", priority: "low" },
];

describe("ledger prompt and ledger todo", () => {
  it("prints the list when the model changes it, and `ledger todo` prints the stored list", async () => {
    t.fake.push(todowrite("call_1", FIRST), todowrite("call_2", SECOND), { kind: "stream", chunks: [{ text: "Planned." }] });
    const run = await runCli(["prompt", "--url", t.ledger.url, "--dir", t.dir, "plan the fix"], place());
    expect(run.code, run.stderr).toBe(0);
    const sessionId = /^session (ses_\S+)$/m.exec(run.stdout)![1]!;
    const lines = run.stdout.split("\n");
    const from = (header: string, n: number) => lines.slice(lines.indexOf(header), lines.indexOf(header) + n + 1);
    expect(from("todos (0/2 done):", 2)).toEqual(["todos (0/2 done):", "  [~] Read the parser  (high)", "  [ ] Add a test  (medium)"]);
    expect(from("todos (1/3 done):", 3)).toEqual([
      "todos (1/3 done):",
      "  [x] Read the parser  (high)",
      "  [~] Add a test  (medium)",
      "  [-] Drop the old lexer  (low)",
    ]);
    expect(lines.indexOf("todos (0/2 done):")).toBeLessThan(lines.indexOf("todos (1/3 done):"));
    expect(run.stdout).toContain("✓ todowrite 2 items\n");
    expect(run.stdout).toContain("✓ todowrite 3 items\n");
    expect(run.stdout).toContain("Planned.");

    const todo = await runCli(["todo", sessionId, "--url", t.ledger.url], place());
    expect(todo).toMatchObject({
      code: 0,
      stdout: "todos (1/3 done):\n  [x] Read the parser  (high)\n  [~] Add a test  (medium)\n  [-] Drop the old lexer  (low)\n",
    });
    const json = await runCli(["todo", sessionId, "--url", t.ledger.url, "--json"], place());
    expect(
      json.stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as unknown),
    ).toEqual(SECOND);
  });

  it("`ledger todo` says none for a session without a list, and fails with NOT_FOUND for an unknown one", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    expect(await runCli(["todo", sessionId, "--url", t.ledger.url], place())).toMatchObject({ code: 0, stdout: "todos: none\n" });
    const unknown = sessionId.slice(0, -1) + (sessionId.endsWith("0") ? "1" : "0");
    const missing = await runCli(["todo", unknown, "--url", t.ledger.url], place());
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe(`error: NotFound: session_id: session ${unknown} not found\n`);
  });
});
