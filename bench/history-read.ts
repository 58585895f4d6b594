/**
 * Reading the latest 50 messages (with their parts) of a 10,000-message session vs a
 * 100-message session, on the same database.
 *
 * The first row (the goal) is the RPC a client makes: `ListMessages(page_size 50,
 * newest_first)`. The second row is the storage query under it (`listMessageRows` newest first,
 * limit 51, + `listPartRows`) on the app's Kysely. The third row (no goal) is what a client had
 * to do before `newest_first` existed: page oldest first through the whole session (page_size
 * 1000, the maximum) and keep the tail.
 *
 * Sessions are seeded with SQL (`generate_series`) from the rows of a real stored prompt:
 * each message has PARTS text parts, so messages sit at every (PARTS + 1)-th position.
 */
import pg from "pg";
import { listMessageRows } from "../src/storage/message-store.js";
import { listPartRows } from "../src/storage/part-store.js";
import { atMost, connectClient, createBenchDatabase, log, paired, percentile, prose, row, scaled, tempDir, type Row } from "./common.js";
import { lastSeq, startBenchLedger, writtenRows } from "./ledger.js";

const LATEST = 50;
const PARTS = 2;
const SIZES = { big: 10_000, small: 100 };

export async function historyRead(): Promise<Row[]> {
  const database = await createBenchDatabase("history");
  const work = await tempDir("history");
  const ledger = await startBenchLedger({ kind: "postgres", url: database.url }, work.dir);
  const client = connectClient(ledger.url);
  const sql = new pg.Client({ connectionString: database.url });
  await sql.connect();
  try {
    const sessions: Record<keyof typeof SIZES, { id: string; lastPosition: number }> = {
      big: { id: "", lastPosition: 0 },
      small: { id: "", lastPosition: 0 },
    };
    for (const key of ["big", "small"] as const) {
      const count = SIZES[key];
      log(`history read: seeding a ${count}-message session`);
      const id = (await client.createSession({ directory: work.dir })).session!.id;
      // One real prompt gives the rows to copy.
      const before = await lastSeq(ledger.deps.db, id);
      const res = await client.prompt({
        sessionId: id,
        noReply: true,
        parts: Array.from({ length: PARTS }, (_, i) => ({ kind: { case: "text" as const, value: { text: prose(300, i) } } })),
      });
      const template = await writtenRows(ledger.deps.db, id, res.message!.message!.kind.value!.id, before);
      const stride = PARTS + 1;
      // Messages 2..count at positions (i-1)*stride + 1, their parts right after them.
      await sql.query(
        `insert into message (id, session_id, position, role, data, request_hash)
         select 'msg_seed_' || $1 || '_' || i, $1, (i - 1) * $2::int + 1, $3,
                jsonb_set($4::jsonb, '{user,id}', to_jsonb('msg_seed_' || $1 || '_' || i)), null
         from generate_series(2, $5::int) as i`,
        [id, stride, template.message.role, template.message.data, count],
      );
      for (let p = 0; p < PARTS; p++) {
        await sql.query(
          `insert into part (id, session_id, message_id, position, kind, data)
           select 'prt_seed_' || $1 || '_' || i || '_' || $2::text, $1, 'msg_seed_' || $1 || '_' || i, (i - 1) * $3::int + 2 + $2::int, $4,
                  jsonb_set(jsonb_set($5::jsonb, '{id}', to_jsonb('prt_seed_' || $1 || '_' || i || '_' || $2::text)), '{messageId}', to_jsonb('msg_seed_' || $1 || '_' || i))
           from generate_series(2, $6::int) as i`,
          [id, p, stride, template.parts[p]!.kind, template.parts[p]!.data, count],
        );
      }
      const lastPosition = count * stride;
      await sql.query("update session set last_position = $2 where id = $1", [id, lastPosition]);
      const check = await sql.query<{ n: string; max: string }>(
        "select count(*) as n, max(position) as max from message where session_id = $1",
        [id],
      );
      if (Number(check.rows[0]!.n) !== count || Number(check.rows[0]!.max) !== lastPosition - PARTS)
        throw new Error(`seeding ${key} went wrong: ${JSON.stringify(check.rows[0])}`);
      sessions[key] = { id, lastPosition };
    }
    await sql.query("analyze");

    /** What a client does today: page through everything (page_size 1000), keep the last 50. */
    const pageThrough = async (sessionId: string) => {
      const all = [];
      let pageToken = "";
      let calls = 0;
      do {
        const page = await client.listMessages({ sessionId, pageSize: 1000, pageToken });
        calls++;
        all.push(...page.messages);
        pageToken = page.nextPageToken;
      } while (pageToken);
      const latest = all.slice(-LATEST);
      if (latest.length !== LATEST) throw new Error(`read ${latest.length} messages`);
      return calls;
    };
    /** The storage query for the latest 50 (what ListMessages runs for one newest-first page). */
    const storage = async (key: keyof typeof SIZES) => {
      const messages = await listMessageRows(ledger.deps.db, sessions[key].id, { newestFirst: true, limit: LATEST + 1 });
      const parts = await listPartRows(
        ledger.deps.db,
        sessions[key].id,
        messages.slice(0, LATEST).map((m) => m.id),
      );
      if (messages.length !== LATEST + 1 || parts.length !== LATEST * PARTS)
        throw new Error(`storage read ${messages.length} messages, ${parts.length} parts`);
    };
    /** The RPC: ListMessages(page_size 50, newest_first). */
    const newestFirst = async (key: keyof typeof SIZES) => {
      const page = await client.listMessages({ sessionId: sessions[key].id, pageSize: LATEST, newestFirst: true });
      if (page.messages.length !== LATEST || page.nextPageToken === "")
        throw new Error(`newest-first read ${page.messages.length} messages`);
    };

    const bigCalls = await pageThrough(sessions.big.id);
    const smallCalls = await pageThrough(sessions.small.id);
    const apiIterations = scaled(12, 3);
    log(`history read: paging through (${bigCalls} vs ${smallCalls} ListMessages calls), ${apiIterations} rounds`);
    const api = await paired(
      apiIterations,
      2,
      () => pageThrough(sessions.big.id),
      () => pageThrough(sessions.small.id),
    );
    const iterations = scaled(400, 20);
    log(`history read: storage query and cursor RPC, ${iterations} rounds each`);
    const store = await paired(
      iterations,
      scaled(40, 5),
      () => storage("big"),
      () => storage("small"),
    );
    const rpc = await paired(
      iterations,
      scaled(40, 5),
      () => newestFirst("big"),
      () => newestFirst("small"),
    );
    const sizes = `${SIZES.big} vs ${SIZES.small} messages, ${PARTS} text parts each`;
    return [
      row(
        "latest 50 messages, ListMessages newest_first (10k vs 100-message session), p50",
        percentile(rpc.a, 50),
        percentile(rpc.b, 50),
        "ms",
        atMost(1.5),
        `ListMessages(page_size 50, newest_first) over Connect; ${sizes}`,
      ),
      row(
        "latest 50 messages, storage query (10k vs 100), p50",
        percentile(store.a, 50),
        percentile(store.b, 50),
        "ms",
        undefined,
        `listMessageRows(newestFirst, limit 51) + listPartRows on the app's Kysely; ${sizes}`,
      ),
      row(
        "latest 50 messages by paging oldest first (10k vs 100), p50",
        percentile(api.a, 50),
        percentile(api.b, 50),
        "ms",
        undefined,
        `ListMessages with page_size 1000 (the maximum) until next_page_token is empty, keeping the last 50: ${bigCalls} calls vs ${smallCalls}; what a client needed before newest_first; ${sizes}`,
      ),
    ];
  } finally {
    await sql.end();
    await ledger.close(1000);
    await database.drop();
    await work.remove();
  }
}
