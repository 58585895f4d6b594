/**
 * noReply `Prompt` round trip (1, 5 and 20 text parts) against the ledger on Postgres, vs the
 * same request sent to a bare Connect unary echo whose handler runs one bare `pg` transaction
 * writing the same rows (bench/bare-write.ts) and answers with the same response bytes.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import pg from "pg";
import type { PromptRequestSchema, PromptResponse } from "../gen/ledger/v1/service_pb.js";
import { SessionService } from "../gen/ledger/v1/service_pb.js";
import { bareWrite } from "./bare-write.js";
import {
  atMost,
  connectClient,
  createBenchDatabase,
  log,
  paired,
  percentile,
  prose,
  row,
  scaled,
  startBareConnect,
  tempDir,
  type Row,
} from "./common.js";
import { lastSeq, startBenchLedger, writtenRows, type WrittenRows } from "./ledger.js";

const PART_COUNTS = [1, 5, 20];

export async function promptLatency(): Promise<Row[]> {
  const database = await createBenchDatabase("prompt");
  const work = await tempDir("prompt");
  const ledger = await startBenchLedger({ kind: "postgres", url: database.url }, work.dir);
  const pool = new pg.Pool({ connectionString: database.url, max: 10 });
  // What the echo answers and writes for the current part count.
  let current: { response: PromptResponse; rows: WrittenRows } | undefined;
  const bare = await startBareConnect((router) =>
    router.service(SessionService, {
      async prompt(req) {
        if (!current) throw new Error("no response captured");
        await bareWrite(pool, req.sessionId, current.rows);
        return current.response;
      },
    }),
  );
  const ours = connectClient(ledger.url);
  const echo = connectClient(bare.url);
  const rows: Row[] = [];
  try {
    for (const count of PART_COUNTS) {
      const oursSession = (await ours.createSession({ directory: work.dir })).session!.id;
      const bareSession = (await ours.createSession({ directory: work.dir })).session!.id;
      const request = (sessionId: string): MessageInitShape<typeof PromptRequestSchema> => ({
        sessionId,
        noReply: true,
        parts: Array.from({ length: count }, (_, i) => ({ kind: { case: "text" as const, value: { text: prose(200, i) } } })),
      });
      // One real prompt gives the response bytes and the rows the baseline replays.
      const before = await lastSeq(ledger.deps.db, oursSession);
      const response = await ours.prompt(request(oursSession));
      const messageId = response.message!.message!.kind.value!.id;
      current = { response, rows: await writtenRows(ledger.deps.db, oursSession, messageId, before) };

      const iterations = scaled(300, 20);
      log(`prompt latency: ${count} part(s), ${iterations} round trips each`);
      const samples = await paired(
        iterations,
        scaled(30, 5),
        () => ours.prompt(request(oursSession)),
        () => echo.prompt(request(bareSession)),
      );
      const label = `${count} part${count === 1 ? "" : "s"}`;
      const note =
        `baseline: the same PromptRequest to a bare Connect server (same transport: Connect binary, HTTP/1.1) whose prompt handler runs ` +
        `BEGIN; SELECT … FOR UPDATE; INSERT message; INSERT ${count} part(s); INSERT ${current.rows.events.length} events; UPDATE session; COMMIT ` +
        `through pg and returns the same PromptResponse`;
      rows.push(
        row(`Prompt noReply round trip, ${label}, p50`, percentile(samples.a, 50), percentile(samples.b, 50), "ms", atMost(1.5), note),
      );
      rows.push(row(`Prompt noReply round trip, ${label}, p99`, percentile(samples.a, 99), percentile(samples.b, 99), "ms"));
    }
  } finally {
    await bare.close();
    await ledger.close(1000);
    await pool.end();
    await database.drop();
    await work.remove();
  }
  return rows;
}
