#!/usr/bin/env node
// The `ledger` command: runs the compiled dist/ (`npm ci` builds it through `prepare`, or
// `npm run build`). It never loads tsx; `npm run dev -- <command>` runs the sources instead.
import { existsSync } from "node:fs";
import module from "node:module";

const main = new URL("../dist/cli/main.js", import.meta.url);
if (!existsSync(main)) {
  process.stderr.write("ledger: dist/ is missing: run `npm run build` (npm ci builds it), or `npm run dev -- <command>` for the sources\n");
  process.exit(1);
}
// Node 22.1+: keep V8's compiled code of dist/ and node_modules on disk for the next start.
module.enableCompileCache?.();
await import(main.href);
