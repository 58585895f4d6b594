import { create } from "@bufbuild/protobuf";
import { PartSchema, type Part } from "../../gen/ledger/v1/part_pb.js";
import { InvalidArgumentError, LimitExceededError, MessageNotFoundError, PartNotFoundError } from "../errors.js";
import { ID_FORMAT, isId } from "../ids.js";
import { parseDataUrl } from "../parts/data-url.js";
import { checkFileUrl, limitText } from "../parts/resolve.js";
import { deleteMessages, getMessageRow } from "../storage/message-store.js";
import { deleteParts, getPartRow, rowToPart, updatePartRow } from "../storage/part-store.js";
import { protoCaseName } from "../storage/proto-names.js";
import type { LedgerDeps } from "./deps.js";
import { checkTimestamps, jsonFieldSizes, limitJsonFields } from "./json-fields.js";
import { moveRevertPoint } from "./revert.js";
import { assertIdle } from "./status.js";
import { writeSession, type SessionWrite } from "./writer.js";

/**
 * Removes a message with its parts; emits `message_removed`, then `part_removed` per part. A
 * revert point on the message moves to the next one (`moveRevertPoint`).
 * Throws `SessionNotFoundError`, `MessageNotFoundError` (NOT_FOUND; not in the session),
 * `SessionBusyError` (FAILED_PRECONDITION, reason SESSION_BUSY).
 */
export async function deleteMessage(deps: LedgerDeps, sessionId: string, messageId: string): Promise<void> {
  await writeSession(deps, sessionId, async (w) => {
    await assertIdle(deps, w.trx, sessionId);
    await messageOf(w, messageId);
    await moveRevertPoint(w, { messageId });
    const removed = await deleteMessages(w.trx, sessionId, [messageId]);
    w.emit({ case: "messageRemoved", value: { messageId } });
    for (const part of removed.parts) w.emit({ case: "partRemoved", value: { messageId, partId: part.id } });
    w.session.messageCount -= 1;
  });
}

/**
 * Removes one part; emits `part_removed`. A revert point on the part moves (`moveRevertPoint`).
 * Throws `SessionNotFoundError`, `MessageNotFoundError`, `PartNotFoundError` (NOT_FOUND; not in
 * the message), `SessionBusyError` (FAILED_PRECONDITION, reason SESSION_BUSY).
 */
export async function deletePart(deps: LedgerDeps, sessionId: string, messageId: string, partId: string): Promise<void> {
  await writeSession(deps, sessionId, async (w) => {
    await assertIdle(deps, w.trx, sessionId);
    await messageOf(w, messageId);
    const part = await getPartRow(w.trx, sessionId, partId);
    if (!part || part.message_id !== messageId) throw new PartNotFoundError(partId);
    await moveRevertPoint(w, { messageId, partId });
    await deleteParts(w.trx, sessionId, [partId]);
    w.emit({ case: "partRemoved", value: { messageId, partId } });
  });
}

/**
 * Replaces a stored part with `part` (same id, message and kind); emits `part_updated`. Throws:
 * - `InvalidArgumentError` (INVALID_ARGUMENT): `part.id` is not a part id;
 *   `part.session_id`/`part.message_id` differ from the request; `part.kind` unset or changed;
 *   the part belongs to another message; a file part's URL is not a valid `data:`, `file:` or
 *   `http(s):` URL (`part.file.url`); a Timestamp no RFC 3339 time can write (`checkTimestamps`);
 * - `LimitExceededError` (RESOURCE_EXHAUSTED): a text, or a subtask's `prompt`, `description` or
 *   `command`, over `limits.text_part_bytes` (bytes of UTF-8); a `data:` URL whose body is over
 *   `limits.data_url_bytes`; more JSON in the part's Struct fields (metadata, tool input) than
 *   `limits.metadata_bytes` and the stored part's own;
 * - `SessionNotFoundError`, `MessageNotFoundError`, `PartNotFoundError` (`part.id`) (NOT_FOUND),
 *   `SessionBusyError` (FAILED_PRECONDITION).
 */
export async function updatePart(deps: LedgerDeps, sessionId: string, messageId: string, part: Part): Promise<Part> {
  if (part.sessionId !== sessionId) throw new InvalidArgumentError("part.session_id", `must equal session_id ${sessionId}`);
  if (part.messageId !== messageId)
    throw new InvalidArgumentError("part.message_id", `must equal message_id ${messageId}; a part cannot move to another message`);
  if (!part.kind.case) throw new InvalidArgumentError("part.kind", "is required");
  if (!isId("prt", part.id))
    throw new InvalidArgumentError("part.id", `${JSON.stringify(part.id.slice(0, 80))} is not a part id: expected ${ID_FORMAT.prt}`);
  // A file part's URL is checked as a prompt's is (an MCP resource keeps its server's URI).
  if (part.kind.case === "file" && part.kind.value.source?.kind.case !== "resource") {
    const scheme = checkFileUrl("part.file.url", part.kind.value.url);
    if (scheme === "data") {
      const data = parseDataUrl("part.file.url", part.kind.value.url);
      const max = deps.config.limits.data_url_bytes;
      if (data.bytes.byteLength > max) throw new LimitExceededError("part.file.url", "data_url_bytes", max, data.bytes.byteLength, "bytes");
    }
  }
  checkTimestamps(PartSchema, part, "part");
  // Struct fields are bounded as a prompt's are, but never below what this part holds already:
  // the server's own tool parts may be larger (a write's input and diff hold the whole file).
  const json = jsonFieldSizes(PartSchema, part, "part");
  const metadataMax = deps.config.limits.metadata_bytes;
  // A text part, and a subtask's texts, are bounded as a prompt's drafts are.
  const kind = part.kind;
  const texts: Array<[string, string]> =
    kind.case === "text"
      ? [["part.text.text", kind.value.text]]
      : kind.case === "subtask"
        ? (["prompt", "description", "command"] as const).map((name) => [`part.subtask.${name}`, kind.value[name]])
        : [];
  for (const [field, text] of texts) limitText(deps.config.limits, text, field);
  const { result } = await writeSession(deps, sessionId, async (w) => {
    await assertIdle(deps, w.trx, sessionId);
    await messageOf(w, messageId);
    const row = await getPartRow(w.trx, sessionId, part.id);
    if (!row) throw new PartNotFoundError(part.id, "part.id");
    if (row.message_id !== messageId)
      throw new InvalidArgumentError(
        "part.message_id",
        `part ${part.id} belongs to message ${row.message_id}; a part cannot move to another message`,
      );
    const kind = protoCaseName(PartSchema, part.kind.case ?? "");
    if (row.kind !== kind) throw new InvalidArgumentError("part.kind", `cannot change a ${row.kind} part into ${kind}`);
    if (json.total > metadataMax) limitJsonFields(json, Math.max(metadataMax, jsonFieldSizes(PartSchema, rowToPart(row), "part").total));
    const stored = create(PartSchema, part);
    await updatePartRow(w.trx, stored);
    w.emit({ case: "partUpdated", value: { part: stored } });
    return stored;
  });
  return result;
}

async function messageOf(w: SessionWrite, messageId: string): Promise<void> {
  const row = await getMessageRow(w.trx, w.session.id, messageId);
  if (!row) throw new MessageNotFoundError(messageId);
}
