/**
 * Sustained noReply prompts/s with 8 and 32 concurrent clients against a real `ledger serve`
 * child on Postgres, vs `pgbench` running the same SQL the ledger sends per prompt (captured
 * below from the ledger's `pg` client with its parameters and checked against the script's
 * statement list), with the same concurrency (each client on its own session) over the same TCP
 * loopback.
 */
import { toBinary } from "@bufbuild/protobuf";
import pg from "pg";
import { PromptResponseSchema } from "../gen/ledger/v1/service_pb.js";
import { openDatabase } from "../src/storage/db.js";
import { startReplica } from "../test/support/replica.js";
import {
  SCALE,
  atLeast,
  connectClient,
  createBenchDatabase,
  log,
  noReplyPrompt,
  row,
  sleep,
  startBenchChild,
  sustain,
  tempDir,
  type Row,
} from "./common.js";
import { startBenchLedger } from "./ledger.js";
import { captureStatements, findPgbench, pgbenchCommand, pgbenchTps, writeScript, type SentStatement } from "./pgbench.js";

/** Concurrent clients of each measurement. */
const CLIENT_COUNTS = [8, 32];

/** What kind of statement `sql` is, for comparing the ledger's statements with the script's. */
function kindOf(sql: string): string {
  if (/^\s*(\/\* ledger-prepared \*\/\s*)?with s as \(/.test(sql)) return "write session";
  if (sql.startsWith("select pg_notify")) return "notify";
  return sql.slice(0, 60);
}

/**
 * The kinds of statement one noReply prompt sends, in order; the script sends these: the one
 * write statement (autocommit), then the commit hint (autocommit, after the commit).
 */
const PROMPT_STATEMENTS = ["write session", "notify"];

/**
 * The pgbench script: per transaction, the statements the ledger sent for one noReply prompt,
 * with their parameters as literals and fresh ids per client and transaction. The write's row
 * version check is sent as NULL (no check): each pgbench client owns its session.
 */
function pgbenchScript(sent: SentStatement[], sessionId: string): string[] {
  return sent.map((statement) => {
    const check = /\$(\d+)::text is null or version = \$(\d+)::text/.exec(statement.text);
    return pgbenchCommand(statement, { session: sessionId }, check ? [Number(check[1]), Number(check[2])] : []);
  });
}

export async function throughput(): Promise<Row[]> {
  const pgbench = await findPgbench();
  const database = await createBenchDatabase("tput");
  const work = await tempDir("tput");
  const opened = await openDatabase({ kind: "postgres", url: database.url, poolSize: 2 });
  const warmSeconds = Math.max(1, 2 * Math.min(1, SCALE));
  const measureSeconds = Math.max(2, 10 * SCALE);
  const rows: Row[] = [];
  try {
    // The statements a noReply prompt sends, captured from an in-process ledger's pg clients
    // (the commit hint goes out just after the response: wait for it).
    const probe = await startBenchLedger({ kind: "postgres", url: database.url }, work.dir);
    const probeClient = connectClient(probe.url);
    const probeSession = (await probeClient.createSession({ directory: work.dir })).session!.id;
    const request = (sessionId: string) => noReplyPrompt(sessionId);
    const answered = await probeClient.prompt(request(probeSession));
    await sleep(100);
    const sent = await captureStatements(async () => {
      await probeClient.prompt(request(probeSession));
    }, 100);
    await probe.close(500);
    if (JSON.stringify(sent.map((s) => kindOf(s.text))) !== JSON.stringify(PROMPT_STATEMENTS)) {
      throw new Error(`a noReply prompt no longer sends what the pgbench script does:\n${sent.map((s) => s.text).join("\n")}`);
    }
    // Baseline sessions: copies of the probe session, one per pgbench client.
    for (let i = 0; i < Math.max(...CLIENT_COUNTS); i++) {
      await opened.db
        .insertInto("session")
        .columns(["id", "directory", "parent_id", "data"])
        .expression((eb) =>
          eb
            .selectFrom("session")
            .select([eb.val(`ses_pgb_${i}`).as("id"), "directory", "parent_id", "data"])
            .where("id", "=", probeSession),
        )
        .execute();
    }
    const script = await writeScript(work.dir, "prompt.sql", pgbenchScript(sent, probeSession));

    for (const clients of CLIENT_COUNTS) {
      // Ours: a real `ledger serve` child; the clients in this process, each prompting its own session.
      const replica = await startReplica({ name: "throughput", cwd: work.dir, databaseUrl: database.url });
      let ours: number;
      let warmed = 0;
      let measured = 0;
      try {
        const client = connectClient(replica.url);
        const sessions = await Promise.all(
          Array.from({ length: clients }, async () => (await client.createSession({ directory: work.dir })).session!.id),
        );
        log(`throughput: ledger serve, ${clients} clients, ${warmSeconds} s warm-up + ${measureSeconds} s`);
        ({
          rate: ours,
          warmed,
          measured,
        } = await sustain(
          sessions.map((sessionId) => () => client.prompt(request(sessionId))),
          warmSeconds,
          measureSeconds,
        ));
      } finally {
        await replica.stop();
      }
      // The ceiling: a bare connect-node server child answering the same response without a database.
      const bare = await startBenchChild("bare-serve-child.ts", {
        BARE_PROMPT_RESPONSE: Buffer.from(toBinary(PromptResponseSchema, answered)).toString("base64"),
      });
      let ceiling: number;
      try {
        log(`throughput: bare Connect server child, ${clients} clients, ${warmSeconds} s warm-up + ${measureSeconds} s`);
        const bareClient = connectClient(bare.url);
        ({ rate: ceiling } = await sustain(
          Array.from({ length: clients }, () => () => bareClient.prompt(request(probeSession))),
          warmSeconds,
          measureSeconds,
        ));
      } finally {
        await bare.stop();
      }
      rows.push(
        row(
          `noReply prompts/s, ${clients} concurrent clients, vs a bare Connect server without a database`,
          ours,
          ceiling,
          "prompts/s",
          undefined,
          `baseline: a bare connect-node server child (plain http, no interceptors, no validation, no database) answering every Prompt with the response bytes of a real noReply prompt, the same ${clients} clients and transport: what one Node process serving Connect reaches on this machine`,
        ),
      );
      const name = `noReply prompts/s, ${clients} concurrent clients`;
      if (!pgbench) {
        log("throughput: pgbench not found (install postgresql-client or postgresql-contrib, or set PGBENCH); row skipped");
        rows.push(row(name, ours, Number.NaN, "prompts/s", atLeast(0.6), "pgbench not found: baseline skipped"));
        continue;
      }
      // The ledger's relay listens on ledger_events; so does this connection while pgbench runs.
      const listener = new pg.Client({ connectionString: database.url });
      await listener.connect();
      await listener.query("listen ledger_events");
      let notified = 0;
      listener.on("notification", () => void notified++);
      let baseline: number;
      try {
        log(`throughput: pgbench, ${clients} clients, ${warmed} + ${measured} transactions (what the ledger served)`);
        const options = { url: database.url, database: database.name, script, clients };
        await pgbenchTps(pgbench, { ...options, transactions: warmed });
        baseline = await pgbenchTps(pgbench, { ...options, transactions: measured });
      } finally {
        await listener.end();
      }
      if (notified === 0) throw new Error("pgbench's pg_notify never reached the listener");
      rows.push(
        row(
          name,
          ours,
          baseline,
          "prompts/s",
          atLeast(0.6),
          `ours: \`ledger serve\` child (pool 10), ${clients} Connect clients in the bench process, 1 text part of 200 B, each client on its own session; ` +
            `baseline: pgbench -M prepared -c ${clients} -j 2 running the ${PROMPT_STATEMENTS.length} statements the ledger sends per prompt ` +
            `(captured from its pg client with their parameters: the one write statement, then the commit hint, each autocommit), one session per client, as many transactions as the ledger served`,
        ),
      );
    }
    return rows;
  } finally {
    await opened.close();
    await database.drop();
    await work.remove();
  }
}
