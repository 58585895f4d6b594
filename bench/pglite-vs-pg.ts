/**
 * The noReply Prompt path on the embedded PGlite (what `npx ledger prompt` uses without
 * DATABASE_URL: a data directory on disk) and on in-memory PGlite, vs the same ledger on
 * Postgres. Informational: no goal. Same client, same request (5 text parts), alternating.
 */
import path from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { PromptRequestSchema } from "../gen/ledger/v1/service_pb.js";
import { connectClient, createBenchDatabase, log, paired, percentileRows, prose, scaled, tempDir, type Row } from "./common.js";
import { startBenchLedger } from "./ledger.js";

const PARTS = 5;

export async function pgliteVsPg(): Promise<Row[]> {
  const database = await createBenchDatabase("pglite");
  const work = await tempDir("pglite");
  const postgres = await startBenchLedger({ kind: "postgres", url: database.url }, work.dir);
  const disk = await startBenchLedger({ kind: "pglite", dir: path.join(work.dir, ".ledger", "db") }, work.dir);
  const memory = await startBenchLedger({ kind: "pglite", dir: ":memory:" }, work.dir);
  try {
    const clients = { postgres: connectClient(postgres.url), disk: connectClient(disk.url), memory: connectClient(memory.url) };
    const session = async (client: (typeof clients)["postgres"]) => (await client.createSession({ directory: work.dir })).session!.id;
    const sessions = {
      postgres: await session(clients.postgres),
      disk: await session(clients.disk),
      memory: await session(clients.memory),
    };
    const request = (sessionId: string): MessageInitShape<typeof PromptRequestSchema> => ({
      sessionId,
      noReply: true,
      parts: Array.from({ length: PARTS }, (_, i) => ({ kind: { case: "text" as const, value: { text: prose(200, i) } } })),
    });
    const iterations = scaled(300, 20);
    const warmup = scaled(30, 5);
    log(`pglite vs postgres: ${iterations} prompts each (disk, then memory)`);
    const onDisk = await paired(
      iterations,
      warmup,
      () => clients.disk.prompt(request(sessions.disk)),
      () => clients.postgres.prompt(request(sessions.postgres)),
    );
    const inMemory = await paired(
      iterations,
      warmup,
      () => clients.memory.prompt(request(sessions.memory)),
      () => clients.postgres.prompt(request(sessions.postgres)),
    );
    const note = `noReply Prompt round trip, ${PARTS} text parts, in-process ledger; PGlite runs inside the server's Node thread (WASM), Postgres in its own processes`;
    return [
      ...percentileRows(
        `PGlite (disk) vs Postgres: noReply Prompt, ${PARTS} parts`,
        onDisk.a,
        onDisk.b,
        { 50: undefined, 99: undefined },
        note,
      ),
      ...percentileRows(`PGlite (memory) vs Postgres: noReply Prompt, ${PARTS} parts`, inMemory.a, inMemory.b, { 50: undefined }, note),
    ];
  } finally {
    await memory.close(500);
    await disk.close(500);
    await postgres.close(500);
    await database.drop();
    await work.remove();
  }
}
