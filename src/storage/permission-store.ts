import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import type { Kysely, Transaction } from "kysely";
import { PermissionRequestSchema, type PermissionRequest } from "../../gen/ledger/v1/permission_pb.js";
import { toJsonb } from "./jsonb.js";
import type { DB, PermissionRequestRow } from "./schema.js";

/** How a permission request was answered, as stored in `permission_request.reply`. */
export type StoredReply = "once" | "always" | "reject";

/** A permission request row decoded: the request, and its answer once there is one. */
export interface StoredPermission {
  request: PermissionRequest;
  /** Undefined while pending. */
  reply?: StoredReply;
  /** Feedback given with the reply (REJECT), or why the server rejected it; "" when none. */
  replyMessage: string;
}

/** Inserts a pending request (strings made storable in place), inside the caller's session write. */
export async function insertPermission(trx: Transaction<DB>, request: PermissionRequest): Promise<void> {
  await trx
    .insertInto("permission_request")
    .values({ id: request.id, session_id: request.sessionId, data: toJsonb(PermissionRequestSchema, request) })
    .execute();
}

/** Reads one request by id (any session), or undefined. */
export async function getPermission(db: Kysely<DB>, id: string): Promise<StoredPermission | undefined> {
  const row = await db.selectFrom("permission_request").selectAll().where("id", "=", id).executeTakeFirst();
  return row && rowToPermission(row);
}

/** A session's pending requests, oldest first (`permission_request_session_id_idx`). */
export async function listPendingPermissions(db: Kysely<DB>, sessionId: string): Promise<PermissionRequest[]> {
  const rows = await db
    .selectFrom("permission_request")
    .selectAll()
    .where("session_id", "=", sessionId)
    .where("reply", "is", null)
    .orderBy("time_created", "asc")
    .orderBy("id", "asc")
    .execute();
  return rows.map((row) => rowToPermission(row).request);
}

/**
 * Answers a request that is still pending; returns false (and changes nothing) when it was
 * already answered, so two replies racing on two replicas answer it once.
 */
export async function setPermissionReply(
  trx: Transaction<DB>,
  id: string,
  reply: StoredReply,
  message: string,
  now: Date,
): Promise<boolean> {
  const result = await trx
    .updateTable("permission_request")
    .set({ reply, reply_message: message, time_replied: now })
    .where("id", "=", id)
    .where("reply", "is", null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/** Maps a row to its request and answer: the one decoder of `permission_request.data`. */
export function rowToPermission(row: PermissionRequestRow): StoredPermission {
  return {
    request: fromJson(PermissionRequestSchema, row.data as JsonObject, { ignoreUnknownFields: true }),
    reply: (row.reply ?? undefined) as StoredReply | undefined,
    replyMessage: row.reply_message ?? "",
  };
}
