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
}

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
 * reject (r)?" (anything else asks again; end of input rejects); otherwise REJECT with
 * {@link notInteractiveRejection} as feedback. A request answered meanwhile (by another client,
 * FAILED_PRECONDITION) is left alone. Returns the reply sent, or undefined.
 */
export async function answerRequest(
  client: Ledger,
  request: PermissionRequest,
  policy: PermissionPolicy,
  err: (text: string) => void,
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
    const asked = await askTerminal(err, () => stillPending(client, request));
    if (asked === undefined) {
      err("answered by another client\n");
      return undefined;
    }
    reply = asked;
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

/** Whether the request still waits for an answer (another client may have answered it). */
async function stillPending(client: Ledger, request: PermissionRequest): Promise<boolean> {
  const { permissions } = await client.listPermissions({ sessionId: request.sessionId });
  return permissions.some((p) => p.id === request.id);
}

/**
 * Asks on the terminal until a valid answer; undefined when `pending` (polled every 500 ms) says
 * someone else answered first (the question is then dropped).
 */
async function askTerminal(err: (text: string) => void, pending: () => Promise<boolean>): Promise<PermissionReply | undefined> {
  const controller = new AbortController();
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  const poll = setInterval(() => {
    void pending().then(
      (still) => !still && controller.abort(),
      () => undefined,
    );
  }, 500);
  try {
    for (;;) {
      const answer = await rl.question("allow once (o), always (a), reject (r)? ", { signal: controller.signal }).catch(() => undefined);
      if (controller.signal.aborted) return undefined;
      const word = (answer ?? "r").trim().toLowerCase();
      if (word === "o" || word === "once") return PermissionReply.ONCE;
      if (word === "a" || word === "always") return PermissionReply.ALWAYS;
      if (word === "r" || word === "reject") return PermissionReply.REJECT;
      err('answer "o", "a" or "r"\n');
    }
  } finally {
    clearInterval(poll);
    rl.close();
  }
}

/**
 * Answers every permission request of the session while `signal` is not aborted (for `ledger
 * prompt --json`, which waits on the unary Prompt): follows WatchSession and answers each
 * `permission_asked` still pending (ListPermissions) with {@link answerRequest}. Ends quietly
 * when `signal` aborts.
 */
export async function answerWhileRunning(
  client: Ledger,
  sessionId: string,
  policy: PermissionPolicy,
  signal: AbortSignal,
  err: (text: string) => void,
): Promise<void> {
  try {
    for await (const res of client.watchSession({ sessionId }, { signal })) {
      const kind = res.event?.kind;
      if (kind?.case !== "permissionAsked" || !kind.value.permission) continue;
      const pending = (await client.listPermissions({ sessionId })).permissions.some((p) => p.id === kind.value.permission!.id);
      if (pending) await answerRequest(client, kind.value.permission, policy, err);
    }
  } catch (error) {
    if (!signal.aborted) err(`warning: could not follow permission requests: ${error instanceof Error ? error.message : String(error)}\n`);
  }
}
