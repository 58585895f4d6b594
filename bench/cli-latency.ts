/**
 * How long one CLI command takes on the embedded database (a process per command, as a user
 * runs it): `ledger sessions --db DIR` on a directory holding 20 sessions, from spawn to exit.
 * The baseline is the least a process can do for the same answer: a `node` child that imports
 * PGlite, opens the same directory, runs the same `select` and prints the rows (`BARE` below),
 * with `--liftoff-only` as the CLI runs (no optimizing recompilation of PGlite's WebAssembly in
 * the background: faster for a short process, see src/cli/main.ts).
 * Both run alternately, 3 unmeasured rounds, then `5 × BENCH_SCALE` measured ones; medians.
 *
 * What the rest is (`--cpu-prof` and a statement log of one `ledger sessions`, 2026-12-03): the
 * server stack's modules (about 0.5 s), PGlite's first query (its array types, 140 ms), the
 * migration check, the start-up work of any server (interrupted answers, retention, the
 * `data_bytes` fill), the HTTP round trip to the in-process server and protovalidate compiling
 * the request's rules (about 100 ms). Before 2026-12-03 Kysely's Migrator introspected the
 * schema on every start (230 ms) and the CLI's server waited 200 ms for requests no other
 * process could send before closing: 2.0-2.2 s per command then, 1.6-1.8 s after; V8 recompiling
 * PGlite's WebAssembly with its optimizing compiler in the background took 0.5 s more (perf: the
 * compile jobs on 2 vCPUs, and Node waiting for them in `NodePlatform::DrainTasks`), until the
 * CLI ran it on the baseline compiler only (same day).
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { SessionService } from "../gen/ledger/v1/service_pb.js";
import { startLocal } from "../src/cli/local.js";
import { buildConfig, configFileSchema } from "../src/config/config.js";
import { elapsedMs, log, median, now, row, scaled, tempDir, type Row } from "./common.js";

const ROOT = path.resolve(import.meta.dirname, "..");

/** The baseline child: PGlite on `DIR` (argv[1]), the `sessions` listing's query, its rows printed. */
const BARE = `
const { PGlite } = await import("@electric-sql/pglite");
const pglite = new PGlite({ dataDir: process.argv[1] });
const { rows } = await pglite.query('select * from "session" order by "time_updated" desc, "id" desc limit 50');
for (const r of rows) process.stdout.write(r.id + " " + r.directory + "\\n");
await pglite.close();
`;

/** Runs `args` with node in `cwd` to its end; resolves with the wall time (ms), rejects on a non-zero exit. */
function timed(args: string[], cwd: string): Promise<number> {
  const started = now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd, stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.once("error", reject);
    child.once("exit", (code) =>
      code === 0 ? resolve(elapsedMs(started)) : reject(new Error(`${args.join(" ")}: exit ${code}: ${stderr}`)),
    );
  });
}

/** `ledger sessions` against a bare PGlite listing of the same directory (ms per command). */
export async function cliLatency(): Promise<Row[]> {
  const temp = await tempDir("cli");
  try {
    const db = path.join(temp.dir, "db");
    // 20 sessions, stored the way the CLI stores them (its own in-process server).
    const ledger = await startLocal({ config: buildConfig(configFileSchema.parse({}), undefined, temp.dir), db, cwd: temp.dir });
    try {
      const client = createClient(SessionService, createConnectTransport({ baseUrl: ledger.url, httpVersion: "1.1" }));
      for (let i = 0; i < 20; i++) await client.createSession({ directory: temp.dir });
    } finally {
      await ledger.close(undefined, { quietMs: 0 });
    }
    const ours = () => timed([path.join(ROOT, "bin/ledger.js"), "sessions", "--db", db], temp.dir);
    // Resolved from the repository, where @electric-sql/pglite is installed.
    // With the CLI's V8 setting (src/cli/main.ts), which makes this child faster too (2026-12-03,
    // six rounds alternately: 1.03-1.09 s against 1.32-1.46 s with V8's defaults): the baseline
    // stays the least a process can do.
    const bare = () => timed(["--liftoff-only", "--input-type=module", "-e", BARE, db], ROOT);
    const oursMs: number[] = [];
    const bareMs: number[] = [];
    const rounds = scaled(5, 3);
    for (let i = 0; i < 3 + rounds; i++) {
      // Alternately first, so that drift and the page cache hit both alike.
      let a: number, b: number;
      if (i % 2 === 0) {
        a = await ours();
        b = await bare();
      } else {
        b = await bare();
        a = await ours();
      }
      if (i < 3) continue;
      oursMs.push(a);
      bareMs.push(b);
    }
    log(
      `cli-latency: ledger sessions ${oursMs.map((ms) => ms.toFixed(0)).join(", ")} ms; bare PGlite ${bareMs.map((ms) => ms.toFixed(0)).join(", ")} ms`,
    );
    return [
      row(
        "CLI command on the embedded database: `ledger sessions` (20 sessions), spawn to exit, vs a node child opening the same PGlite directory for the same query",
        median(oursMs),
        median(bareMs),
        "ms",
        { op: "<=", value: 2 },
        "the rest: the server stack's modules, the start-up checks of a server, an HTTP round trip and protovalidate's first compile (see bench/cli-latency.ts)",
      ),
    ];
  } finally {
    await temp.remove();
  }
}
