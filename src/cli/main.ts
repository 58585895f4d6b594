import { processIo } from "./io.js";
import { main } from "./program.js";

// The `ledger` process (bin/ledger.js). The command line itself is `main` in ./program.ts, which
// tests also run in-process.

// `ledger sessions | head` closes stdout early: stop quietly.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(0);
  throw error;
});

void main(process.argv.slice(2), processIo()).then((code) => {
  process.exitCode = code;
});
