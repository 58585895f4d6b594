/**
 * Sustained noReply prompts/s with 8 concurrent clients against a real `ledger serve` child on
 * Postgres, vs `pgbench` running the same SQL the ledger sends per prompt (captured below from
 * the ledger's `pg` client and checked against the script's statement list), with the same
 * concurrency (8 clients, each on its own session) over the same TCP loopback.
 */
import { execFile } from "node:child_process";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { openDatabase } from "../src/storage/db.js";
import { startReplica } from "../test/support/replica.js";
import { SCALE, atLeast, connectClient, createBenchDatabase, elapsedMs, log, now, prose, row, sleep, tempDir, type Row } from "./common.js";
import { lastSeq, startBenchLedger, writtenRows, type WrittenRows } from "./ledger.js";

const CLIENTS = 8;
const run = promisify(execFile);

/** Where pgbench is: `PGBENCH`, else on PATH, else Debian's versioned directory. */
async function findPgbench(): Promise<string | undefined> {
  const candidates = [
    process.env.PGBENCH,
    "pgbench",
    "/usr/lib/postgresql/15/bin/pgbench",
    "/usr/lib/postgresql/16/bin/pgbench",
    "/usr/lib/postgresql/17/bin/pgbench",
  ];
  for (const candidate of candidates) {
    if (!candidate) continue;
    try {
      await run(candidate, ["--version"]);
      return candidate;
    } catch {
      // try the next one
    }
  }
  return undefined;
}

/**
 * JSON text that means the same value but never puts an identifier character right after a
 * colon (pgbench would read `:true` or `:30` as a variable): a space after every key's colon,
 * and colons inside strings written as `\u003a`. Single quotes are doubled for SQL.
 */
function pgbenchJson(text: string): string {
  const write = (value: unknown): string => {
    if (Array.isArray(value)) return `[${value.map(write).join(",")}]`;
    if (value && typeof value === "object") {
      return `{${Object.entries(value)
        .map(([k, v]) => `${write(k)}: ${write(v)}`)
        .join(",")}}`;
    }
    if (typeof value === "string") return JSON.stringify(value).replaceAll(":", "\\u003a");
    return JSON.stringify(value);
  };
  return `'${write(JSON.parse(text)).replaceAll("'", "''")}'`;
}

/** What kind of statement `sql` is, for comparing the ledger's statements with the script's. */
function kindOf(sql: string): string {
  if (sql === "begin" || sql === "commit") return sql;
  if (/^select .* for update$/s.test(sql)) return "lock session";
  if (sql.startsWith('select "session".*')) return "get session";
  if (sql.startsWith("select pg_notify")) return "notify";
  const write = /^(insert into|update) "(\w+)"/.exec(sql);
  return write ? `${write[1]} ${write[2]}` : sql.slice(0, 60);
}

/** The kinds of statement one noReply prompt sends, in order; the script sends these. */
const PROMPT_STATEMENTS = [
  "get session",
  "begin",
  "lock session",
  "insert into message",
  "insert into part",
  "insert into session_event",
  "notify",
  "update session",
  "commit",
];

/**
 * The pgbench script: per transaction, the statements the ledger runs for one noReply prompt.
 * The two reads are the ledger's own SQL texts (their one parameter, the session id, becomes the
 * client's session); the writes carry the row data of a real prompt.
 */
function pgbenchScript(rows: WrittenRows, sent: string[]): string {
  const session = `'ses_pgb_' || :client_id::text`;
  const read = (kind: string) => sent.find((sql) => kindOf(sql) === kind)!.replace("$1", `(${session})`);
  const messageId = `'msg_pgb_' || :client_id::text || '_' || :r::text`;
  const parts = rows.parts
    .map(
      (part, i) =>
        `(${`'prt_pgb_' || :client_id::text || '_' || :r::text || '_${i}'`}, ${session}, ${messageId}, :last_position::bigint + ${i + 2}, '${part.kind}', ${pgbenchJson(part.data)})`,
    )
    .join(", ");
  const events = rows.events
    .map((event, i) => `(${session}, :last_seq::bigint + ${i + 1}, '${event.kind}', ${pgbenchJson(event.data)}, now())`)
    .join(", ");
  const seqs = rows.events.length;
  const positions = rows.parts.length + 1;
  return [
    "\\set r random(1, 1000000000000000)",
    `${read("get session")};`,
    "begin;",
    `${read("lock session")} \\gset`,
    `insert into "message" ("id", "session_id", "position", "role", "data", "request_hash") values (${messageId}, ${session}, :last_position::bigint + 1, '${rows.message.role}', ${pgbenchJson(rows.message.data)}, '${rows.message.requestHash}');`,
    `insert into "part" ("id", "session_id", "message_id", "position", "kind", "data") values ${parts};`,
    `insert into "session_event" ("session_id", "seq", "kind", "data", "time") values ${events};`,
    `select pg_notify('ledger_events', 'pgbench|' || ${session} || '|' || (:last_seq::bigint + ${seqs})::text);`,
    `update "session" set "data" = ${pgbenchJson(rows.session)}, "last_seq" = :last_seq::bigint + ${seqs}, "last_position" = :last_position::bigint + ${positions}, "time_updated" = now() where "id" = ${session};`,
    "commit;",
    "",
  ].join("\n");
}

/** Records the SQL text of every query `pg` clients of this process send while `fn` runs. */
async function captureSql(fn: () => Promise<void>): Promise<string[]> {
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  const seen: string[] = [];
  proto.query = function (this: unknown, ...args: unknown[]) {
    const query = args[0];
    seen.push(typeof query === "string" ? query : typeof query === "object" && query && "text" in query ? String(query.text) : "?");
    return original.apply(this, args);
  };
  try {
    await fn();
  } finally {
    proto.query = original;
  }
  return seen;
}

export async function throughput(): Promise<Row[]> {
  const pgbench = await findPgbench();
  const database = await createBenchDatabase("tput");
  const work = await tempDir("tput");
  const opened = await openDatabase({ kind: "postgres", url: database.url, poolSize: 2 });
  const warmSeconds = Math.max(1, 2 * Math.min(1, SCALE));
  const measureSeconds = Math.max(2, 10 * SCALE);
  try {
    // The statements a noReply prompt sends, captured from an in-process ledger's pg clients.
    const probe = await startBenchLedger({ kind: "postgres", url: database.url }, work.dir);
    const probeClient = connectClient(probe.url);
    const probeSession = (await probeClient.createSession({ directory: work.dir })).session!.id;
    const request = (sessionId: string) => ({
      sessionId,
      noReply: true,
      parts: [{ kind: { case: "text" as const, value: { text: prose(200) } } }],
    });
    await probeClient.prompt(request(probeSession));
    const before = await lastSeq(opened.db, probeSession);
    let messageId = "";
    const sent = await captureSql(async () => {
      messageId = (await probeClient.prompt(request(probeSession))).message!.message!.kind.value!.id;
    });
    await probe.close(500);
    const rows = await writtenRows(opened.db, probeSession, messageId, before);
    if (JSON.stringify(sent.map(kindOf)) !== JSON.stringify(PROMPT_STATEMENTS)) {
      throw new Error(`a noReply prompt no longer sends what the pgbench script does:\n${sent.join("\n")}`);
    }

    // Ours: a real `ledger serve` child; 8 clients in this process, each prompting its own session.
    const replica = await startReplica({ name: "throughput", cwd: work.dir, databaseUrl: database.url });
    let ours: number;
    let warmed = 0;
    let measured = 0;
    try {
      const client = connectClient(replica.url);
      const sessions = await Promise.all(
        Array.from({ length: CLIENTS }, async () => (await client.createSession({ directory: work.dir })).session!.id),
      );
      let phase: "warm" | "measure" | "stop" = "warm";
      let completed = 0;
      const workers = sessions.map(async (sessionId) => {
        while (phase !== "stop") {
          await client.prompt(request(sessionId));
          completed++;
        }
      });
      log(`throughput: ledger serve, ${CLIENTS} clients, ${warmSeconds} s warm-up + ${measureSeconds} s`);
      await sleep(warmSeconds * 1000);
      phase = "measure";
      warmed = completed;
      const start = now();
      await sleep(measureSeconds * 1000);
      measured = completed - warmed;
      const seconds = elapsedMs(start) / 1000;
      phase = "stop";
      await Promise.all(workers);
      ours = measured / seconds;
    } finally {
      await replica.stop();
    }

    if (!pgbench) {
      log("throughput: pgbench not found (install postgresql-client or postgresql-contrib, or set PGBENCH); row skipped");
      return [
        row(`noReply prompts/s, ${CLIENTS} clients`, ours, Number.NaN, "prompts/s", atLeast(0.5), "pgbench not found: baseline skipped"),
      ];
    }
    // Baseline: pgbench, the same statements, 8 clients on 8 sessions like the ones above.
    for (let i = 0; i < CLIENTS; i++) {
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
    const script = path.join(work.dir, "prompt.sql");
    await writeFile(script, pgbenchScript(rows, sent));
    // The ledger's relay listens on ledger_events; so does this connection while pgbench runs.
    const listener = new pg.Client({ connectionString: database.url });
    await listener.connect();
    await listener.query("listen ledger_events");
    let notified = 0;
    listener.on("notification", () => void notified++);
    const url = new URL(database.url);
    // pgbench runs as many transactions per client as the ledger served per client, warm-up and
    // measurement alike, so its sessions go through the same sizes (the per-prompt count(*) of
    // the session's messages grows with them).
    const bench = (transactions: number) =>
      run(
        pgbench,
        [
          "-n",
          "-M",
          "extended",
          "-c",
          String(CLIENTS),
          "-j",
          "2",
          "-t",
          String(Math.max(1, Math.ceil(transactions / CLIENTS))),
          "-f",
          script,
          "-h",
          url.hostname,
          "-p",
          url.port || "5432",
          "-U",
          decodeURIComponent(url.username) || "postgres",
          database.name,
        ],
        {
          env: { ...process.env, PGPASSWORD: decodeURIComponent(url.password) },
        },
      );
    let baseline: number;
    try {
      log(`throughput: pgbench, ${CLIENTS} clients, ${warmed} + ${measured} transactions (what the ledger served)`);
      await bench(warmed);
      const { stdout } = await bench(measured);
      const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(stdout);
      const failed = /number of failed transactions: (\d+)/.exec(stdout);
      if (!tps) throw new Error(`cannot read pgbench's tps:\n${stdout}`);
      if (failed && failed[1] !== "0") throw new Error(`pgbench transactions failed:\n${stdout}`);
      baseline = Number(tps[1]);
    } finally {
      await listener.end();
    }
    if (notified === 0) throw new Error("pgbench's pg_notify never reached the listener");
    return [
      row(
        `noReply prompts/s, ${CLIENTS} concurrent clients`,
        ours,
        baseline,
        "prompts/s",
        atLeast(0.5),
        `ours: \`ledger serve\` child (pool 10), ${CLIENTS} Connect clients in the bench process, 1 text part of 200 B, each client on its own session; ` +
          `baseline: pgbench -M extended -c ${CLIENTS} -j 2 running the ${PROMPT_STATEMENTS.length} statements the ledger sends per prompt (captured from its pg client) with the same row data, one session per client, as many transactions as the ledger served (so sessions grow alike)`,
      ),
    ];
  } finally {
    await opened.close();
    await database.drop();
    await work.remove();
  }
}
