/**
 * pgbench for the baselines: finding it, capturing the statements the ledger's `pg` clients send
 * (text and parameters), turning a captured statement into a pgbench command with fresh ids per
 * transaction, and running scripts (throughput in tps, or per-transaction latencies).
 */
import { execFile } from "node:child_process";
import { readdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import pg from "pg";

const run = promisify(execFile);

/** Where pgbench is: `PGBENCH`, else on PATH, else Debian's versioned directory. */
export async function findPgbench(): Promise<string | undefined> {
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
export function pgbenchJson(text: string): string {
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

export { captureStatements, type SentStatement } from "../test/support/pg-capture.js";
import type { SentStatement } from "../test/support/pg-capture.js";

/** The pgbench expressions a captured statement's ids become, per transaction. */
export const PGBENCH_IDS = {
  session: `('ses_pgb_' || :client_id::text)`,
  message: `('msg_pgb_' || :client_id::text || '_' || :r::text)`,
  part: (i: number) => `('prt_pgb_' || :client_id::text || '_' || :r::text || '_${i}')`,
  /** Put first in the script: the random number the ids above use. */
  setup: "\\set r random(1, 1000000000000000)",
};

/**
 * A captured statement as one pgbench command: each `$n` becomes a literal (a Date `now()`,
 * null `NULL`, a number as is, a string quoted), the statement's session, message and part ids
 * (in strings and JSON parameters alike) become the per-client, per-transaction ids of
 * `PGBENCH_IDS`, and `nullParams` (1-based) are sent as NULL.
 */
export function pgbenchCommand(statement: SentStatement, ids: { session: string }, nullParams: number[] = []): string {
  const parts = new Map<string, number>();
  const mark = (text: string) =>
    text
      .replaceAll(ids.session, "@S@")
      .replace(/msg_[0-9A-HJKMNP-TV-Z]{26}/g, "@M@")
      .replace(/prt_[0-9A-HJKMNP-TV-Z]{26}/g, (id) => {
        if (!parts.has(id)) parts.set(id, parts.size);
        return `@P${parts.get(id)}@`;
      });
  const unmark = (literal: string) =>
    literal
      .replaceAll("@S@", `' || ${PGBENCH_IDS.session} || '`)
      .replaceAll("@M@", `' || ${PGBENCH_IDS.message} || '`)
      .replace(/@P(\d+)@/g, (_, i: string) => `' || ${PGBENCH_IDS.part(Number(i))} || '`);
  const literal = (value: unknown, index: number): string => {
    if (nullParams.includes(index) || value === null || value === undefined) return "NULL";
    if (value instanceof Date) return "now()";
    if (typeof value === "number" || typeof value === "bigint") return String(value);
    const text = String(value);
    if (text === ids.session) return PGBENCH_IDS.session;
    const marked = mark(text);
    let quoted: string;
    try {
      quoted = /^[[{]/.test(marked) ? pgbenchJson(marked) : `'${marked.replaceAll("'", "''").replaceAll(":", "' || chr(58) || '")}'`;
    } catch {
      quoted = `'${marked.replaceAll("'", "''").replaceAll(":", "' || chr(58) || '")}'`;
    }
    return `(${unmark(quoted)})`;
  };
  let sql = statement.text;
  for (let i = statement.values.length; i >= 1; i--) sql = sql.replaceAll(`$${i}`, literal(statement.values[i - 1], i));
  return `${sql.replace(/\s+/g, " ").trim()};`;
}

/** Connection arguments of pgbench for `url`, and its environment. */
function connection(url: string, database: string): { args: string[]; env: NodeJS.ProcessEnv } {
  const u = new URL(url);
  return {
    args: ["-h", u.hostname, "-p", u.port || "5432", "-U", decodeURIComponent(u.username) || "postgres", database],
    env: { ...process.env, PGPASSWORD: decodeURIComponent(u.password) },
  };
}

/**
 * Runs `script` with `clients` clients, `transactions` in all, as prepared statements (`-M prepared`:
 * the ledger keeps its write statement prepared too); returns pgbench's tps (without connection time).
 */
export async function pgbenchTps(
  pgbench: string,
  options: { url: string; database: string; script: string; clients: number; transactions: number },
): Promise<number> {
  const { args, env } = connection(options.url, options.database);
  const { stdout } = await run(
    pgbench,
    [
      "-n",
      "-M",
      "prepared",
      "-c",
      String(options.clients),
      "-j",
      "2",
      "-t",
      String(Math.max(1, Math.ceil(options.transactions / options.clients))),
      "-f",
      options.script,
      ...args,
    ],
    { env, maxBuffer: 16 << 20 },
  );
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(stdout);
  const failed = /number of failed transactions: (\d+)/.exec(stdout);
  if (!tps) throw new Error(`cannot read pgbench's tps:\n${stdout}`);
  if (failed && failed[1] !== "0") throw new Error(`pgbench transactions failed:\n${stdout}`);
  return Number(tps[1]);
}

/** Runs `script` with one client for `transactions` transactions (`-M prepared`); returns each one's latency (ms). */
export async function pgbenchLatencies(
  pgbench: string,
  options: { url: string; database: string; script: string; transactions: number; dir: string },
): Promise<number[]> {
  const { args, env } = connection(options.url, options.database);
  const prefix = path.join(options.dir, `pgbench-log-${process.pid}-${Date.now()}`);
  await run(
    pgbench,
    ["-n", "-M", "prepared", "-c", "1", "-t", String(options.transactions), "-f", options.script, "-l", `--log-prefix=${prefix}`, ...args],
    { env, maxBuffer: 16 << 20 },
  );
  const logs = (await readdir(options.dir)).filter((name) => path.join(options.dir, name).startsWith(prefix));
  const samples: number[] = [];
  for (const name of logs) {
    const file = path.join(options.dir, name);
    // client_id transaction_no time_us script_no time_epoch time_us_fraction
    for (const line of (await readFile(file, "utf8")).split("\n")) {
      const fields = line.trim().split(/\s+/);
      if (fields.length >= 3) samples.push(Number(fields[2]) / 1000);
    }
    await rm(file, { force: true });
  }
  return samples;
}

/** Writes a pgbench script file of `commands` (one per line) and returns its path. */
export async function writeScript(dir: string, name: string, commands: string[]): Promise<string> {
  const file = path.join(dir, name);
  await writeFile(file, `${[PGBENCH_IDS.setup, ...commands].join("\n")}\n`);
  return file;
}
