import { createHash } from "node:crypto";
import { stat, realpath } from "node:fs/promises";
import path from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { SessionEventSchema } from "../../gen/ledger/v1/event_pb.js";
import { MessageSchema, type Message } from "../../gen/ledger/v1/message_pb.js";
import { SessionSchema, type Session } from "../../gen/ledger/v1/session_pb.js";
import { CreateSessionRequestSchema, type CreateSessionRequest } from "../../gen/ledger/v1/service_pb.js";
import { newId } from "../ids.js";
import { checkPathShape } from "../files/confine.js";
import { appendEvents } from "../storage/event-store.js";
import { getMessageRow, insertMessage, listMessageRowsWithBytes } from "../storage/message-store.js";
import { insertParts } from "../storage/part-store.js";
import { isForeignKeyViolation } from "../storage/pg-errors.js";
import { sessionCache } from "../storage/session-cache.js";
import * as store from "../storage/session-store.js";
import { checkSessionDirectory, checkSessionStillAllowed } from "./access.js";
import type { LedgerDeps } from "./deps.js";
import { InvalidArgumentError, MessageNotFoundError, SessionNotFoundError } from "../errors.js";
import { isBlank } from "./blank.js";
import { fitPage, withParts } from "./messages.js";
import { decodePageToken, encodePageToken } from "./page-token.js";
import { checkModelRef, resolveAgent } from "./selection.js";
import { inTransaction, writeSession, writeSessionIn, type Tx } from "./writer.js";

/** Default and maximum `page_size` of ListSessions. */
export const SESSION_PAGE = { default: 50, max: 1000 } as const;

/**
 * Creates a session owned as `ownership` (default: no owner; a child, `parent_id` set, takes its
 * parent's owner and tenant instead). `directory` is required (a session that silently took the server's
 * working directory would read files the client never meant); it must be the absolute path of an
 * existing directory and is stored resolved (realpath). `parent_id`
 * must name a session; `agent` must exist. Appends the session's first event
 * (`session_updated`, seq 1) in the same transaction.
 * Throws `InvalidArgumentError` (INVALID_ARGUMENT: directory empty, relative, with a NUL, over 4096 bytes or not a directory, or a malformed `model.provider_id`/`model.model_id`), `PathNotAllowedError` (PERMISSION_DENIED: a directory under /proc, /sys or /dev, outside the tenant's roots or outside `session_directories`; `checkSessionDirectory`), `SessionNotFoundError` (NOT_FOUND: parent_id, also when the parent is deleted meanwhile), `AgentNotFoundError` (NOT_FOUND).
 */
export async function createSession(
  deps: LedgerDeps,
  request: CreateSessionRequest,
  ownership: store.SessionOwnership = store.NO_OWNER,
): Promise<Session> {
  const planned = await planSession(deps, request, ownership);
  await inTransaction(deps, (tx) => insertPlannedSession(deps, tx, planned));
  return planned.session;
}

/** A session `createSession` checked and built, not stored yet: `insertPlannedSession` stores it. */
interface PlannedSession {
  session: Session;
  now: Date;
  ownership: store.SessionOwnership;
  parentId: string;
}

/** `createSession`'s checks and the new session (id, resolved directory, title, times); throws what `createSession` documents. */
async function planSession(deps: LedgerDeps, request: CreateSessionRequest, ownership: store.SessionOwnership): Promise<PlannedSession> {
  if (request.model) checkModelRef(request.model);
  if (!request.directory.trim()) {
    throw new InvalidArgumentError(
      "directory",
      "is required: the absolute path of an existing project directory on the server (the ledger CLI sends its working directory)",
    );
  }
  checkPathShape("directory", request.directory);
  if (!path.isAbsolute(request.directory)) {
    throw new InvalidArgumentError(
      "directory",
      `${JSON.stringify(request.directory)} is relative: send the absolute path of the project directory (the server's working directory is not the client's)`,
    );
  }
  // A child belongs to its parent's owner, whoever creates it.
  const parentOwnership = request.parentId ? await store.getSessionOwnership(deps.db, request.parentId) : undefined;
  if (request.parentId && !parentOwnership) throw new SessionNotFoundError(request.parentId, "parent_id");
  // The allowed directories are checked on the path as written before the filesystem is asked
  // anything (a caller learns nothing about directories outside them), then on the resolved path.
  const tenant = (parentOwnership ?? ownership).tenant;
  await checkSessionDirectory(deps, tenant, path.resolve(request.directory), request.directory);
  const directory = await resolveDirectory(request.directory);
  await checkSessionDirectory(deps, tenant, directory, request.directory);
  const agent = request.agent ? resolveAgent(deps.config, request.agent).name : "";
  const now = new Date();
  const session = create(SessionSchema, {
    id: newId("ses"),
    directory,
    title: isBlank(request.title) ? `New session - ${now.toISOString()}` : request.title,
    parentId: request.parentId,
    agent,
    model: request.model,
    timeCreated: timestampFromDate(now),
    timeUpdated: timestampFromDate(now),
  });
  return { session, now, ownership: parentOwnership ?? ownership, parentId: request.parentId };
}

/**
 * Stores a planned session and its first event (`session_updated`, seq 1) in `tx`. Throws
 * `SessionNotFoundError` (NOT_FOUND, `parent_id`) when the parent was deleted since it was checked.
 */
async function insertPlannedSession(deps: LedgerDeps, tx: Tx, { session, now, ownership, parentId }: PlannedSession): Promise<void> {
  const event = create(SessionEventSchema, {
    sessionId: session.id,
    seq: 1n,
    time: timestampFromDate(now),
    kind: { case: "sessionUpdated", value: { session } },
  });
  try {
    await store.insertSession(tx.trx, session, now, ownership);
  } catch (error) {
    // The parent was deleted between the check and this insert.
    if (parentId && isForeignKeyViolation(error)) throw new SessionNotFoundError(parentId, "parent_id");
    throw error;
  }
  await appendEvents(tx.trx, [event]);
  const version = await store.setLastSeq(tx.trx, session.id, 1);
  // Known from here on: the session's first prompt needs no read before its write.
  if (version) tx.onCommit(() => sessionCache(deps.db).put({ session, version, lastSeq: 1 }));
  tx.publish([event]);
  tx.onCommit(() => deps.relay?.hint(session.id, 1n, [event]));
}

/** Reads a session, with its message count. Throws `SessionNotFoundError` (NOT_FOUND). */
export async function getSession(deps: LedgerDeps, sessionId: string): Promise<Session> {
  const row = await store.getSessionRowWithCount(deps.db, sessionId);
  if (!row) throw new SessionNotFoundError(sessionId);
  return store.rowToSession(row);
}

/** A ListSessions token's `d`: 16 base64url characters of the resolved filter's SHA-256, "" without a filter (a 4096-byte path would not fit the 512-byte token). */
function directoryDigest(directory: string | undefined): string {
  return directory === undefined ? "" : createHash("sha256").update(directory).digest("base64url").slice(0, 16);
}

/** The sessions whose parent is `sessionId`, newest first. Throws `SessionNotFoundError`. */
export async function listChildren(deps: LedgerDeps, sessionId: string): Promise<Session[]> {
  if (!(await store.sessionExists(deps.db, sessionId))) throw new SessionNotFoundError(sessionId);
  return (await store.listChildSessionRows(deps.db, sessionId)).map(store.rowToSession);
}

/**
 * One page of sessions, most recently updated first, optionally of one `directory`
 * (an absolute path, compared resolved), only those `visibleTo` lets the caller see (see
 * `visibilityFor` in access.ts; undefined: all). Page tokens are `{t: last time_updated, id: last
 * id, d: the filter's digest}` (tokens issued before `d` existed are taken without the check).
 * Throws `InvalidArgumentError` on a bad `page_token` or one issued for another `directory`
 * filter (it would skip or repeat sessions of this one), and on a `directory` that is relative,
 * has a NUL or is over 4096 bytes.
 */
export async function listSessions(
  deps: LedgerDeps,
  page: { pageSize: number; pageToken: string; directory: string },
  visibleTo?: store.SessionVisibility,
): Promise<{ sessions: Session[]; nextPageToken: string }> {
  const limit = Math.min(page.pageSize || SESSION_PAGE.default, SESSION_PAGE.max);
  const token = page.pageToken ? decodePageToken("page_token", page.pageToken, { t: "date", id: "string" }) : undefined;
  const cursor = token ? { timeUpdated: new Date(String(token.t)), id: String(token.id) } : undefined;
  if (page.directory) checkPathShape("directory", page.directory);
  if (page.directory && !path.isAbsolute(page.directory)) {
    throw new InvalidArgumentError(
      "directory",
      `${JSON.stringify(page.directory)} is relative: filter by the absolute path of the project directory`,
    );
  }
  const directory = page.directory ? await realpath(page.directory).catch(() => page.directory) : undefined;
  const filter = directoryDigest(directory);
  const issuedFor = (token as Record<string, unknown> | undefined)?.d;
  if (issuedFor !== undefined && issuedFor !== filter)
    throw new InvalidArgumentError(
      "page_token",
      "continues a listing with another directory filter; send the same directory as the call that returned it, or no page_token to start over",
    );
  const rows = await store.listSessionRows(deps.db, { limit: limit + 1, cursor, directory, visibleTo });
  const pageRows = rows.slice(0, limit);
  const last = pageRows.at(-1);
  return {
    sessions: pageRows.map(store.rowToSession),
    nextPageToken: rows.length > limit && last ? encodePageToken({ t: last.time_updated.toISOString(), id: last.id, d: filter }) : "",
  };
}

/**
 * Sets the fields given (`title`) and emits `session_updated`. A request that changes nothing (no
 * field, or the title the session has) writes nothing: no event, `time_updated` kept (so the
 * "most recently updated" order of ListSessions does not move), and returns the session.
 * Throws `InvalidArgumentError` (INVALID_ARGUMENT on `title`) for an empty or blank title,
 * `SessionNotFoundError` (NOT_FOUND).
 */
export async function updateSession(deps: LedgerDeps, sessionId: string, change: { title?: string }): Promise<Session> {
  if (change.title !== undefined && isBlank(change.title))
    throw new InvalidArgumentError("title", "must not be empty or blank; leave title out to keep the session's title");
  const current = await getSession(deps, sessionId);
  if (change.title === undefined || change.title === current.title) return current;
  const { result } = await writeSession(deps, sessionId, async (w) => {
    w.session.title = change.title!;
    w.emit({ case: "sessionUpdated", value: { session: w.session } });
    return w.session;
  });
  return getSession(deps, result.id);
}

/**
 * Deletes a session and, by cascade, its messages, parts, events and child sessions (at any
 * depth). It does not wait for running loops: the delete locks the rows (root, then each level
 * of children) so no write or new child slips in, and
 * queues one relay notice per deleted session in its transaction (Postgres delivers them only
 * on commit). After commit, every live watcher (WatchSession, PromptStream; here and, through
 * the notice, on every other replica) gets a `session_deleted` event (not stored: the log goes
 * with the session; `seq` = the session's last seq + 1, renumbered by each feed to one past the
 * last event its reader got) and its stream ends, and a loop still
 * running for one of those sessions anywhere is aborted and stops quietly.
 * Throws `SessionNotFoundError` (NOT_FOUND).
 */
export async function deleteSession(deps: LedgerDeps, sessionId: string): Promise<void> {
  // Loops are not aborted first (an aborted loop would write its answer and `idle`, and the
  // client's PromptStream would end there instead of at session_deleted); each running loop
  // hears session_deleted on the bus after commit, here as on every replica, and stops quietly.
  const time = timestampFromDate(new Date());
  await inTransaction(deps, async (tx) => {
    const rows = await store.lockSessionTree(tx.trx, sessionId);
    if (rows.length === 0 || !(await store.deleteSessionRow(tx.trx, sessionId))) throw new SessionNotFoundError(sessionId);
    const deleted = rows.map((row) =>
      create(SessionEventSchema, {
        sessionId: row.id,
        seq: BigInt(Number(row.last_seq) + 1),
        time,
        kind: { case: "sessionDeleted", value: { session: store.rowToSession(row) } },
      }),
    );
    tx.onCommit(() => {
      for (const row of rows) sessionCache(deps.db).evict(row.id);
    });
    tx.publish(deleted);
    tx.onCommit(() => deps.relay?.deleted(deleted));
  });
}

/**
 * Forks a session: a new session (same directory, agent, model, permissions; title
 * "<title> (fork)", the title cut to stay within 1024 characters: `forkTitle`) holding copies of
 * every message before `messageId` (all when empty), with new ids, in the same order; assistant
 * `parent_id`s are remapped. One transaction (repeatable read: every page is read from one
 * snapshot of the source): a fork that fails leaves no session behind. The
 * copies are read and written a page at a time (`FORK_PAGE_ROWS` messages and at most
 * `limits.page_bytes` of JSON, at least one message), and their events are stored page by page
 * and not published (nobody knows the fork's id before it is returned; its `session_updated`
 * is), so the server holds one page, not the session. Measured (docs/operations.md "Limits"):
 * 80 messages of 1 MB on a 384 MB heap took RSS up by 319 MB when the whole session was held.
 * Throws `SessionNotFoundError`, `MessageNotFoundError`, `PathNotAllowedError` (PERMISSION_DENIED,
 * field `session_id`) when the source's directory is outside `session_directories`,
 * `PreconditionError` (FAILED_PRECONDITION, SESSION_DIRECTORY_MISSING) when it no longer exists.
 */
export async function forkSession(deps: LedgerDeps, sessionId: string, messageId: string): Promise<Session> {
  const source = await getSession(deps, sessionId);
  await checkSessionStillAllowed(deps, source);
  const stop = messageId ? await getMessageRow(deps.db, sessionId, messageId) : undefined;
  if (messageId && !stop) throw new MessageNotFoundError(messageId);
  // The fork belongs to the source's owner (docs/security.md).
  const planned = await planSession(
    deps,
    create(CreateSessionRequestSchema, { directory: source.directory, title: forkTitle(source.title) }),
    (await store.getSessionOwnership(deps.db, sessionId)) ?? store.NO_OWNER,
  );
  const forkId = planned.session.id;
  await inTransaction(
    deps,
    async (tx) => {
      await insertPlannedSession(deps, tx, planned);
      await writeSessionIn(deps, tx, forkId, async (w) => {
        w.session.agent = source.agent;
        w.session.model = source.model;
        w.session.permission = source.permission;
        // Old message id → its copy's; a message's parent is copied before it (positions ascend).
        const ids = new Map<string, string>();
        for (let after: number | undefined; ;) {
          const rows = await listMessageRowsWithBytes(w.trx, sessionId, {
            afterPosition: after,
            beforePosition: stop ? Number(stop.position) : undefined,
            limit: FORK_PAGE_ROWS,
          });
          if (rows.length === 0) break;
          const page = fitPage(rows, deps.config.limits.page_bytes);
          after = Number(page.at(-1)!.position);
          for (const copy of await withParts(w.trx, page)) {
            const id = copy.message!.kind.value!.id;
            ids.set(id, newId("msg"));
            const message = remapMessage(copy.message!, forkId, ids);
            const parts = copy.parts.map((p) => ({ ...p, id: newId("prt"), sessionId: forkId, messageId: ids.get(id)! }));
            await insertMessage(w.trx, { message, position: w.nextPosition() });
            w.session.messageCount += 1;
            await insertParts(
              w.trx,
              parts.map((part) => ({ part, position: w.nextPosition() })),
            );
            w.emit({ case: "messageUpdated", value: { message } });
            for (const part of parts) w.emit({ case: "partUpdated", value: { part } });
          }
          await w.storeUnpublished();
        }
        w.emit({ case: "sessionUpdated", value: { session: w.session } });
      });
      // One snapshot of the source for every page: a prompt, a revert or a deletion committed
      // meanwhile is not half copied.
    },
    { isolation: "repeatable read" },
  );
  return getSession(deps, forkId);
}

/** Most messages a ForkSession page reads (fewer when `limits.page_bytes` is reached first). */
export const FORK_PAGE_ROWS = 100;

/** The most characters (code points) a title may have: `max_len` of `CreateSessionRequest.title` and `UpdateSessionRequest.title`. */
export const TITLE_MAX_CHARS = 1024;

/**
 * A fork's title: `"<title> (fork)"`, the source's title cut so the whole stays within
 * {@link TITLE_MAX_CHARS} code points, so a fork of a fork never holds a title the API would
 * refuse. The cut falls between grapheme clusters (`Intl.Segmenter`), so it never splits a
 * letter from its combining accent or an emoji sequence.
 */
export function forkTitle(title: string): string {
  const suffix = " (fork)";
  const room = TITLE_MAX_CHARS - suffix.length;
  if (Array.from(title).length <= room) return `${title}${suffix}`;
  let kept = "";
  let used = 0;
  for (const { segment } of GRAPHEMES.segment(title)) {
    const size = Array.from(segment).length;
    if (used + size > room) break;
    kept += segment;
    used += size;
  }
  // One cluster longer than the room (stacked combining marks): cut it by code points.
  return `${kept || Array.from(title).slice(0, room).join("")}${suffix}`;
}

const GRAPHEMES = new Intl.Segmenter(undefined, { granularity: "grapheme" });

function remapMessage(message: Message, sessionId: string, ids: Map<string, string>): Message {
  const copy = create(MessageSchema, message);
  const inner = copy.kind.value!;
  inner.id = ids.get(inner.id)!;
  inner.sessionId = sessionId;
  if (copy.kind.case === "assistant") copy.kind.value.parentId = ids.get(copy.kind.value.parentId) ?? "";
  return copy;
}

async function resolveDirectory(dir: string): Promise<string> {
  const info = await stat(dir).catch(() => undefined);
  if (!info?.isDirectory()) throw new InvalidArgumentError("directory", `${dir} is not an existing directory on the server`);
  return realpath(dir);
}
