import type { Kysely } from "kysely";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { ModelRef } from "../../gen/ledger/v1/model_pb.js";
import type { LedgerConfig } from "../config/config.js";
import type { EventBus } from "../events/bus.js";
import type { Relay } from "../events/relay.js";
import type { McpReader } from "../mcp/reader.js";
import type { LedgerMetrics } from "../observe/metrics.js";
import type { PluginHost } from "../plugins/plugins.js";
import type { DB } from "../storage/schema.js";
import type { Snapshots } from "../snapshot/snapshot.js";

/**
 * The stable dependencies of the ledger domain, built once at start and passed to every call:
 * the database, the in-process event bus, configuration and loaded plugins.
 */
export interface LedgerDeps {
  db: Kysely<DB>;
  bus: EventBus;
  /** Cross-replica fan-out (Postgres only). */
  relay?: Relay;
  config: LedgerConfig;
  plugins: PluginHost;
  /** Answers prompts (the agent loop); absent or unavailable when no model provider is configured. */
  replier?: Replier;
  /** Reads MCP resources for file parts; absent → every MCP resource read fails as not configured. */
  mcp?: McpReader;
  /** Where RPCs and loop steps are counted (Prometheus, `GET /metrics`). */
  metrics?: LedgerMetrics;
  /** Snapshots of session directories (steps' patches, GetDiff, Revert); absent → none are taken. */
  snapshots?: Snapshots;
}

/**
 * The agent loop as the ledger sees it: one runner per session. Implemented in `src/agent/`
 * and injected at start, so the ledger does not depend on the loop.
 */
export interface Replier {
  /** True when a model provider is configured, so prompts can be answered. */
  readonly available: boolean;
  /**
   * Makes sure the session's loop runs (starting it, or telling the running one to look again
   * for new user messages) and resolves when it has gone idle. Loop failures end up on
   * assistant messages; it rejects only when the loop could not start, nothing ran and the
   * prompts stay stored for ResumeSession: with `LockPoolExhaustedError` (RESOURCE_EXHAUSTED)
   * when no session-lock connection was free (`limits.lock_connections`), with
   * `ShuttingDownError` (UNAVAILABLE DRAINING) after the hand-over, also for a prompt that joined
   * a Shell or Summarize (`exclusive`) whose follow-up run could not start.
   */
  run(sessionId: string, options?: { resume?: string }): Promise<void>;
  /**
   * Cancels the session's running loop. Here: waits for it to stop and answers true. On Postgres,
   * when it runs on another replica: asks that replica (NOTIFY) and answers whether the session's
   * log shows a running loop. False when none runs.
   */
  abort(sessionId: string): Promise<boolean>;
  /** Whether a loop runs for the session in this process (one that has ended its work and only releases the session's lock does not count). */
  isRunning(sessionId: string): boolean;
  /**
   * Runs `fn` holding the session's loop lock as a loop would (Shell): no loop runs meanwhile on
   * any replica, `isRunning` is true and `abort` aborts `fn`'s signal. A prompt arriving meanwhile
   * is answered once `fn` is done. Throws `SessionBusyError` (FAILED_PRECONDITION) when a loop (or
   * another `exclusive`) holds the session; a loop of this process that has finished and is only
   * releasing the session is waited for instead. After `handOver`, throws `ShuttingDownError`
   * (UNAVAILABLE DRAINING) saying nothing was stored or run.
   */
  exclusive<T>(sessionId: string, fn: (signal: AbortSignal) => Promise<T>): Promise<T>;
  /**
   * Compacts the session (the `Summarize` RPC) holding it as `exclusive` does: carries out a
   * pending revert point first, records `busy` then `idle`, and stores the compaction and its
   * summary (`compactSession` in src/agent/compaction.ts) written by `request.model`; `abort`
   * aborts the summary's step. Returns the summary message with its parts. Throws
   * `SessionBusyError` (FAILED_PRECONDITION) when a loop or another `exclusive` holds the session.
   * `request.enter`, when given, is called first once the lock is held, and may throw to refuse to
   * start (`StartGate.enter` in src/ledger/answer.ts: the call already ended); nothing is stored then.
   */
  summarize(sessionId: string, request: { model: ModelRef; agent: string; enter?: () => void }): Promise<MessageWithParts>;
  /** Cancels every running loop and waits for them (their answers end with an `aborted` error). */
  stopAll(): Promise<void>;
  /**
   * Number of loops (and `exclusive` runs) running here, holding their session's lock. A run
   * still waiting for a lock another replica holds is not counted (that replica's loop answers
   * what is stored); `handOver` and `stopAll` end it too.
   */
  activeRuns(): number;
  /**
   * Hands every running loop over (shutdown, at the end of the grace period): aborts it with a
   * `LoopHandedOver` reason, so its current answer ends `interrupted` (not `aborted`), its
   * session returns to `idle` and its lock is released; `ResumeSession` on any replica then
   * continues the answer. From then on this replica starts no loop: `run` and `exclusive` reject
   * with `ShuttingDownError` (UNAVAILABLE `DRAINING`; the prompt stays stored for another
   * replica's `ResumeSession`). Resolves when every loop has let go.
   */
  handOver(): Promise<void>;
}
