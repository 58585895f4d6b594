import { create } from "@bufbuild/protobuf";
import { CreateSessionRequestSchema, PromptRequestSchema } from "../../gen/ledger/v1/service_pb.js";
import { isHint, type BusItem } from "../events/bus.js";
import type { LedgerDeps, Replier } from "../ledger/deps.js";
import { finalAnswer } from "../ledger/answer.js";
import { applyRevert } from "../ledger/revert.js";
import { sessionLedger } from "../ledger/session-ledger.js";
import { storePrompt } from "../ledger/store-prompt.js";
import { writeSession } from "../ledger/writer.js";
import { createSession } from "../ledger/sessions.js";
import { routeModelWarnings } from "./model-warnings.js";
import { LockPoolExhaustedError, SessionBusyError, SessionNotFoundError, ShuttingDownError } from "../errors.js";
import { lastStatusEvents } from "../storage/event-store.js";
import { getSessionRow, rowToSession, sessionExists as sessionRowExists } from "../storage/session-store.js";
import type { ToolOutput } from "../tools/tool-context.js";
import type { LoopDeps } from "./loop-deps.js";
import type { ModelResolver } from "./providers.js";
import { logger } from "../observe/log.js";
import { LoopHandedOver } from "./hand-over.js";
import { recoverSession } from "./recovery.js";
import type { Release, SessionLocks } from "./session-lock.js";
import type { TaskRunner } from "../tools/task.js";

interface Running {
  controller: AbortController;
  /** Set when a prompt arrived while the loop ran: look again before going idle for good. */
  wake: boolean;
  /** A user message whose interrupted answer the next run continues (ResumeSession). */
  resume?: string;
  /** The loop has stopped looking for work and is releasing the lock. */
  finishing: boolean;
  /** The session was deleted (a `session_deleted` on the bus, or its row found missing). */
  deleted: boolean;
  /** Why the run could not start: no session-lock connection was free, or (after an `exclusive` run) the hand-over came. */
  failure?: LockPoolExhaustedError | ShuttingDownError;
  /** It holds the session's lock (a run still waiting for another replica's lock does not). */
  holding: boolean;
  done: Promise<void>;
}

/**
 * The agent loop's `runLoop`, imported on first use: the loop brings the AI SDK (`ai`, its
 * gateway provider) and the model tools, which a ledger that only stores noReply prompts never
 * needs, so they stay out of the start-up time and the idle memory.
 */
function loadLoop(): Promise<(typeof import("./loop.js"))["runLoop"]> {
  return import("./loop.js").then((mod) => mod.runLoop);
}

/**
 * One agent loop per session (OpenCode `SessionPrompt` runner state), across processes through
 * `locks`: a run first takes the session's lock (waiting while another replica runs the
 * session), then loops until every user message is answered, then looks again before releasing.
 * A prompt for a session whose loop runs here joins it; one stored on another replica is picked
 * up by the lock holder's next look or, after it releases, by the waiting run of that replica.
 * `abort` cancels the loop (or the wait) through its `AbortSignal`.
 *
 * A run listens on the bus for its session's `session_deleted` (DeleteSession here, the relay
 * for a deletion on another replica or found after a listener reconnect) and aborts; so does a
 * subagent run for its child session. That listener (and one held by an `exclusive` run) also
 * makes the session watched on the bus, from the wait for the lock to its release, so the NATS
 * relay, which subscribes only to watched sessions, delivers the session's abort requests and
 * deletion notices to the replica that runs it. A loop whose session is gone (deleted, or its row found
 * missing after a failed write) ends with one `info` line "agent loop stopped: session deleted"
 * instead of an error, and releases its lock. A run that cannot start because every
 * session-lock connection is taken (`limits.lock_connections`) logs a `warn` line and its
 * `run()` promise rejects with `LockPoolExhaustedError`, so the caller's client is told
 * (Prompt, PromptStream, Command, ResumeSession); the prompt stays stored for ResumeSession.
 */
export function createRunner(deps: LedgerDeps, models: ModelResolver, locks: SessionLocks): Replier {
  // The AI SDK's warnings about a model's settings go to the structured log, once per kind.
  routeModelWarnings();
  const running = new Map<string, Running>();
  const loopDeps: LoopDeps = { ...deps, models, runTask: (parent) => taskRunner({ ...deps, models }, locks, parent) };

  const start = (sessionId: string, resume?: string): Running => {
    const entry: Running = {
      controller: new AbortController(),
      wake: false,
      resume,
      finishing: false,
      deleted: false,
      holding: false,
      done: Promise.resolve(),
    };
    const signal = entry.controller.signal;
    const unsubscribe = deps.bus.subscribe(sessionId, (item) => {
      if (!isDeletion(item)) return;
      entry.deleted = true;
      entry.controller.abort();
    });
    entry.done = (async () => {
      let release: Release | undefined;
      try {
        // If the lock's connection drops, another replica may start on this session: stop here.
        release = await locks.acquire(sessionId, signal, () => entry.controller.abort());
        entry.holding = true;
        // Holding the lock, nothing else writes this session: close what a dead holder left open.
        await recoverSession(deps, sessionId);
        do {
          entry.wake = false;
          const resumeNow = entry.resume;
          entry.resume = undefined;
          await (
            await loadLoop()
          )(loopDeps, sessionId, signal, { resume: resumeNow });
        } while (entry.wake && !signal.aborted);
        entry.finishing = true;
      } catch (error) {
        if (error instanceof LockPoolExhaustedError) {
          entry.failure = error;
          logger.warn("agent loop not started: no session-lock connection free", {
            session_id: sessionId,
            limit: error.limit,
            max: error.max,
          });
          return;
        }
        // Its writes fail once the row is gone, possibly before the deletion notice arrives.
        if (!entry.deleted && !signal.aborted && !(await sessionExists(deps, sessionId))) entry.deleted = true;
        if (entry.deleted) {
          entry.controller.abort(); // a model request or tool still in flight
          logger.info("agent loop stopped: session deleted", { session_id: sessionId });
        } else if (!signal.aborted) {
          logger.error("agent loop failed", { session_id: sessionId, error });
          // Only while holding the lock (taking it may have failed: another replica may be running
          // the session): stop what is still in flight (a tool call), then close the answer it
          // left open (waiting callers get it, with its error, instead of waiting for an answer
          // nothing writes) and return the session to idle.
          if (!entry.holding) return;
          entry.controller.abort();
          await recoverSession(deps, sessionId, "the agent loop failed (the server's log has the cause); ResumeSession retries it").catch(
            (cause: unknown) => logger.error("closing the failed loop's answer failed", { session_id: sessionId, error: cause }),
          );
        }
      } finally {
        entry.finishing = true;
        unsubscribe();
        await release?.();
        running.delete(sessionId);
      }
    })();
    running.set(sessionId, entry);
    return entry;
  };

  const abortHere = async (sessionId: string): Promise<boolean> => {
    const entry = running.get(sessionId);
    if (!entry || entry.finishing) return false;
    entry.controller.abort();
    await entry.done;
    return true;
  };
  deps.relay?.onAbort((sessionId) => void abortHere(sessionId));

  /** Resolves when `entry`'s run ended; rejects with its `failure` when it could not start. */
  const ended = (entry: Running): Promise<void> =>
    entry.done.then(() => {
      if (entry.failure) throw entry.failure;
    });

  // Set by handOver: this replica starts no loop any more (a prompt stored in the last moment is
  // left for ResumeSession on another replica, instead of a loop that would hold the shutdown).
  let closed = false;

  const run = (sessionId: string, options: { resume?: string } = {}): Promise<void> => {
    if (closed) return Promise.reject(new ShuttingDownError(sessionId));
    const entry = running.get(sessionId);
    if (!entry) return ended(start(sessionId, options.resume));
    // A loop that stopped looking (or is being aborted) would miss this prompt: run again once it has let go.
    if (entry.finishing || entry.controller.signal.aborted) return entry.done.then(() => run(sessionId, options));
    entry.wake = true;
    entry.resume ??= options.resume;
    return ended(entry);
  };

  const replier: Replier = {
    available: models.configured,
    run,
    async abort(sessionId) {
      if (await abortHere(sessionId)) return true;
      if (!deps.relay) return false;
      // Another replica may hold the session: ask them all, and report whether the log says it runs.
      await deps.relay.requestAbort(sessionId);
      return runningSomewhere(deps, sessionId);
    },
    // A run that stopped looking for work (it wrote its idle) is only releasing the lock: a client
    // that calls right after its Prompt returned (UpdatePart, Revert) must not find it busy.
    isRunning: (sessionId) => {
      const entry = running.get(sessionId);
      return entry !== undefined && !entry.finishing;
    },
    async exclusive(sessionId, fn) {
      if (closed) throw new ShuttingDownError(sessionId, false);
      const current = running.get(sessionId);
      // A run that has stopped looking for work is only releasing the lock (a client may call right after its Prompt returned).
      if (current?.finishing) await current.done;
      if (running.has(sessionId)) throw new SessionBusyError(sessionId);
      const release = await locks.tryAcquire(sessionId);
      if (!release) throw new SessionBusyError(sessionId);
      let settle!: () => void;
      const entry: Running = {
        controller: new AbortController(),
        wake: false,
        finishing: false,
        deleted: false,
        holding: true,
        done: new Promise<void>((resolve) => (settle = resolve)),
      };
      running.set(sessionId, entry);
      // Watched while it runs, like a loop: the NATS relay then delivers this session's abort
      // requests here, and a deletion (here or on another replica) aborts it as it aborts a loop.
      const unsubscribe = deps.bus.subscribe(sessionId, (item) => {
        if (!isDeletion(item)) return;
        entry.deleted = true;
        entry.controller.abort();
      });
      try {
        await recoverSession(deps, sessionId);
        return await fn(entry.controller.signal);
      } finally {
        unsubscribe();
        entry.finishing = true;
        running.delete(sessionId);
        await release();
        // A prompt that joined meanwhile is answered now, through `run` (which joins a loop a prompt
        // started while the lock was being released); when no run can start (the hand-over came,
        // no lock connection is free) its waiters are told why, as for any run.
        if (!entry.wake) settle();
        else
          run(sessionId).then(settle, (error: LockPoolExhaustedError | ShuttingDownError) => {
            entry.failure = error;
            settle();
          });
      }
    },
    summarize: (sessionId, request) =>
      replier.exclusive(sessionId, async (signal) => {
        request.enter?.();
        const { compactSession } = await import("./compaction.js");
        const session = await getSessionRow(deps.db, sessionId);
        // A pending revert is carried out first, as a prompt or Shell does: the summary must not land past it.
        if (session && rowToSession(session).revert) await writeSession(deps, sessionId, (w) => applyRevert(w));
        const ledger = sessionLedger(deps, sessionId);
        await ledger.setStatus({ case: "busy", value: {} });
        try {
          return await compactSession(loopDeps, ledger, sessionId, { model: request.model, agent: request.agent, auto: false, signal });
        } finally {
          await ledger.setStatus({ case: "idle", value: {} });
        }
      }),
    async stopAll() {
      const entries = [...running.values()];
      for (const entry of entries) entry.controller.abort();
      await Promise.all(entries.map((e) => e.done));
    },
    activeRuns: () => [...running.values()].filter((e) => e.holding).length,
    async handOver() {
      closed = true;
      const entries = [...running.values()];
      for (const entry of entries) entry.controller.abort(new LoopHandedOver());
      await Promise.all(entries.map((e) => e.done));
    },
  };
  return replier;
}

/** True for a `session_deleted` event. */
function isDeletion(item: BusItem): boolean {
  return !isHint(item) && item.kind.case === "sessionDeleted";
}

/** Whether the session's row exists; true when the database cannot tell (so errors stay errors). */
async function sessionExists(deps: LedgerDeps, sessionId: string): Promise<boolean> {
  return sessionRowExists(deps.db, sessionId).catch(() => true);
}

/** Whether the session's last status event says a loop runs (on any replica). */
async function runningSomewhere(deps: LedgerDeps, sessionId: string): Promise<boolean> {
  const [last] = await lastStatusEvents(deps.db, sessionId);
  return last?.kind.case === "sessionStatus" && last.kind.value.status.case !== "idle";
}

/**
 * The task tool's runner for sessions whose parent is `parentSessionId`: a child session
 * (`parent_id` set, same directory) gets the prompt as a user message for the subagent, its
 * loop runs to the end under the caller's signal, and the final text is the tool output. When
 * the child session is deleted meanwhile (here or on another replica) its loop is aborted and
 * the tool output says so; the parent's loop goes on (unless it was deleted too).
 */
function taskRunner(deps: LedgerDeps & { models: ModelResolver }, locks: SessionLocks, parentSessionId: string): TaskRunner {
  return async (input, signal): Promise<ToolOutput> => {
    const parent = await getSessionRow(deps.db, parentSessionId);
    if (!parent) throw new SessionNotFoundError(parentSessionId);
    const child = await createSession(
      deps,
      create(CreateSessionRequestSchema, {
        directory: parent.directory,
        title: `${input.description} (@${input.agent} subagent)`,
        parentId: parentSessionId,
        agent: input.agent,
      }),
    );
    const stored = await storePrompt(
      deps,
      create(PromptRequestSchema, {
        sessionId: child.id,
        agent: input.agent,
        model: input.model,
        parts: [{ kind: { case: "text", value: { text: input.prompt } } }],
      }),
    );
    const gone = new AbortController();
    const unsubscribe = deps.bus.subscribe(child.id, (item) => {
      if (isDeletion(item)) gone.abort();
    });
    const childSignal = AbortSignal.any([signal, gone.signal]);
    const deletedOutput = (): ToolOutput => ({
      title: input.description,
      output: `The subagent's session ${child.id} was deleted before it answered.`,
      metadata: { sessionId: child.id, agent: input.agent },
    });
    try {
      // The child's loop holds the child's lock like any run, so recovery elsewhere leaves it alone.
      const release = await locks.acquire(child.id, childSignal);
      try {
        await (
          await loadLoop()
        )({ ...deps }, child.id, childSignal);
      } finally {
        await release();
      }
    } catch (error) {
      if (signal.aborted) throw error;
      if (gone.signal.aborted || !(await sessionExists(deps, child.id))) {
        gone.abort();
        return deletedOutput();
      }
      throw error;
    } finally {
      unsubscribe();
    }
    if (gone.signal.aborted) return deletedOutput();
    const userId = stored.message.message?.kind.value?.id ?? "";
    const answer = await finalAnswer(deps, child.id, userId);
    const text = (answer?.parts ?? [])
      .flatMap((p) => (p.kind.case === "text" && !p.kind.value.synthetic ? [p.kind.value.text] : []))
      .join("\n");
    const failed = answer?.message?.kind.case === "assistant" ? answer.message.kind.value.error?.message : "the subagent did not answer";
    return {
      title: input.description,
      output: failed ? `The subagent failed: ${failed}\n${text}` : `${text}\n\n<task_metadata>\nsession_id: ${child.id}\n</task_metadata>`,
      metadata: { sessionId: child.id, agent: input.agent },
    };
  };
}
