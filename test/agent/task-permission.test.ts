import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ToolPart } from "../../gen/ledger/v1/part_pb.js";
import { startFakeModelLedger, type FakeModelLedger } from "../support/ledger.js";
import { text } from "../support/prompt.js";

// The `task` permission through the real service and loop (OpenAI-compatible wire, local server):
// the model is offered the subagents its agent's rules do not deny by name, plus those the user
// named in the prompt (a hidden one too), and a named one runs without the `task` check.

let t: FakeModelLedger;

beforeAll(async () => {
  t = await startFakeModelLedger({
    retry: { attempts: 0 },
    agent: {
      build: { permission: { task: { "*": "deny", explore: "allow" } } },
      scout: { mode: "subagent", hidden: true, description: "hidden helper" },
    },
  });
});
afterAll(() => t?.close());

type Tool = { function: { name: string; parameters: { properties: { subagent_type?: { enum?: string[] } } } } };
/** The subagents request `i` offered through the task tool, or undefined without one. */
const offered = (i: number) =>
  (t.fake.requests[i]!.body.tools as Tool[] | undefined)?.find((tool) => tool.function.name === "task")?.function.parameters.properties
    .subagent_type?.enum;
const taskCall = (agent: string) => ({
  kind: "stream" as const,
  chunks: [
    {
      toolCall: {
        id: `call_${agent}`,
        name: "task",
        arguments: JSON.stringify({ description: "d", prompt: "look", subagent_type: agent }),
      },
    },
  ],
});

describe("the task tool's subagents", () => {
  it("offers only explore without a mention; a mentioned general and hidden scout are offered and run without the check", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const before = t.fake.requests.length;
    t.fake.push({ kind: "stream", chunks: [{ text: "no task needed" }] });
    await t.client.prompt({ sessionId, parts: [text("hi")] });
    expect(offered(before)).toEqual(["explore"]);

    const mentioned = t.fake.requests.length;
    t.fake.push(taskCall("scout"), { kind: "stream", chunks: [{ text: "scouted" }] }, { kind: "stream", chunks: [{ text: "done" }] });
    const res = await t.client.prompt({
      sessionId,
      parts: [
        text("ask them"),
        { kind: { case: "agent", value: { name: "general" } } },
        { kind: { case: "agent", value: { name: "scout" } } },
      ],
    });
    expect(offered(mentioned)).toEqual(["general", "explore", "scout"]);
    const { messages } = await t.client.listMessages({ sessionId });
    const task = messages.flatMap((m) => m.parts).find((p) => p.kind.case === "tool")!.kind.value as ToolPart;
    expect([task.tool, task.state?.status.case]).toEqual(["task", "completed"]);
    expect(res.message!.parts.flatMap((p) => (p.kind.case === "text" ? [p.kind.value.text] : []))).toEqual(["done"]);
  });
});
