import { create } from "@bufbuild/protobuf";
import { CreateSessionRequestSchema, PromptRequestSchema } from "../../gen/ledger/v1/service_pb.js";
import type { LedgerDeps, Replier } from "../ledger/deps.js";
import { finalAnswer } from "../ledger/answers.js";
import { storePrompt } from "../ledger/prompt.js";
import { createSession } from "../ledger/sessions.js";
import type { ToolOutput } from "../tools/tool-context.js";
import { runLoop, type LoopDeps } from "./loop.js";
import type { ModelResolver } from "./providers.js";
import type { TaskRunner } from "./tools.js";

interface Running {
  controller: AbortController;
  /** Set when a prompt arrived while the loop ran: look again before going idle for good. */
  wake: boolean;
  done: Promise<void>;
}

/**
 * One agent loop per session in this process (OpenCode `SessionPrompt` runner state). A prompt
 * for a session whose loop runs joins it: the loop answers each stored user message in order
 * and looks again before it stops. `abort` cancels the loop through its `AbortSignal`.
 */
export function createRunner(deps: LedgerDeps, models: ModelResolver): Replier {
  const running = new Map<string, Running>();
  const loopDeps: LoopDeps = { ...deps, models, runTask: (parent) => taskRunner({ ...deps, models }, parent) };

  const start = (sessionId: string): Running => {
    const entry: Running = { controller: new AbortController(), wake: false, done: Promise.resolve() };
    entry.done = (async () => {
      try {
        do {
          entry.wake = false;
          await runLoop(loopDeps, sessionId, entry.controller.signal);
        } while (entry.wake && !entry.controller.signal.aborted);
      } catch (error) {
        process.stderr.write(`agent loop of ${sessionId} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
      } finally {
        running.delete(sessionId);
      }
    })();
    running.set(sessionId, entry);
    return entry;
  };

  return {
    available: models.configured,
    run(sessionId) {
      const entry = running.get(sessionId);
      if (entry) {
        entry.wake = true;
        return entry.done;
      }
      return start(sessionId).done;
    },
    async abort(sessionId) {
      const entry = running.get(sessionId);
      if (!entry) return false;
      entry.controller.abort();
      await entry.done;
      return true;
    },
    isRunning: (sessionId) => running.has(sessionId),
    async stopAll() {
      const entries = [...running.values()];
      for (const entry of entries) entry.controller.abort();
      await Promise.all(entries.map((e) => e.done));
    },
  };
}

/**
 * The task tool's runner for sessions whose parent is `parentSessionId`: a child session
 * (`parent_id` set, same directory) gets the prompt as a user message for the subagent, its
 * loop runs to the end under the caller's signal, and the final text is the tool output.
 */
function taskRunner(deps: LedgerDeps & { models: ModelResolver }, parentSessionId: string): TaskRunner {
  return async (input, signal): Promise<ToolOutput> => {
    const parent = await deps.db.selectFrom("session").select("directory").where("id", "=", parentSessionId).executeTakeFirstOrThrow();
    const child = await createSession(
      deps,
      create(CreateSessionRequestSchema, { directory: parent.directory, title: `${input.description} (@${input.agent} subagent)`, parentId: parentSessionId, agent: input.agent }),
    );
    const stored = await storePrompt(deps, create(PromptRequestSchema, { sessionId: child.id, agent: input.agent, model: input.model, parts: [{ kind: { case: "text", value: { text: input.prompt } } }] }));
    await runLoop({ ...deps }, child.id, signal);
    const userId = stored.message.message?.kind.value?.id ?? "";
    const answer = await finalAnswer(deps, child.id, userId);
    const text = (answer?.parts ?? []).flatMap((p) => (p.kind.case === "text" && !p.kind.value.synthetic ? [p.kind.value.text] : [])).join("\n");
    const failed = answer?.message?.kind.case === "assistant" ? answer.message.kind.value.error?.message : "the subagent did not answer";
    return {
      title: input.description,
      output: failed ? `The subagent failed: ${failed}\n${text}` : `${text}\n\n<task_metadata>\nsession_id: ${child.id}\n</task_metadata>`,
      metadata: { sessionId: child.id, agent: input.agent },
    };
  };
}
