/**
 * noReply `Prompt` round trip (1, 5 and 20 text parts) against the ledger on Postgres, vs the
 * same request sent to a bare Connect unary echo whose handler runs one bare `pg` transaction
 * writing the same rows (bench/bare-write.ts) and answers with the same response bytes; the
 * same over gRPC (h2c, a `@grpc/grpc-js` client) vs a bare connect-node h2c server; and vs the
 * floor: pgbench, one client, the ledger's own write statement (one statement inserting the same
 * rows). Also counts the database round trips of one noReply prompt from the `pg` client.
 */
import http2 from "node:http2";
import type net from "node:net";
import { create, toJson, type MessageInitShape } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import pg from "pg";
import { grpcLedgerClient, type GrpcLedger } from "../test/support/grpc-js.js";
import { PromptRequestSchema, type PromptResponse } from "../gen/ledger/v1/service_pb.js";
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
import { captureStatements, findPgbench, pgbenchCommand, pgbenchLatencies, writeScript } from "./pgbench.js";

const PART_COUNTS = [1, 5, 20];

/** A bare gRPC server for the baseline: connect-node on a plain `http2` server (h2c), no interceptors. */
async function startBareH2c(routes: Parameters<typeof connectNodeAdapter>[0]["routes"]): Promise<{ url: string; close(): Promise<void> }> {
  const server = http2.createServer(connectNodeAdapter({ routes }));
  const sessions = new Set<http2.Http2Session>();
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  server.on("connection", (socket: net.Socket) => socket.setNoDelay(true));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${address.port}`,
    async close() {
      for (const session of sessions) session.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A unary gRPC call through a grpc-js client (the request as proto JSON, which proto-loader reads). */
function grpcPrompt(client: GrpcLedger, request: MessageInitShape<typeof PromptRequestSchema>): Promise<unknown> {
  const body = toJson(PromptRequestSchema, create(PromptRequestSchema, request), { useProtoFieldName: false });
  return new Promise((resolve, reject) => client.prompt(body as object, (error, response) => (error ? reject(error) : resolve(response))));
}

export async function promptLatency(): Promise<Row[]> {
  const database = await createBenchDatabase("prompt");
  const work = await tempDir("prompt");
  const ledger = await startBenchLedger({ kind: "postgres", url: database.url }, work.dir);
  const pool = new pg.Pool({ connectionString: database.url, max: 10 });
  const pgbench = await findPgbench();
  // What the echo answers and writes for the current part count.
  let current: { response: PromptResponse; rows: WrittenRows } | undefined;
  const routes = (router: Parameters<Parameters<typeof startBareConnect>[0]>[0]) =>
    router.service(SessionService, {
      async prompt(req) {
        if (!current) throw new Error("no response captured");
        await bareWrite(pool, req.sessionId, current.rows);
        return current.response;
      },
    });
  const bare = await startBareConnect(routes);
  const bareGrpc = await startBareH2c(routes);
  const ours = connectClient(ledger.url);
  const echo = connectClient(bare.url);
  const oursGrpc = grpcLedgerClient(ledger.url);
  const echoGrpc = grpcLedgerClient(bareGrpc.url);
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
      const label = `${count} part${count === 1 ? "" : "s"}`;

      // Round trips per prompt, counted from the pg client (the commit hint included: it goes out just after the response).
      const probes = scaled(20, 5);
      let write = await captureStatements(async () => void (await ours.prompt(request(oursSession))), 100);
      const counted = await captureStatements(async () => {
        for (let i = 0; i < probes; i++) {
          await ours.prompt(request(oursSession));
          await new Promise((r) => setTimeout(r, 20));
        }
      }, 100);
      const perPrompt = counted.length / probes;
      write = write.filter((s) => /^\s*(\/\* ledger-prepared \*\/\s*)?with s as \(/.test(s.text));
      rows.push(
        row(
          `round trips per noReply prompt (pg client), ${label}`,
          perPrompt,
          2,
          "queries",
          atMost(1),
          "ours: queries the ledger's pg clients sent per noReply prompt (pool and relay, the after-commit hint included) over " +
            `${probes} prompts to a session it knows; baseline: the goal, 2 (the bare Connect server's transaction sends 7)`,
        ),
      );

      const iterations = scaled(300, 20);
      log(`prompt latency: ${count} part(s), ${iterations} round trips each`);
      const samples = await paired(
        iterations,
        scaled(30, 5),
        () => ours.prompt(request(oursSession)),
        () => echo.prompt(request(bareSession)),
      );
      const note =
        `baseline: the same PromptRequest to a bare Connect server (same transport: Connect binary, HTTP/1.1) whose prompt handler runs ` +
        `BEGIN; SELECT … FOR UPDATE; INSERT message; INSERT ${count} part(s); INSERT ${current.rows.events.length} events; UPDATE session; COMMIT ` +
        `through pg and returns the same PromptResponse`;
      rows.push(
        row(`Prompt noReply round trip, ${label}, p50`, percentile(samples.a, 50), percentile(samples.b, 50), "ms", atMost(1.2), note),
      );
      rows.push(row(`Prompt noReply round trip, ${label}, p99`, percentile(samples.a, 99), percentile(samples.b, 99), "ms"));

      log(`prompt latency over gRPC: ${count} part(s), ${iterations} round trips each`);
      const grpcSamples = await paired(
        iterations,
        scaled(30, 5),
        () => grpcPrompt(oursGrpc, request(oursSession)),
        () => grpcPrompt(echoGrpc, request(bareSession)),
      );
      rows.push(
        row(
          `Prompt noReply round trip over gRPC, ${label}, p50`,
          percentile(grpcSamples.a, 50),
          percentile(grpcSamples.b, 50),
          "ms",
          atMost(1.2),
          "gRPC over h2c from a @grpc/grpc-js client (one HTTP/2 connection per server); baseline: the same handler and transaction as the Connect baseline on a bare connect-node `http2.createServer` (no interceptors, native socket)",
        ),
      );
      rows.push(
        row(
          `gRPC − Connect p50, ours vs bare, ${label}`,
          percentile(grpcSamples.a, 50) - percentile(samples.a, 50),
          percentile(grpcSamples.b, 50) - percentile(samples.b, 50),
          "ms",
          undefined,
          "how much slower the gRPC path is than the Connect path (p50 difference), on our server and on the bare servers",
        ),
      );

      if (pgbench && write.length === 1) {
        // The floor: the ledger's one write statement, as pgbench sends it, one client, no server.
        const statement = write[0]!;
        const check = /\$(\d+)::text is null or version = \$(\d+)::text/.exec(statement.text);
        await pool.query(
          "insert into session (id, directory, parent_id, data) select 'ses_pgb_0', directory, parent_id, data from session where id = $1 on conflict do nothing",
          [oursSession],
        );
        const script = await writeScript(work.dir, `floor-${count}.sql`, [
          pgbenchCommand(statement, { session: oursSession }, check ? [Number(check[1]), Number(check[2])] : []),
        ]);
        const floor = await pgbenchLatencies(pgbench, {
          url: database.url,
          database: database.name,
          script,
          transactions: iterations,
          dir: work.dir,
        });
        rows.push(
          row(
            `Prompt noReply p50 vs the floor, ${label}`,
            percentile(samples.a, 50),
            percentile(floor, 50),
            "ms",
            atMost(6),
            "floor: pgbench -M prepared -c 1 running the ledger's own write statement for this prompt (one statement: lock, message, parts, events, session counters; captured with its parameters, fresh ids per transaction), per-transaction latency p50",
          ),
        );
      }
    }
  } finally {
    oursGrpc.close();
    echoGrpc.close();
    await bare.close();
    await bareGrpc.close();
    await ledger.close(1000);
    await pool.end();
    await database.drop();
    await work.remove();
  }
  return rows;
}
