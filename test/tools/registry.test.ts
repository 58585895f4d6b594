import { create } from "@bufbuild/protobuf";
import { asSchema, type ToolExecutionOptions, type ToolSet } from "ai";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PermissionAction, PermissionRuleSchema, type PermissionRule } from "../../gen/ledger/v1/session_pb.js";
import { BUILT_IN_AGENTS, type AgentInfo } from "../../src/config/agents.js";
import { isAllowed, permissionRules } from "../../src/tools/permission.js";
import { createTools } from "../../src/tools/registry.js";
import { decide, evaluate } from "../../src/tools/permission.js";
import type { TaskRunner } from "../../src/tools/task.js";
import type { TodoItem, TodoList } from "../../src/tools/todo.js";
import { errorOf as rejection } from "../support/errors.js";
import { aborted, toolTree, type ToolTree } from "../support/tool-tree.js";

const [build, , general] = BUILT_IN_AGENTS;
const rule = (permission: string, allow: boolean): PermissionRule =>
  create(PermissionRuleSchema, { permission, action: allow ? PermissionAction.ALLOW : PermissionAction.DENY });
const agent = (permission: AgentInfo["permission"]): AgentInfo => ({ ...build!, name: "custom", permission });
const call = (abortSignal?: AbortSignal): ToolExecutionOptions => ({ toolCallId: "call_1", messages: [], abortSignal });
const run = (tools: ToolSet, name: string, input: unknown, options = call()): Promise<unknown> => tools[name]!.execute!(input, options);

let t: ToolTree;
beforeAll(async () => {
  t = await toolTree("registry-");
  await t.write("a.txt", "one\n");
});
afterAll(() => t.cleanup());

describe("isAllowed", () => {
  it("uses the agent's map: the tool's own entry, then `*`, then allow", () => {
    expect(isAllowed(agent({ read: "deny", "*": "allow" }), [], "read")).toBe(false);
    expect(isAllowed(agent({ "*": "deny" }), [], "grep")).toBe(false);
    expect(isAllowed(agent({ "*": "deny", grep: "allow" }), [], "grep")).toBe(true);
    expect(isAllowed(agent({}), [], "glob")).toBe(true);
  });

  it("counts `ask` as not allowed (createTools asks through its asker)", () => {
    expect(isAllowed(agent({ read: "ask" }), [], "read")).toBe(false);
  });

  it("weighs pattern maps, the last matching pattern winning", () => {
    const rules = permissionRules(agent({ "*": "allow", bash: { "*": "ask", "git status*": "allow", "rm *": "deny" } }), []);
    expect(evaluate(rules, "bash", "git status --short")).toBe("allow");
    expect(evaluate(rules, "bash", "rm -rf /")).toBe("deny");
    expect(evaluate(rules, "bash", "ls")).toBe("ask");
    expect(evaluate(rules, "read", "a.txt")).toBe("allow");
    expect(decide(rules, "bash", ["git status", "rm x"])).toBe("deny");
    expect(decide(rules, "bash", ["git status", "ls"])).toBe("ask");
  });

  it("lets the session's rules win over the agent's map, the last matching rule first", () => {
    expect(isAllowed(agent({ read: "deny" }), [rule("read", true)], "read")).toBe(true);
    expect(isAllowed(agent({ "*": "allow" }), [rule("read", false)], "read")).toBe(false);
    expect(isAllowed(agent({ "*": "allow" }), [rule("read", true), rule("*", false)], "read")).toBe(false);
    expect(isAllowed(agent({ "*": "allow" }), [rule("*", false), rule("read", true)], "read")).toBe(true);
    expect(isAllowed(agent({ "*": "allow" }), [rule("grep", false)], "read")).toBe(true);
  });
});

describe("createTools", () => {
  const runTask: TaskRunner = async (input) => ({ title: input.description, output: `ran ${input.agent}`, metadata: {} });
  const options = { agent: build!, rules: [], subagents: ["general", "explore"], runTask };

  it("offers read, list, glob and grep, then task for a primary agent with subagents", () => {
    expect(Object.keys(createTools({ ...options, context: t.ctx }))).toEqual([
      "read",
      "list",
      "glob",
      "grep",
      "write",
      "edit",
      "bash",
      "task",
    ]);
  });

  it("leaves bash out for a session that may run no commands (a tenant without tenants.<name>.commands)", () => {
    const all = Object.keys(createTools({ ...options, context: t.ctx }));
    expect(Object.keys(createTools({ ...options, context: t.ctx, withoutCommands: true }))).toEqual(all.filter((id) => id !== "bash"));
  });

  it("leaves task out without a runner, for a subagent, and without subagents", () => {
    const builtin = ["read", "list", "glob", "grep", "write", "edit", "bash"];
    expect(Object.keys(createTools({ ...options, context: t.ctx, runTask: undefined }))).toEqual(builtin);
    expect(Object.keys(createTools({ ...options, context: t.ctx, agent: general! }))).toEqual(builtin);
    expect(Object.keys(createTools({ ...options, context: t.ctx, subagents: [] }))).toEqual(builtin);
  });

  it("offers todowrite and todoread after task with a todo list; plan may use them, the built-in subagents may not", async () => {
    let stored: TodoItem[] = [];
    const todos: TodoList = { read: async () => stored, write: async (list) => void (stored = list) };
    expect(Object.keys(createTools({ ...options, context: t.ctx, todos })).slice(-3)).toEqual(["task", "todowrite", "todoread"]);
    const list = [{ id: "1", content: "c", status: "pending", priority: "high" }];
    const tools = createTools({ ...options, context: t.ctx, todos });
    expect(await run(tools, "todowrite", { todos: list })).toEqual({
      title: "1 todos",
      output: JSON.stringify(list, null, 2),
      metadata: { todos: list },
    });
    expect(stored).toEqual(list);
    expect(await run(tools, "todoread", {})).toMatchObject({ title: "1 todos", output: JSON.stringify(list, null, 2) });
    const byName = new Map(BUILT_IN_AGENTS.map((a) => [a.name, a]));
    for (const tool of ["todowrite", "todoread"]) {
      expect([...byName.values()].filter((a) => isAllowed(a, [], tool)).map((a) => a.name)).toEqual(["build", "plan"]);
    }
    // Denied outright: the general subagent is not offered them at all.
    const denied = createTools({ ...options, context: t.ctx, agent: general!, todos });
    expect(Object.keys(denied).filter((id) => id.startsWith("todo"))).toEqual([]);
  });

  it("describes task with the subagents and accepts only their names", async () => {
    const task = createTools({ ...options, context: t.ctx }).task!;
    expect(task.description).toBe(
      "Run a subagent on a focused task in a child session and get its final answer. Subagents: general, explore.",
    );
    expect(await asSchema(task.inputSchema).jsonSchema).toMatchObject({
      properties: { subagent_type: { type: "string", enum: ["general", "explore"] } },
      required: ["description", "prompt", "subagent_type"],
    });
  });

  it("runs a tool in the session directory", async () => {
    const output = await run(createTools({ ...options, context: t.ctx }), "read", { filePath: "a.txt" });
    const path = join(t.session, "a.txt");
    expect(output).toEqual({
      title: "a.txt",
      output: `<path>${path}</path>\n<type>file</type>\n<content>\n1: one\n\n(End of file - total 1 lines)\n</content>`,
      metadata: { truncated: false, totalLines: 1 },
    });
  });

  it("runs a tool with the call's abort signal in place of the context's", async () => {
    const tools = createTools({ ...options, context: aborted(t.ctx) });
    expect(await run(tools, "read", { filePath: "a.txt" }, call(new AbortController().signal))).toMatchObject({ title: "a.txt" });
    expect((await rejection(run(tools, "read", { filePath: "a.txt" }))).name).toBe("AbortError");
  });

  it("does not offer a tool denied outright (OpenCode PermissionNext.disabled): by the session, the agent, or a wildcard", async () => {
    const all = Object.keys(createTools({ ...options, context: t.ctx }));
    const offered = (o: Partial<Parameters<typeof createTools>[0]>) => Object.keys(createTools({ ...options, context: t.ctx, ...o }));
    expect(offered({ rules: [rule("read", false)] })).toEqual(all.filter((id) => id !== "read"));
    expect(offered({ agent: agent({ task: "deny" }) })).toEqual(all.filter((id) => id !== "task"));
    expect(offered({ agent: agent({ "*": "deny", read: "allow" }) })).toEqual(["read"]);
    // A later allow on the session brings it back; a deny on some patterns only keeps it offered.
    expect(offered({ agent: agent({ read: "deny" }), rules: [rule("read", true)] })).toEqual(all);
    expect(offered({ agent: agent({ bash: { "rm *": "deny" } }) })).toEqual(all);
  });

  it("refuses a call the agent may not make on its pattern, naming the agent, the tool and the pattern", async () => {
    const tools = createTools({ ...options, context: t.ctx, agent: agent({ bash: { "rm *": "deny" } }) });
    expect((await rejection(run(tools, "bash", { command: "rm -rf x", description: "remove" }))).message).toBe(
      'permission denied: the custom agent may not use the bash tool on "rm -rf x"',
    );
  });

  it("passes task the subagent's name and the call's abort signal", async () => {
    const seen: { input: Parameters<TaskRunner>[0]; signal: AbortSignal }[] = [];
    const spy: TaskRunner = async (input, signal) => {
      seen.push({ input, signal });
      return { title: "t", output: "done", metadata: {} };
    };
    const tools = createTools({ ...options, context: t.ctx, runTask: spy });
    const controller = new AbortController();
    const input = { description: "dig", prompt: "look around", subagent_type: "explore" };
    expect(await run(tools, "task", input, call(controller.signal))).toEqual({ title: "t", output: "done", metadata: {} });
    expect(seen).toEqual([{ input: { description: "dig", prompt: "look around", agent: "explore" }, signal: controller.signal }]);
  });

  describe("task is weighed on the subagent's name (OpenCode task.ts)", () => {
    const described = (tools: ToolSet) => tools.task?.description?.replace(/.*Subagents: /, "");

    it("offers only the subagents the task map does not deny: a later allow for one name brings it back", () => {
      const tools = (permission: AgentInfo["permission"]) => createTools({ ...options, context: t.ctx, agent: agent(permission) });
      expect(described(tools({ task: { "*": "deny", explore: "allow" } }))).toBe("explore.");
      expect(described(tools({ task: { "*": "allow", general: "deny" } }))).toBe("explore.");
      expect(described(tools({ task: { "*": "ask" } }))).toBe("general, explore.");
      expect(tools({ task: { general: "deny", explore: "deny" } }).task).toBeUndefined();
    });

    it("asks with the subagent's name as the pattern and the task's description, and runs it once allowed", async () => {
      const asked: unknown[] = [];
      const tools = createTools({
        ...options,
        context: t.ctx,
        agent: agent({ task: { "*": "ask", explore: "allow" } }),
        asker: async (request) => void asked.push(request),
      });
      expect(await run(tools, "task", { description: "dig", prompt: "p", subagent_type: "general" })).toMatchObject({
        output: "ran general",
      });
      expect(await run(tools, "task", { description: "look", prompt: "p", subagent_type: "explore" })).toMatchObject({
        output: "ran explore",
      });
      expect(asked).toEqual([
        { permission: "task", patterns: ["general"], metadata: { description: "dig", subagent_type: "general" }, callId: "call_1" },
      ]);
    });

    it("refuses a denied subagent by name (a call the model makes outside the offered list)", async () => {
      const tools = createTools({ ...options, context: t.ctx, agent: agent({ task: { "*": "allow", general: "deny" } }) });
      expect((await rejection(run(tools, "task", { description: "d", prompt: "p", subagent_type: "general" }))).message).toBe(
        'permission denied: the custom agent may not use the task tool on "general"',
      );
    });

    it("offers and runs a subagent the user named though its name is denied, without asking (bypassAgentCheck, for that name only)", async () => {
      const asked: unknown[] = [];
      const tools = createTools({
        ...options,
        context: t.ctx,
        agent: agent({ task: { "*": "deny", explore: "ask" } }),
        mentioned: ["general"],
        asker: async (request) => void asked.push(request),
      });
      expect(described(tools)).toBe("general, explore.");
      expect(await run(tools, "task", { description: "d", prompt: "p", subagent_type: "general" })).toMatchObject({
        output: "ran general",
      });
      expect(asked).toEqual([]);
      await run(tools, "task", { description: "d", prompt: "p", subagent_type: "explore" });
      expect(asked).toEqual([expect.objectContaining({ permission: "task", patterns: ["explore"] })]);
    });

    it("does not offer a task denied outright, mentions or not (OpenCode drops the tool too)", () => {
      expect(createTools({ ...options, context: t.ctx, agent: agent({ task: "deny" }), mentioned: ["explore"] }).task).toBeUndefined();
      expect(createTools({ ...options, context: t.ctx, rules: [rule("task", false)], mentioned: ["explore"] }).task).toBeUndefined();
    });

    it("takes the step's snapshot before write, edit and bash only, not before task or read", async () => {
      const changes: string[] = [];
      const tools = createTools({ ...options, context: t.ctx, beforeChange: async () => void changes.push("snapshot") });
      await run(tools, "task", { description: "d", prompt: "p", subagent_type: "explore" });
      await run(tools, "read", { filePath: "a.txt" });
      expect(changes).toEqual([]);
      await run(tools, "write", { filePath: "b.txt", content: "two\n" });
      expect(changes).toEqual(["snapshot"]);
    });
  });

  it("gives task a signal that never aborts when neither the call nor the context has one", async () => {
    let signal: AbortSignal | undefined;
    const spy: TaskRunner = async (_input, s) => {
      signal = s;
      return { title: "", output: "", metadata: {} };
    };
    const tools = createTools({ ...options, context: t.ctx, runTask: spy });
    await run(tools, "task", { description: "d", prompt: "p", subagent_type: "general" });
    expect(signal).toBeInstanceOf(AbortSignal);
    expect(signal?.aborted).toBe(false);
  });
});
