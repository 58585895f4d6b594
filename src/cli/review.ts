import { create, toJsonString } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { PermissionReply, PermissionRequestSchema, type PermissionRequest } from "../../gen/ledger/v1/permission_pb.js";
import { ReplyPermissionRequestSchema } from "../../gen/ledger/v1/service_pb.js";
import { SessionSchema, type Session } from "../../gen/ledger/v1/session_pb.js";
import type { Ledger } from "./client.js";
import { describeRequest } from "./permissions.js";

// A second client's side of agent edits (`ledger permissions`, `reply`, `revert`, `unrevert`):
// see what waits for an answer, answer it, undo a turn's file changes and redo them.

/** Prints one line of output (a newline is added). */
export type Print = (line: string) => void;

/** The words `ledger reply` takes, and the `PermissionReply` each sends. */
export const REPLY_WORDS = { once: PermissionReply.ONCE, always: PermissionReply.ALWAYS, reject: PermissionReply.REJECT } as const;

/** The one-letter answers `ledger prompt` teaches at its question (`o`, `a`, `r`), for `ledger reply`. */
export const REPLY_LETTERS = { o: "once", a: "always", r: "reject" } as const satisfies Record<string, keyof typeof REPLY_WORDS>;

/** A `ledger reply` answer as typed: a word, or its letter; undefined for anything else. */
export function replyWord(typed: string): keyof typeof REPLY_WORDS | undefined {
  if (Object.hasOwn(REPLY_WORDS, typed)) return typed as keyof typeof REPLY_WORDS;
  return Object.hasOwn(REPLY_LETTERS, typed) ? REPLY_LETTERS[typed as keyof typeof REPLY_LETTERS] : undefined;
}

/** A word of {@link REPLY_WORDS}. */
export type ReplyWord = keyof typeof REPLY_WORDS;

/**
 * The pending permission requests of `sessionId` (ListPermissions), or, without it, of every
 * session whose loop or shell command runs (GetStatus; a request is only pending while its call
 * waits, so the session is busy), oldest first. A session deleted meanwhile is skipped.
 * @throws ConnectError NOT_FOUND for an unknown `sessionId`, INVALID_ARGUMENT for a malformed one.
 */
export async function pendingPermissions(client: Ledger, sessionId: string | undefined): Promise<PermissionRequest[]> {
  if (sessionId) return (await client.listPermissions({ sessionId })).permissions;
  const running = Object.keys((await client.getStatus({})).statuses).sort();
  const lists = await Promise.all(
    running.map((id) =>
      client.listPermissions({ sessionId: id }).then(
        (res) => res.permissions,
        (error: unknown) => {
          if (error instanceof ConnectError && error.code === Code.NotFound) return [];
          throw error;
        },
      ),
    ),
  );
  const created = (r: PermissionRequest) => (r.timeCreated ? timestampMs(r.timeCreated) : 0);
  return lists.flat().sort((a, b) => created(a) - created(b) || a.id.localeCompare(b.id));
}

/**
 * `ledger permissions`: with `json`, one `PermissionRequest` per line (JSON Lines); otherwise, per
 * request, `per_…  ses_…  write hello.txt` (the tool, its patterns and a bash call's description)
 * and the diff of a file change below it, a blank line between requests; `no pending permission
 * requests` when there are none.
 */
export function printPermissions(requests: PermissionRequest[], json: boolean, print: Print): void {
  if (json) {
    for (const r of requests) print(toJsonString(PermissionRequestSchema, r));
    return;
  }
  if (requests.length === 0) return print("no pending permission requests");
  requests.forEach((r, i) => {
    if (i > 0) print("");
    print(`${r.id}  ${r.sessionId}  ${describeRequest(r).replace(/^permission: /, "")}`);
    const diff = r.metadata?.diff;
    if (typeof diff === "string" && diff) print(diff.replace(/\n$/, ""));
  });
}

/**
 * `ledger reply`: answers permission request `permissionId` of `sessionId` (ReplyPermission),
 * `message` being the feedback of a rejection; prints `allowed once`, `allowed always` or
 * `rejected` (with `json`, the request sent as one line of proto JSON).
 * @throws ConnectError NOT_FOUND (PERMISSION_NOT_FOUND) for an unknown request or one of another
 * session, FAILED_PRECONDITION (PERMISSION_ANSWERED) when it was answered already.
 */
export async function replyToRequest(
  client: Ledger,
  request: { sessionId: string; permissionId: string; word: ReplyWord; message?: string },
  json: boolean,
  print: Print,
): Promise<void> {
  const sent = create(ReplyPermissionRequestSchema, {
    sessionId: request.sessionId,
    permissionId: request.permissionId,
    reply: REPLY_WORDS[request.word],
    message: request.message ?? "",
  });
  await client.replyPermission(sent);
  if (json) return print(toJsonString(ReplyPermissionRequestSchema, sent));
  print(request.word === "once" ? "allowed once" : request.word === "always" ? "allowed always" : "rejected");
}

/**
 * `ledger revert`: sets the session's revert point at `messageId` (with `partId`, that part of
 * it) with Revert, which hides that message and every later one and restores the files they
 * changed. Prints what happened, or (`json`) the session as one line of proto JSON.
 * @throws ConnectError NOT_FOUND for an unknown session, message or part, FAILED_PRECONDITION
 * (SESSION_BUSY) while the session's loop runs.
 */
export async function revert(
  client: Ledger,
  request: { sessionId: string; messageId: string; partId?: string },
  json: boolean,
  print: Print,
): Promise<void> {
  const { session } = await client.revert({ sessionId: request.sessionId, messageId: request.messageId, partId: request.partId ?? "" });
  if (json) return print(toJsonString(SessionSchema, session!));
  const from = request.partId ? `part ${request.partId} of ${request.messageId}` : request.messageId;
  print(`reverted ${request.sessionId} to ${from}: it and everything after it are hidden (the next prompt removes them)`);
  print(
    session?.revert?.snapshot
      ? `files restored as they were before; "ledger unrevert ${request.sessionId}" puts the changes back`
      : "no files to restore (no step changed any from there on)",
  );
}

/**
 * `ledger unrevert`: clears the session's revert point (Unrevert), putting back the files Revert
 * restored. Prints what happened (`no revert point` when there was none), or (`json`) the session
 * as one line of proto JSON.
 * @throws ConnectError NOT_FOUND for an unknown session, FAILED_PRECONDITION (SESSION_BUSY) while
 * the session's loop runs.
 */
export async function unrevert(client: Ledger, sessionId: string, json: boolean, print: Print): Promise<void> {
  const before: Session | undefined = (await client.getSession({ sessionId })).session;
  const { session } = await client.unrevert({ sessionId });
  if (json) return print(toJsonString(SessionSchema, session!));
  const point = before?.revert;
  if (!point) return print("no revert point");
  print(`unreverted ${sessionId}: the messages from ${point.messageId} on are shown again`);
  print(point.snapshot ? "files put back as they were before the revert" : "no files to put back");
}
