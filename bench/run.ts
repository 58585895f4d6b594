/**
 * `npm run bench`: runs every benchmark module in turn, prints a markdown table (ours vs a
 * baseline measured in the same run, as a ratio against a goal) and writes bench/results.json.
 *
 * Options: `BENCH_SCALE=0.2` (or 2, ...) scales iterations and durations; `BENCH_ONLY=a,b`
 * runs only the named modules (see MODULES); `BENCH_DATABASE_URL` picks the Postgres server
 * (each module creates and drops a database of its own there).
 */
import "./env.js";
import { writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { ADMIN_URL, SCALE, elapsedMs, log, now, type Row } from "./common.js";
import { cliLatency } from "./cli-latency.js";
import { dataUrl } from "./data-url.js";
import { historyRead } from "./history-read.js";
import { kyselyVsPg } from "./kysely-vs-pg.js";
import { pgliteVsPg } from "./pglite-vs-pg.js";
import { promptLatency } from "./prompt-latency.js";
import { relay } from "./relay.js";
import { replicaVisibility } from "./replica-visibility.js";
import { startMemory } from "./start-memory.js";
import { streamFanout } from "./stream-fanout.js";
import { throughput } from "./throughput.js";

const MODULES: Array<[string, () => Promise<Row[]>]> = [
  ["prompt-latency", promptLatency],
  ["kysely-vs-pg", kyselyVsPg],
  ["throughput", throughput],
  ["stream-fanout", streamFanout],
  ["replica-visibility", replicaVisibility],
  ["relay", relay],
  ["history-read", historyRead],
  ["data-url", dataUrl],
  ["pglite-vs-pg", pgliteVsPg],
  ["start-memory", startMemory],
  ["cli-latency", cliLatency],
];

interface Machine {
  cpus: number;
  model: string;
  memoryGiB: number;
  os: string;
  node: string;
  postgres: string;
  postgresSettings: Record<string, string>;
  /** 1/5/15-minute load averages when the run started (other work on the machine skews results). */
  loadAverageAtStart: number[];
}

async function machine(): Promise<Machine> {
  const client = new pg.Client({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    const version = (await client.query<{ server_version: string }>("show server_version")).rows[0]!.server_version;
    const settings = await client.query<{ name: string; setting: string; unit: string | null }>(
      "select name, setting, unit from pg_settings where name in ('fsync', 'synchronous_commit', 'shared_buffers', 'max_connections') order by name",
    );
    return {
      cpus: os.cpus().length,
      model: os.cpus()[0]?.model.trim() ?? "unknown",
      memoryGiB: Math.round(os.totalmem() / 2 ** 30),
      os: `${os.type()} ${os.release()} ${os.arch()}`,
      node: process.version,
      postgres: `PostgreSQL ${version}`,
      loadAverageAtStart: os.loadavg().map((l) => Number(l.toFixed(2))),
      postgresSettings: Object.fromEntries(
        settings.rows.map((r) => [r.name, r.unit && r.unit !== "" ? `${r.setting} × ${r.unit}` : r.setting]),
      ),
    };
  } finally {
    await client.end();
  }
}

function format(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  return Math.abs(value) >= 100 ? value.toFixed(0) : Math.abs(value) >= 10 ? value.toFixed(1) : value.toFixed(2);
}

/** The results as a markdown table, with the notes as numbered footnotes. */
export function markdown(rows: Row[]): string {
  const notes: string[] = [];
  const lines = ["| benchmark | ours | baseline | unit | ratio | goal | pass |", "|---|---:|---:|---|---:|---|---|"];
  for (const r of rows) {
    let name = r.name;
    if (r.note) {
      let index = notes.indexOf(r.note);
      if (index < 0) index = notes.push(r.note) - 1;
      name += ` [${index + 1}]`;
    }
    const pass = r.pass === null ? "—" : r.pass ? "yes" : "**NO**";
    lines.push(`| ${name} | ${format(r.ours)} | ${format(r.baseline)} | ${r.unit} | ${format(r.ratio)}× | ${r.goal ?? "—"} | ${pass} |`);
  }
  if (notes.length > 0) lines.push("", ...notes.map((note, i) => `- [${i + 1}] ${note}`));
  return lines.join("\n");
}

async function main(): Promise<void> {
  const only = process.env.BENCH_ONLY?.split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  const unknown = only?.filter((name) => !MODULES.some(([m]) => m === name)) ?? [];
  if (unknown.length > 0)
    throw new Error(`BENCH_ONLY: unknown module(s) ${unknown.join(", ")}; known: ${MODULES.map(([m]) => m).join(", ")}`);
  const info = await machine();
  log(
    `${info.cpus}× ${info.model}, node ${info.node}, ${info.postgres}, BENCH_SCALE=${SCALE}, load average ${info.loadAverageAtStart.join(" ")}`,
  );
  if (info.loadAverageAtStart[0]! > info.cpus / 2)
    log(`warning: the machine is busy (1-minute load ${info.loadAverageAtStart[0]}); results will be noisy`);
  const started = now();
  const rows: Row[] = [];
  const failures: string[] = [];
  for (const [name, run] of MODULES) {
    if (only && !only.includes(name)) continue;
    const start = now();
    log(`${name}: start`);
    try {
      rows.push(...(await run()));
      log(`${name}: done in ${(elapsedMs(start) / 1000).toFixed(1)} s`);
    } catch (error) {
      failures.push(`${name}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      log(`${name}: FAILED: ${String(error)}`);
    }
  }
  const totalSeconds = elapsedMs(started) / 1000;
  const loadAverageAtEnd = os.loadavg().map((l) => Number(l.toFixed(2)));
  const results = {
    machine: { ...info, loadAverageAtEnd },
    date: new Date().toISOString(),
    scale: SCALE,
    durationSeconds: Number(totalSeconds.toFixed(1)),
    rows,
    errors: failures,
  };
  await writeFile(path.join(import.meta.dirname, "results.json"), `${JSON.stringify(results, null, 2)}\n`);
  const table = markdown(rows);
  process.stdout.write(
    `\nMachine: ${info.cpus}× ${info.model}, ${info.memoryGiB} GiB, ${info.os}; Node ${info.node}; ${info.postgres} ` +
      `(${Object.entries(info.postgresSettings)
        .map(([k, v]) => `${k}=${v}`)
        .join(", ")}); BENCH_SCALE=${SCALE}; ${totalSeconds.toFixed(0)} s; ` +
      `load average ${info.loadAverageAtStart.join("/")} at start, ${loadAverageAtEnd.join("/")} at end; ${results.date}\n\n${table}\n`,
  );
  const failed = rows.filter((r) => r.pass === false);
  if (failed.length > 0) process.stdout.write(`\n${failed.length} row(s) miss their goal: ${failed.map((r) => r.name).join("; ")}\n`);
  if (failures.length > 0) {
    process.stdout.write(`\n${failures.length} benchmark(s) failed to run:\n${failures.join("\n")}\n`);
    process.exitCode = 1;
  }
}

await main();
