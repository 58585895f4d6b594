// `node --import ./test/support/module-log.mjs ...` with LEDGER_MODULE_LOG=<file>: appends the URL
// of every module the process imports (ESM `import`/`import()`, including CommonJS packages
// entered through them) to <file>, one per line, from Node's module resolve hook. Used by the
// tests and benchmarks that check which packages `ledger serve` loads at start.
import { register } from "node:module";

if (process.env.LEDGER_MODULE_LOG) register("./module-log-hook.mjs", import.meta.url);
