/**
 * The baseline write of a prompt: one bare `pg` transaction that writes the same rows a stored
 * prompt writes (the message, its parts, its events, the session's counters), with the `data`
 * JSON taken from a real stored prompt. No Kysely, no protobuf, no validation.
 */
import type pg from "pg";
import type { WrittenRows } from "./ledger.js";

let counter = 0;

/**
 * BEGIN; SELECT last_seq, last_position ... FOR UPDATE; INSERT message; INSERT parts (one
 * multi-row insert); INSERT events (one multi-row insert); UPDATE session; COMMIT.
 */
export async function bareWrite(pool: pg.Pool, sessionId: string, rows: WrittenRows): Promise<void> {
  const n = ++counter;
  const client = await pool.connect();
  try {
    await client.query("begin");
    const locked = await client.query<{ last_seq: string; last_position: string }>(
      "select last_seq, last_position from session where id = $1 for update",
      [sessionId],
    );
    let seq = Number(locked.rows[0]!.last_seq);
    let position = Number(locked.rows[0]!.last_position);
    const messageId = `msg_bare_${process.pid}_${n}`;
    await client.query("insert into message (id, session_id, position, role, data, request_hash) values ($1, $2, $3, $4, $5, $6)", [
      messageId,
      sessionId,
      ++position,
      rows.message.role,
      rows.message.data,
      rows.message.requestHash,
    ]);
    if (rows.parts.length > 0) {
      const params: unknown[] = [];
      const values = rows.parts.map((part, i) => {
        const b = params.length;
        params.push(`prt_bare_${process.pid}_${n}_${i}`, sessionId, messageId, ++position, part.kind, part.data);
        return `($${b + 1}, $${b + 2}, $${b + 3}, $${b + 4}, $${b + 5}, $${b + 6})`;
      });
      await client.query(`insert into part (id, session_id, message_id, position, kind, data) values ${values.join(", ")}`, params);
    }
    const now = new Date();
    const params: unknown[] = [];
    const values = rows.events.map((event) => {
      const b = params.length;
      params.push(sessionId, ++seq, event.kind, event.data, now);
      return `($${b + 1}, $${b + 2}, $${b + 3}, $${b + 4}, $${b + 5})`;
    });
    await client.query(`insert into session_event (session_id, seq, kind, data, time) values ${values.join(", ")}`, params);
    await client.query("update session set data = $1, last_seq = $2, last_position = $3, time_updated = $4 where id = $5", [
      rows.session,
      seq,
      position,
      now,
      sessionId,
    ]);
    await client.query("commit");
  } catch (error) {
    await client.query("rollback").catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}
