import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import {
  AssistantTimeSchema,
  MessageSchema,
  MessageWithPartsSchema,
  type AssistantMessage,
  type MessageWithParts,
} from "../../gen/ledger/v1/message_pb.js";
import type { ModelRef } from "../../gen/ledger/v1/model_pb.js";
import { PartSchema, ToolStateSchema, type Part, type ToolPart } from "../../gen/ledger/v1/part_pb.js";
import type { ShellRequest } from "../../gen/ledger/v1/service_pb.js";
import { visibleAgentNames } from "../config/agents.js";
import { SHELL_USER_TEXT } from "./shell-text.js";
import { AgentNotFoundError, InvalidArgumentError, PreconditionError } from "../errors.js";
import { newId } from "../ids.js";
import { BASH_DEFAULT_TIMEOUT_MS, formatResult, runCommand } from "../tools/bash.js";
import { checkPermission, permissionRules } from "../tools/permission.js";
import type { LedgerDeps } from "./deps.js";
import { askPermission } from "./permissions.js";
import { sessionLedger } from "./session-ledger.js";
import { getSession } from "./sessions.js";
import { applyRevert } from "./revert.js";
import { writeSession } from "./writer.js";
import { getSessionRow } from "../storage/session-store.js";
import { startGate, untilDone } from "./answer.js";
import { checkCommandsAllowed, checkSessionStillAllowed } from "./access.js";
import { isBlank } from "./blank.js";

/** Longest time (ms) between two stored snapshots of a running command's output. */
const OUTPUT_INTERVAL_MS = 100;

/**
 * The `Shell` RPC (OpenCode `SessionPrompt.shell`): runs `command` the user typed with `/bin/sh -c`
 * in the session directory, holding the session like a loop run (`Replier.exclusive`), and
 * records it as a user message (agent, model; one synthetic text part {@link SHELL_USER_TEXT})
 * then an assistant message (`parent_id` = it, finish `stop`) with one `bash` tool part: running
 * with `input {command}`, its `metadata.output` stored as the output grows (at most every 100
 * ms), then completed with the output (cut at the read limits, with `bash`'s notes) and
 * `metadata {output, exit, description: ""}`. The agent's `bash` rules apply to the command
 * (`ask` waits for ReplyPermission; a denial or rejection ends the part in `error`). A pending
 * revert point is carried out first (its messages removed, files left as reverted). The default
 * timeout (2 min) applies; `Abort` kills the command's process group and the message gets an
 * aborted error.
 *
 * @returns the assistant message with its part.
 * @throws InvalidArgumentError (field `command`) for a command holding a NUL or blank (`isBlank`); SessionNotFoundError (NOT_FOUND); CommandsNotAllowedError (PERMISSION_DENIED) for a
 *   session of a tenant without `tenants.<name>.commands`, PathNotAllowedError (PERMISSION_DENIED, field
 *   `session_id`) for a session outside `session_directories`, PreconditionError SESSION_DIRECTORY_MISSING
 *   (FAILED_PRECONDITION) when its directory no longer exists (`checkSessionStillAllowed`); AgentNotFoundError (NOT_FOUND, field `agent`);
 *   SessionBusyError (FAILED_PRECONDITION) while a loop runs the session;
 *   PreconditionError NO_RUNNER when the server has no runner; StoppedWaitingError RUN_CONTINUES
 *   (DEADLINE_EXCEEDED on the client's deadline, CANCELED on a cancel) when `signal` fires before
 *   the command ends: the command goes on (`untilDone`); StoppedWaitingError NOT_STORED when it fires
 *   before the command started (it waited for the session's lock): nothing was run or stored.
 */
export async function runShell(deps: LedgerDeps, request: ShellRequest, signal?: AbortSignal): Promise<MessageWithParts> {
  // No shell command holds a NUL (the command line is a C string): refused before anything is stored.
  if (request.command.includes("\0"))
    throw new InvalidArgumentError("command", "contains a NUL character (U+0000), which no shell command can hold");
  if (isBlank(request.command)) throw new InvalidArgumentError("command", "is blank: send the command line to run");
  const session = await getSession(deps, request.sessionId);
  await checkSessionStillAllowed(deps, session);
  await checkCommandsAllowed(deps, session.id);
  const agent = deps.config.agents.get(request.agent);
  if (!agent) throw new AgentNotFoundError(request.agent, visibleAgentNames(deps.config.agents), "agent");
  const replier = deps.replier;
  if (!replier) throw new PreconditionError("NO_RUNNER", "this server runs no agent loops, so it cannot run shell commands");
  const model: ModelRef | undefined =
    request.model ?? session.model ?? (deps.config.model && { $typeName: "ledger.v1.ModelRef", ...deps.config.model });
  const sessionId = session.id;
  const afterSeq = BigInt((await getSessionRow(deps.db, sessionId))?.last_seq ?? 0);
  const gate = startGate(signal, { sessionId, name: "shell command" });
  const work = replier.exclusive(sessionId, async (signal) => {
    gate.enter();
    const ledger = sessionLedger(deps, sessionId);
    // A pending revert is carried out first, as a prompt does (OpenCode `shell` calls
    // `SessionRevert.cleanup`): the command's messages must not land past the revert point.
    if (session.revert) await writeSession(deps, sessionId, (w) => applyRevert(w));
    const userId = newId("msg");
    await ledger.addMessage(
      create(MessageSchema, {
        kind: { case: "user", value: { id: userId, sessionId, agent: agent.name, model, timeCreated: timestampNow() } },
      }),
    );
    await ledger.savePart(
      create(PartSchema, {
        id: newId("prt"),
        sessionId,
        messageId: userId,
        kind: { case: "text", value: { text: SHELL_USER_TEXT, synthetic: true } },
      }),
    );
    await ledger.setStatus({ case: "busy", value: {} });
    try {
      const message = create(MessageSchema, {
        kind: {
          case: "assistant",
          value: {
            id: newId("msg"),
            sessionId,
            parentId: userId,
            agent: agent.name,
            model,
            path: { cwd: session.directory, root: session.directory },
            time: { created: timestampNow() },
          },
        },
      });
      const assistant = message.kind.value as AssistantMessage;
      await ledger.addMessage(message);
      const callId = `call_${newId("prt").slice(4)}`;
      const input: JsonObject = { command: request.command };
      const part = create(PartSchema, {
        id: newId("prt"),
        sessionId,
        messageId: assistant.id,
        kind: { case: "tool", value: { callId, tool: "bash" } },
      });
      const tool = part.kind.value as ToolPart;
      const timeStart = timestampNow();
      tool.state = create(ToolStateSchema, { status: { case: "running", value: { input, title: request.command, timeStart } } });
      await ledger.savePart(part);
      const end = (status: ToolPart["state"]) => {
        tool.state = status;
        return ledger.savePart(part);
      };
      let aborted = false;
      try {
        await checkPermission(
          agent.name,
          permissionRules(agent, session.permission),
          { permission: "bash", patterns: [request.command], metadata: { command: request.command, description: "" }, callId },
          signal,
          (ask, askSignal) =>
            askPermission(
              deps,
              {
                sessionId,
                messageId: assistant.id,
                callId,
                permission: ask.permission,
                patterns: ask.patterns,
                metadata: ask.metadata as JsonObject,
              },
              askSignal,
            ),
        );
        const saver = throttledSaver(async (output) => {
          const state = tool.state?.status;
          if (state?.case !== "running") return;
          state.value.metadata = { output, description: "" };
          await ledger.savePart(part);
        });
        const result = await runCommand(request.command, {
          cwd: session.directory,
          timeoutMs: BASH_DEFAULT_TIMEOUT_MS,
          signal,
          onOutput: saver,
        });
        aborted = result.aborted;
        await saver.settle();
        await end(
          create(ToolStateSchema, {
            status: {
              case: "completed",
              value: {
                input,
                title: request.command,
                output: formatResult(result, BASH_DEFAULT_TIMEOUT_MS),
                metadata: { output: result.output, exit: result.exit, description: "" },
                timeStart,
                timeEnd: timestampNow(),
              },
            },
          }),
        );
      } catch (error) {
        aborted = signal.aborted;
        await end(
          create(ToolStateSchema, {
            status: {
              case: "error",
              value: { input, error: error instanceof Error ? error.message : String(error), timeStart, timeEnd: timestampNow() },
            },
          }),
        );
      }
      if (aborted)
        assistant.error = {
          $typeName: "ledger.v1.MessageError",
          message: "The operation was aborted.",
          kind: { case: "aborted", value: { $typeName: "ledger.v1.AbortedError" } },
        };
      assistant.finish = aborted ? "error" : "stop";
      assistant.time = create(AssistantTimeSchema, { created: assistant.time?.created, completed: timestampNow() });
      await ledger.saveMessage(message);
      return create(MessageWithPartsSchema, { message, parts: [part] as Part[] });
    } finally {
      await ledger.setStatus({ case: "idle", value: {} });
    }
  });
  return untilDone(work, signal, { sessionId, afterSeq, name: "shell command" }, gate);
}

/**
 * Wraps `save` so it runs at most every {@link OUTPUT_INTERVAL_MS}, one at a time, always with
 * the latest value; `settle` waits for the last one. (A tiny helper; the step processor does the
 * same for the model's bash calls.)
 */
function throttledSaver(save: (value: string) => Promise<void>) {
  let latest: string | undefined;
  let last = 0;
  let timer: NodeJS.Timeout | undefined;
  let chain: Promise<void> = Promise.resolve();
  const flush = () => {
    timer = undefined;
    last = Date.now();
    const value = latest;
    latest = undefined;
    if (value !== undefined) chain = chain.then(() => save(value)).catch(() => undefined);
  };
  const fn = (value: string) => {
    latest = value;
    if (timer) return;
    const wait = last + OUTPUT_INTERVAL_MS - Date.now();
    if (wait <= 0) flush();
    else timer = setTimeout(flush, wait);
  };
  fn.settle = async () => {
    if (timer) clearTimeout(timer);
    timer = undefined;
    await chain;
  };
  return fn;
}
