/**
 * Profiling aid (not part of `npm run bench`): an in-process ledger on Postgres answering
 * `PROFILE_N` noReply prompts (1 text part) over Connect (HTTP/1.1, binary) and then over gRPC
 * (h2c, a `@grpc/grpc-js` client), one at a time. Run it under `node --cpu-prof` to see where a
 * prompt's time goes on each path:
 *
 *   BENCH_DATABASE_URL=... node --cpu-prof --cpu-prof-dir=/tmp/prof --import tsx bench/profile-prompt.ts
 *
 * Prints each path's median round trip (ms).
 */
import "./env.js";
import { grpcLedgerClient } from "../test/support/grpc-js.js";
import { connectClient, createBenchDatabase, elapsedMs, median, now, prose, tempDir } from "./common.js";
import { startBenchLedger } from "./ledger.js";

const N = Number(process.env.PROFILE_N ?? "2000");
const database = await createBenchDatabase("profile");
const work = await tempDir("profile");
const ledger = await startBenchLedger({ kind: "postgres", url: database.url }, work.dir);
try {
  const connect = connectClient(ledger.url);
  const grpc = grpcLedgerClient(ledger.url);
  const sessionId = (await connect.createSession({ directory: work.dir })).session!.id;
  const text = prose(200);
  const connectMs: number[] = [];
  for (let i = 0; i < N; i++) {
    const start = now();
    await connect.prompt({ sessionId, noReply: true, parts: [{ kind: { case: "text", value: { text } } }] });
    connectMs.push(elapsedMs(start));
  }
  const grpcMs: number[] = [];
  for (let i = 0; i < N; i++) {
    const start = now();
    await new Promise((resolve, reject) =>
      grpc.prompt({ sessionId, noReply: true, parts: [{ text: { text } }] }, (error, response) =>
        error ? reject(error) : resolve(response),
      ),
    );
    grpcMs.push(elapsedMs(start));
  }
  grpc.close();
  process.stdout.write(`connect p50 ${median(connectMs).toFixed(2)} ms, grpc p50 ${median(grpcMs).toFixed(2)} ms (${N} each)\n`);
} finally {
  await ledger.close(1000);
  await database.drop();
  await work.remove();
}
