import { createInterface } from "node:readline/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { PermissionReply, type PermissionRequest } from "../../gen/ledger/v1/permission_pb.js";
import type { Ledger } from "./client.js";

/**
 * What `ledger prompt` or `ledger shell` (`command`) says to the model when it rejects a request
 * because no one can answer.
 */
export function notInteractiveRejection(command: "prompt" | "shell"): string {
  return `ledger ${command} is not interactive (pass --yes to allow once)`;
}

/** How `ledger prompt` answers permission requests: `--yes`, and whether a person is at the terminal. */
export interface PermissionPolicy {
  /** `--yes`: allow each request once without asking. */
  yes: boolean;
  /** Ask on the terminal (stdin and stderr are TTYs); otherwise reject (or allow once with `yes`). */
  interactive: boolean;
  /** The command asking, named in the rejection's feedback (default `prompt`). */
  command?: "prompt" | "shell";
  /**
   * Ctrl-C at a question (readline takes it: the terminal is in raw mode, no signal is raised):
   * `prompt` aborts the run, as Ctrl-C does anywhere else in it; without a handler (`shell`) the
   * request is rejected with the feedback "interrupted (Ctrl-C)".
   */
  onInterrupt?: () => void;
}

/** The reason an asker's `close()` gives an open question: the run ended, nobody answered it. */
const CLOSED = "closed";

/**
 * The one-line description of a request for the terminal:
 * `permission: write hello.txt` / `permission: bash git push origin main (push the branch)`.
 */
export function describeRequest(request: PermissionRequest): string {
  const description =
    typeof request.metadata?.description === "string" && request.metadata.description ? ` (${request.metadata.description})` : "";
  return `permission: ${request.permission} ${request.patterns.join(", ")}${description}`;
}

/**
 * Answers one permission request for `ledger prompt`: with `--yes` ONCE; on a terminal, shows
 * the request (and the diff of a file change) on stderr and asks "allow once (o), always (a),
 * reject (r)?" (anything else asks again; end of input rejects; Ctrl-C interrupts the command as
 * it would anywhere else: `prompt` aborts the run); otherwise REJECT with
 * {@link notInteractiveRejection} as feedback. `answered` aborts when another client answered
 * first (the caller sees its `permission_replied` event): the question is then dropped. A
 * request answered meanwhile (FAILED_PRECONDITION) is left alone. Returns the reply sent, or
 * undefined.
 */
async function answerRequest(
  client: Ledger,
  request: PermissionRequest,
  policy: PermissionPolicy,
  err: (text: string) => void,
  answered: AbortSignal,
): Promise<PermissionReply | undefined> {
  err(`${describeRequest(request)}\n`);
  const diff = request.metadata?.diff;
  if (typeof diff === "string" && diff && policy.interactive && !policy.yes) err(`${diff}\n`);
  let reply: PermissionReply;
  let message = "";
  if (policy.yes) reply = PermissionReply.ONCE;
  else if (!policy.interactive) {
    reply = PermissionReply.REJECT;
    message = notInteractiveRejection(policy.command ?? "prompt");
  } else {
    const asked = await askTerminal(err, answered);
    if (asked === "answered") {
      // Dropped: answered elsewhere, or the run ended (the asker closed) and nobody needs it.
      err(answered.reason === CLOSED ? "\n" : "answered by another client\n");
      return undefined;
    }
    if (asked === "interrupted" && policy.onInterrupt) {
      // `prompt` aborts the run; the server rejects its pending requests.
      err("\n");
      policy.onInterrupt();
      return undefined;
    }
    if (asked === "interrupted") {
      reply = PermissionReply.REJECT;
      message = "interrupted (Ctrl-C)";
    } else reply = asked;
  }
  try {
    await client.replyPermission({ sessionId: request.sessionId, permissionId: request.id, reply, message });
  } catch (error) {
    if (error instanceof ConnectError && error.code === Code.FailedPrecondition) return undefined;
    throw error;
  }
  err(`${reply === PermissionReply.ONCE ? "allowed once" : reply === PermissionReply.ALWAYS ? "allowed always" : "rejected"}\n`);
  return reply;
}

/**
 * Asks on the terminal until a valid answer; `"answered"` when `answered` aborts (someone else
 * answered first: the question is dropped), `"interrupted"` on Ctrl-C (the terminal is in raw
 * mode while asking: readline gets the key, not the process).
 */
async function askTerminal(err: (text: string) => void, answered: AbortSignal): Promise<PermissionReply | "answered" | "interrupted"> {
  const controller = new AbortController();
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  let interrupted = false;
  rl.on("SIGINT", () => {
    interrupted = true;
    controller.abort();
  });
  const drop = () => controller.abort();
  answered.addEventListener("abort", drop, { once: true });
  if (answered.aborted) drop();
  try {
    for (;;) {
      const answer = await rl.question("allow once (o), always (a), reject (r)? ", { signal: controller.signal }).catch(() => undefined);
      if (interrupted) return "interrupted";
      if (controller.signal.aborted) return "answered";
      const word = (answer ?? "r").trim().toLowerCase();
      if (word === "o" || word === "once") return PermissionReply.ONCE;
      if (word === "a" || word === "always") return PermissionReply.ALWAYS;
      if (word === "r" || word === "reject") return PermissionReply.REJECT;
      err('answer "o", "a" or "r"\n');
    }
  } finally {
    answered.removeEventListener("abort", drop);
    rl.close();
  }
}

/** Asks a session's permission requests one at a time, as a command's event stream announces them. */
export interface PermissionAsker {
  /** A `permission_asked` event: ask it after those before it. */
  asked(request: PermissionRequest): void;
  /** A `permission_replied` event: drop that request's question, or its turn in the queue. */
  replied(permissionId: string): void;
  /** Whether a question is being asked (the caller keeps its spinner off meanwhile). */
  readonly busy: boolean;
  /** Drops every question left (the run ended) and waits for the current one to finish. */
  close(): Promise<void>;
}

/**
 * The {@link PermissionAsker} of `ledger prompt` and `ledger shell`: each request is answered
 * with {@link answerRequest} in the order asked; a request another client answers (its
 * `permission_replied` arrives on the caller's stream) is dropped without asking, or its open
 * question is dropped ("answered by another client"). No polling: the caller's stream says when.
 */
export function permissionAsker(client: Ledger, policy: PermissionPolicy, err: (text: string) => void): PermissionAsker {
  const queue: PermissionRequest[] = [];
  let current: { id: string; answered: AbortController } | undefined;
  let running: Promise<void> | undefined;
  const run = async () => {
    for (let request = queue.shift(); request; request = queue.shift()) {
      current = { id: request.id, answered: new AbortController() };
      try {
        await answerRequest(client, request, policy, err, current.answered.signal);
      } catch (error) {
        // One failed reply must not leave the requests behind it waiting: say so, go on.
        err(`warning: could not answer permission request ${request.id}: ${error instanceof Error ? error.message : String(error)}\n`);
      } finally {
        current = undefined;
      }
    }
    running = undefined;
  };
  return {
    asked(request) {
      queue.push(request);
      running ??= run();
    },
    replied(permissionId) {
      if (current?.id === permissionId) current.answered.abort();
      const queued = queue.findIndex((r) => r.id === permissionId);
      if (queued >= 0) queue.splice(queued, 1);
    },
    get busy() {
      return current !== undefined;
    },
    async close() {
      queue.length = 0;
      current?.answered.abort(CLOSED);
      await running;
    },
  };
}

/**
 * Answers every permission request of the session while `signal` is not aborted (for `ledger
 * prompt --json`, which waits on the unary Prompt, and `ledger shell`): follows WatchSession and
 * hands each `permission_asked` still pending (one ListPermissions per request: the replay holds
 * old ones) and each `permission_replied` to a {@link permissionAsker}. Ends quietly when
 * `signal` aborts, once the question open then is dropped.
 */
export async function answerWhileRunning(
  client: Ledger,
  sessionId: string,
  policy: PermissionPolicy,
  signal: AbortSignal,
  err: (text: string) => void,
): Promise<void> {
  const asker = permissionAsker(client, policy, err);
  try {
    for await (const res of client.watchSession({ sessionId }, { signal })) {
      const kind = res.event?.kind;
      if (kind?.case === "permissionReplied") asker.replied(kind.value.permissionId);
      if (kind?.case !== "permissionAsked" || !kind.value.permission) continue;
      const request = kind.value.permission;
      if ((await client.listPermissions({ sessionId })).permissions.some((p) => p.id === request.id)) asker.asked(request);
    }
  } catch (error) {
    // An unknown session: the command's own call says so (a trial, 2026-12-04: this warning came first, then the error).
    if (!signal.aborted && ConnectError.from(error).code !== Code.NotFound)
      err(`warning: could not follow permission requests: ${error instanceof Error ? error.message : String(error)}\n`);
  } finally {
    await asker.close();
  }
}
