/**
 * Typed domain errors. The domain throws these; `src/server/errors.ts` maps each class to one
 * Connect `Code` in a single table, so the domain never imports the transport. Every error
 * carries the fields a client needs (`field` names the request field, dotted with indexes,
 * e.g. `parts[1].file.url`).
 */

/** Base class of every error a client may see. `reason` is a stable UPPER_SNAKE identifier. */
export abstract class LedgerError extends Error {
  /** Stable, machine-readable reason (goes into `google.rpc.ErrorInfo.reason`). */
  abstract readonly reason: string;
  /** Extra string facts for `ErrorInfo.metadata`. */
  readonly metadata: Record<string, string>;

  constructor(message: string, metadata: Record<string, string> = {}) {
    super(message);
    this.name = new.target.name;
    this.metadata = metadata;
  }
}

/** A request field is malformed. Maps to `INVALID_ARGUMENT` with a `BadRequest` violation on `field`. */
export class InvalidArgumentError extends LedgerError {
  readonly reason = "INVALID_ARGUMENT";
  constructor(
    readonly field: string,
    description: string,
  ) {
    super(`${field}: ${description}`, { field });
  }
}

/** A session id names no session. Maps to `NOT_FOUND`. */
export class SessionNotFoundError extends LedgerError {
  readonly reason = "SESSION_NOT_FOUND";
  constructor(
    readonly sessionId: string,
    readonly field = "session_id",
  ) {
    super(`${field}: session ${sessionId} not found`, { session_id: sessionId });
  }
}

/** A message id names no message of the session. Maps to `NOT_FOUND`. */
export class MessageNotFoundError extends LedgerError {
  readonly reason = "MESSAGE_NOT_FOUND";
  constructor(
    readonly messageId: string,
    readonly field = "message_id",
  ) {
    super(`${field}: message ${messageId} not found`, { message_id: messageId });
  }
}

/** A part id names no part of the message. Maps to `NOT_FOUND`. */
export class PartNotFoundError extends LedgerError {
  readonly reason = "PART_NOT_FOUND";
  constructor(
    readonly partId: string,
    readonly field = "part_id",
  ) {
    super(`${field}: part ${partId} not found`, { part_id: partId });
  }
}

/** A permission id names no permission request of the session. Maps to `NOT_FOUND`. */
export class PermissionNotFoundError extends LedgerError {
  readonly reason = "PERMISSION_NOT_FOUND";
  constructor(
    readonly permissionId: string,
    readonly field = "permission_id",
  ) {
    super(`${field}: permission request ${permissionId} not found in this session`, { permission_id: permissionId });
  }
}

/**
 * The session's agent loop runs (here, or on another replica by its last `session_status`),
 * so its messages cannot be changed now. Maps to `FAILED_PRECONDITION`.
 */
export class SessionBusyError extends LedgerError {
  readonly reason = "SESSION_BUSY";
  constructor(readonly sessionId: string) {
    super(`session ${sessionId} is busy: its agent loop is running; abort it or wait until it is idle`, { session_id: sessionId });
  }
}

/** The requested agent does not exist or is hidden. Maps to `NOT_FOUND`, listing `available`. */
export class AgentNotFoundError extends LedgerError {
  readonly reason = "AGENT_NOT_FOUND";
  constructor(
    readonly agent: string,
    readonly available: string[],
    readonly field = "agent",
  ) {
    super(`${field}: agent "${agent}" not found; available agents: ${available.join(", ")}`, {
      agent,
      available: available.join(","),
    });
  }
}

/** A client-supplied id is already used by different content. Maps to `ALREADY_EXISTS`. */
export class AlreadyExistsError extends LedgerError {
  readonly reason = "ALREADY_EXISTS";
  constructor(
    readonly field: string,
    readonly id: string,
    detail: string,
  ) {
    super(`${field}: ${id} ${detail}`, { field, id });
  }
}

/** A size or count limit was exceeded. Maps to `RESOURCE_EXHAUSTED`, naming `limit` and `value`. */
export class LimitExceededError extends LedgerError {
  readonly reason = "LIMIT_EXCEEDED";
  constructor(
    readonly field: string,
    readonly limit: string,
    readonly max: number,
    readonly actual: number,
    unit: string,
  ) {
    super(`${field}: ${actual} ${unit} exceeds limit ${limit} (${max} ${unit})`, {
      field,
      limit,
      max: String(max),
      actual: String(actual),
    });
  }
}

/** A file path lies outside the session directory and configured roots. Maps to `PERMISSION_DENIED`. */
export class PathNotAllowedError extends LedgerError {
  readonly reason = "PATH_NOT_ALLOWED";
  constructor(
    readonly field: string,
    readonly path: string,
    why = "is outside the session directory and the configured roots",
  ) {
    super(`${field}: ${path} ${why}`, { field, path });
  }
}

/** Shell commands (the `Shell` RPC, the `bash` tool) are not allowed for the session's tenant. Maps to `PERMISSION_DENIED`. */
export class CommandsNotAllowedError extends LedgerError {
  readonly reason = "COMMANDS_NOT_ALLOWED";
  constructor(readonly tenant: string) {
    super(`shell commands are not allowed for sessions of tenant ${tenant} (tenants.${tenant}.commands)`, { tenant });
  }
}

/**
 * This server is shutting down (its agent loops were handed over). Maps to `UNAVAILABLE` (reason
 * `DRAINING`, metadata `session_id`). With `stored` (the default) a prompt stored now is not
 * answered here: `ResumeSession` on another replica answers it. Without it (Shell, Summarize:
 * the runner's `exclusive`) nothing was stored or run: the client retries the call on another replica.
 */
export class ShuttingDownError extends LedgerError {
  readonly reason = "DRAINING";
  constructor(
    readonly sessionId: string,
    stored = true,
  ) {
    super(
      stored
        ? `the server is shutting down: the prompt is stored but not answered here; call ResumeSession(session_id=${sessionId}) on another replica`
        : `the server is shutting down: nothing was stored or run for session ${sessionId}; retry the call on another replica`,
      { session_id: sessionId },
    );
  }
}

/**
 * The operation cannot run in the current state (e.g. no model provider is configured, so the
 * agent loop cannot answer). Maps to `FAILED_PRECONDITION`; `metadata` says what was stored.
 */
export class PreconditionError extends LedgerError {
  constructor(
    readonly reason: string,
    message: string,
    metadata: Record<string, string> = {},
  ) {
    super(message, metadata);
  }
}

/**
 * A stream cursor (`after_seq`) is outside the retained event log: older than what retention
 * kept, or ahead of the log. Maps to `OUT_OF_RANGE`; the client reloads with ListMessages and
 * watches from the session's current seq.
 */
export class CursorOutOfRangeError extends LedgerError {
  constructor(
    readonly reason: "CURSOR_EXPIRED" | "CURSOR_AHEAD",
    readonly afterSeq: bigint,
    readonly bounds: { prunedSeq: bigint; lastSeq: bigint },
  ) {
    super(
      reason === "CURSOR_EXPIRED"
        ? `after_seq: events up to seq ${bounds.prunedSeq} are no longer retained (asked for events after ${afterSeq}); reload the session with ListMessages, then WatchSession from after_seq=${bounds.lastSeq}`
        : `after_seq: ${afterSeq} is ahead of the session's log (last seq ${bounds.lastSeq})`,
      {
        field: "after_seq",
        after_seq: String(afterSeq),
        pruned_seq: String(bounds.prunedSeq),
        last_seq: String(bounds.lastSeq),
        action: "reload with ListMessages",
      },
    );
  }
}

/**
 * The call stopped waiting before its answer was complete because its `AbortSignal` fired: the
 * client's deadline (`grpc-timeout`, `connect-timeout-ms`), the client going away, or shutdown.
 * `cause` is the signal's reason; `src/server/errors.ts` answers with its code (so a deadline is
 * `DEADLINE_EXCEEDED`, a cancel `CANCELED`). Nothing stops with the call: a prompt stays stored
 * and its run goes on; `metadata` says where to pick it up (`message_id`, `session_id`,
 * `after_seq` for WatchSession). `reason` is `RUN_CONTINUES` for a prompt's answer (Prompt,
 * PromptStream, Command, ResumeSession), `WATCH_INTERRUPTED` for WatchSession, and
 * `NOT_STORED` when the signal fired while the prompt was being resolved (a large file read),
 * before its write: then nothing was stored and the prompt may be sent again.
 */
export class StoppedWaitingError extends LedgerError {
  constructor(
    readonly reason: "RUN_CONTINUES" | "WATCH_INTERRUPTED" | "NOT_STORED",
    message: string,
    metadata: Record<string, string>,
    options: { cause?: unknown } = {},
  ) {
    super(message, metadata);
    if (options.cause !== undefined) this.cause = options.cause;
  }
}

/** The feature exists in the contract but is not built yet. Maps to `UNIMPLEMENTED`. */
export class NotImplementedError extends LedgerError {
  readonly reason = "NOT_IMPLEMENTED";
}

/** A configured plugin failed; nothing was written. Maps to `INTERNAL` with a safe message. */
export class PluginError extends LedgerError {
  readonly reason = "PLUGIN_FAILED";
  constructor(
    readonly plugin: string,
    readonly hook: string,
    options?: { cause?: unknown },
  ) {
    super(`plugin ${plugin} failed in ${hook}; nothing was stored`, { plugin, hook });
    if (options?.cause !== undefined) this.cause = options.cause;
  }
}

/** A command name is not configured. Maps to `NOT_FOUND`, listing the configured commands in `available`. */
export class CommandNotFoundError extends LedgerError {
  readonly reason = "COMMAND_NOT_FOUND";
  readonly field = "command";
  constructor(
    readonly command: string,
    readonly available: string[],
  ) {
    super(
      `command: command "${command}" not found; available commands: ${available.length > 0 ? available.join(", ") : "(none configured)"}`,
      {
        command,
        available: available.join(","),
      },
    );
  }
}

/**
 * A stream's client fell behind: the events waiting for it passed `limit` (`watch_buffer_events`
 * or `watch_buffer_bytes`, `max` events or bytes), so the server stopped buffering for it. Maps
 * to `RESOURCE_EXHAUSTED`; every event up to `lastSeq` was delivered before the error, and
 * `WatchSession(after_seq = last_seq)` resumes without a gap (metadata `last_seq`,
 * `session_id`, `limit`, `max`).
 */
export class WatcherTooSlowError extends LedgerError {
  readonly reason = "WATCHER_TOO_SLOW";
  constructor(
    readonly sessionId: string,
    readonly lastSeq: bigint,
    readonly limit: string,
    readonly max: number,
  ) {
    super(
      `the stream of session ${sessionId} fell behind: more than ${max} ${limit === "watch_buffer_bytes" ? "bytes" : "events"} waited for it (limit ${limit}); the events up to seq ${lastSeq} were delivered: continue with WatchSession(session_id=${sessionId}, after_seq=${lastSeq})`,
      { session_id: sessionId, last_seq: String(lastSeq), limit, max: String(max) },
    );
  }
}

/**
 * An agent loop (or a Shell/Summarize run, `waiting: false`) could not take the session's lock:
 * every connection of the session-lock pool (`limit` `lock_connections`, `max` connections)
 * holds a running or waiting loop. Maps to `RESOURCE_EXHAUSTED`. Nothing stored is lost: a
 * prompt stays stored (metadata `message_id` when known) and `ResumeSession` answers it once a
 * loop ends; a Shell or Summarize call wrote nothing and can be retried.
 */
export class LockPoolExhaustedError extends LedgerError {
  readonly reason = "LOCK_CONNECTIONS_EXHAUSTED";
  readonly limit = "lock_connections";
  constructor(
    readonly sessionId: string,
    readonly max: number,
    options: { forLoop: boolean } = { forLoop: true },
  ) {
    const limit = `all ${max} session-lock connections are in use (limit lock_connections; raise limits.lock_connections in ledger.json, within Postgres's max_connections)`;
    super(
      options.forLoop
        ? `session ${sessionId}: no agent loop could start, ${limit}; the prompt is stored: answer it with ResumeSession(session_id=${sessionId}) once a loop has ended`
        : `session ${sessionId}: cannot take the session's lock now, ${limit}; nothing was written: retry once a loop has ended`,
      { session_id: sessionId, limit: "lock_connections", max: String(max) },
    );
  }
}

/**
 * A caller passed one of its quotas (docs/security.md, "Quotas"): `quota` (`prompts_per_minute`
 * or `concurrent_loops`) of `scope` (`principal` or `tenant`), whose subject is `subject`
 * (`principal:<sub>` or `tenant:<tenant>`), at most `limit`. Maps to `RESOURCE_EXHAUSTED` with a
 * `google.rpc.QuotaFailure` violation {subject, description} and, when `retryAfterMs` is known
 * (the end of the current minute for `prompts_per_minute`), a `google.rpc.RetryInfo`. Nothing
 * was stored and nothing was counted.
 */
export class QuotaExceededError extends LedgerError {
  readonly reason = "QUOTA_EXCEEDED";
  /** The `QuotaFailure` violation's description: the quota's config key and its limit. */
  readonly description: string;
  constructor(
    readonly quota: "prompts_per_minute" | "concurrent_loops" | "stored_bytes",
    readonly scope: "principal" | "tenant",
    readonly subject: string,
    readonly limit: number,
    readonly retryAfterMs?: number,
  ) {
    const key = `quotas.${scope}.${quota}`;
    const name = subject.slice(subject.indexOf(":") + 1);
    const what =
      quota === "prompts_per_minute"
        ? `${scope} ${name} has stored ${limit} prompts this minute`
        : quota === "stored_bytes"
          ? `${scope} ${name} has stored ${limit} bytes or more in its sessions`
          : `${scope} ${name} already has ${limit} sessions with a running answer`;
    const when =
      retryAfterMs !== undefined
        ? `retry in ${Math.ceil(retryAfterMs / 1000)} s`
        : quota === "stored_bytes"
          ? "delete sessions to make room"
          : "retry when one of its answers has finished";
    super(`quota exceeded: ${what}, the limit of ${key} (${limit}); nothing was stored, ${when}`, {
      quota,
      scope,
      subject,
      limit: String(limit),
      ...(retryAfterMs !== undefined ? { retry_after_ms: String(retryAfterMs) } : {}),
    });
    this.description =
      quota === "prompts_per_minute"
        ? `${key}: at most ${limit} prompts per minute`
        : quota === "stored_bytes"
          ? `${key}: at most ${limit} bytes stored`
          : `${key}: at most ${limit} sessions with a running answer at once`;
  }
}

/**
 * A name that is no configured MCP server (`mcp` in ledger.json). Maps to `NOT_FOUND`, listing
 * the configured servers in `available` (metadata, comma-separated).
 */
export class McpServerNotFoundError extends LedgerError {
  readonly reason = "MCP_SERVER_NOT_FOUND";
  constructor(
    readonly server: string,
    readonly available: string[],
    readonly field = "server",
  ) {
    super(
      `${field}: MCP server ${JSON.stringify(server)} is not configured; configured MCP servers: ${available.length > 0 ? available.map((n) => JSON.stringify(n)).join(", ") : "(none)"}`,
      { server, available: available.join(",") },
    );
  }
}

/**
 * An MCP server could not answer: it cannot start, failed or did not answer within its
 * `timeout`; `message` is its error. Maps to `UNAVAILABLE` (it may work on a later try).
 */
export class McpServerUnavailableError extends LedgerError {
  readonly reason = "MCP_SERVER_UNAVAILABLE";
  constructor(
    readonly server: string,
    message: string,
  ) {
    super(message, { server });
  }
}

/** The caller's tenant may not use the MCP servers (`tenants.<name>.mcp` is not true). Maps to `PERMISSION_DENIED`. */
export class McpNotAllowedError extends LedgerError {
  readonly reason = "MCP_NOT_ALLOWED";
  constructor(readonly tenant: string) {
    super(`MCP servers are not available to tenant ${tenant} (tenants.${tenant}.mcp)`, { tenant });
  }
}
