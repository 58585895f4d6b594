import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import type { Kysely, Transaction } from "kysely";
import { PartSchema, type Part } from "../../gen/ledger/v1/part_pb.js";
import { toJsonb } from "./jsonb.js";
import { protoCaseName } from "./proto-names.js";
import type { DB, PartRow } from "./schema.js";

/** Postgres allows 65,535 bind parameters per statement; part rows have 7 columns. */
const PART_ROWS_PER_INSERT = Math.floor(65535 / 7);

/** A part to insert, with its server-assigned position. */
export interface NewPart {
  part: Part;
  position: number;
}

/** A removed part: its id and its message's id. */
export interface RemovedPart {
  id: string;
  message_id: string;
}

/**
 * Inserts parts with multi-row inserts, chunked under the bind-parameter limit, keeping the
 * given order. Each part's strings are made storable in place (`makeStorable`), so the caller's
 * parts are what was stored. Throws the driver's unique-violation error (23505, `part_pkey`) on a
 * duplicate part id.
 */
export async function insertParts(trx: Transaction<DB>, parts: NewPart[]): Promise<void> {
  for (let i = 0; i < parts.length; i += PART_ROWS_PER_INSERT) {
    const chunk = parts.slice(i, i + PART_ROWS_PER_INSERT);
    await trx
      .insertInto("part")
      .values(
        chunk.map(({ part, position }) => {
          const data = toJsonb(PartSchema, part);
          return {
            id: part.id,
            session_id: part.sessionId,
            message_id: part.messageId,
            position,
            kind: protoCaseName(PartSchema, part.kind.case ?? ""),
            data,
            data_bytes: Buffer.byteLength(data),
          };
        }),
      )
      .execute();
  }
}

/**
 * Replaces a stored part's data (kind and position never change); strings made storable in
 * place. Scoped by the part's own `session_id` (docs/scaling.md): a part of another session is
 * left alone.
 */
export async function updatePartRow(trx: Transaction<DB>, part: Part): Promise<void> {
  const data = toJsonb(PartSchema, part);
  await trx
    .updateTable("part")
    .set({ data, data_bytes: Buffer.byteLength(data) })
    .where("id", "=", part.id)
    .where("session_id", "=", part.sessionId)
    .execute();
}

/**
 * Reads part `id` of session `sessionId`, or undefined when there is none or it belongs to
 * another session (scoped by session: docs/scaling.md).
 */
export async function getPartRow(db: Kysely<DB>, sessionId: string, id: string): Promise<PartRow | undefined> {
  return db.selectFrom("part").selectAll().where("id", "=", id).where("session_id", "=", sessionId).executeTakeFirst();
}

/**
 * Reads the parts of the given messages of session `sessionId` in position order
 * (`part_message_id_position_idx`; scoped by session: docs/scaling.md).
 */
export async function listPartRows(db: Kysely<DB>, sessionId: string, messageIds: string[]): Promise<PartRow[]> {
  if (messageIds.length === 0) return [];
  return db
    .selectFrom("part")
    .selectAll()
    .where("session_id", "=", sessionId)
    .where("message_id", "in", messageIds)
    .orderBy("position", "asc")
    .execute();
}

/**
 * Deletes the given parts of session `sessionId` (ids of other sessions are left alone: scoped
 * by session, docs/scaling.md); returns the removed ones in position order.
 */
export async function deleteParts(trx: Transaction<DB>, sessionId: string, partIds: string[]): Promise<RemovedPart[]> {
  if (partIds.length === 0) return [];
  const rows = await trx
    .deleteFrom("part")
    .where("session_id", "=", sessionId)
    .where("id", "in", partIds)
    .returning(["id", "message_id", "position"])
    .execute();
  return rows.sort((a, b) => Number(a.position) - Number(b.position)).map(({ id, message_id }) => ({ id, message_id }));
}

/** Maps a part row to `ledger.v1.Part`: the one decoder of the `part.data` column. */
export function rowToPart(row: Pick<PartRow, "data">): Part {
  return fromJson(PartSchema, row.data as JsonObject, { ignoreUnknownFields: true });
}
