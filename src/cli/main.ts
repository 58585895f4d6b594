import { setFlagsFromString } from "node:v8";
import { processIo } from "./io.js";
import { main } from "./program.js";

// The `ledger` process (bin/ledger.js). The command line itself is `main` in ./program.ts, which
// tests also run in-process.

// `ledger sessions | head` closes stdout early: stop quietly.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(0);
  throw error;
});

// A command other than `serve` and `web` (which run until stopped) lives for one request or a
// few, on a server of its own when there is no --url: its PGlite WebAssembly runs on V8's
// baseline compiler (Liftoff) only. By default V8 also compiles the whole module again with its
// optimizing compiler on background threads, which on 2 vCPUs took CPU from the command, and
// Node waits for those compile jobs whenever its event loop runs empty (perf: 288 ms in
// NodePlatform::DrainTasks in one `ledger sessions`). Measured (2026-12-03, 2 vCPUs, five runs
// each): `ledger sessions` 2.0-2.3 s with the tier-up, 1.3-1.6 s without. Set before anything
// compiles WebAssembly; the server of `serve` keeps the optimizing tier (its queries run for
// hours).
const command = process.argv[2];
if (command !== "serve" && command !== "web") setFlagsFromString("--liftoff-only");

void main(process.argv.slice(2), processIo()).then((code) => {
  process.exitCode = code;
});
