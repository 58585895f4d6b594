#!/usr/bin/env node
// The `ledger` command: runs the compiled dist/ (`npm ci` builds it through `prepare`, or
// `npm run build`). It never loads tsx; `npm run dev -- <command>` runs the sources instead.
import { existsSync } from "node:fs";
import module from "node:module";
import v8 from "node:v8";

// V8's young generation stays at its initial size (two 1 MB semi-spaces) unless the operator sized
// it (--max-semi-space-size on node's command line or in NODE_OPTIONS; --min-semi-space-size or
// --semi-space-growth-factor on the command line, as NODE_OPTIONS allows neither). Set before the
// rest loads: a replay of large stored events keeps each event's text (about 1 MB) alive while it
// is written, so V8 would see most young objects survive and double the young generation up to
// 16 MB semi-spaces, and a larger young generation also lets more garbage ArrayBuffers wait for a
// collection. docs/streams-and-replicas.md, "Replay with bounded memory", has the measurements.
// --semi-space-growth-factor is read each time the young generation would grow, so setting it here
// takes effect (--max-semi-space-size is read once, at start).
const youngGenerationFlags = /--(max|min)[-_]semi[-_]space[-_]size|--semi[-_]space[-_]growth[-_]factor/;
if (![...process.execArgv, process.env.NODE_OPTIONS ?? ""].some((arg) => youngGenerationFlags.test(arg))) {
  v8.setFlagsFromString("--semi-space-growth-factor=1");
}

const main = new URL("../dist/cli/main.js", import.meta.url);
if (!existsSync(main)) {
  process.stderr.write("ledger: dist/ is missing: run `npm run build` (npm ci builds it), or `npm run dev -- <command>` for the sources\n");
  process.exit(1);
}
// Node 22.1+: keep V8's compiled code of dist/ and node_modules on disk for the next start.
module.enableCompileCache?.();
await import(main.href);
