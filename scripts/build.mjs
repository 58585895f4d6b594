// `npm run build` (and `prepare`, so `npm ci` runs it): bundles src/cli/main.ts with esbuild into
// dist/cli/main.js plus chunks (each dynamic `import()` of src/ becomes a chunk loaded on first
// use). Packages that are imported lazily or that find files next to their own code stay outside
// the bundle and load from node_modules. Type checking is `npm run lint` (tsc --noEmit).
import { rm } from "node:fs/promises";
import path from "node:path";
import { build } from "esbuild";

const root = path.resolve(import.meta.dirname, "..");
const EXTERNAL = [
  "@electric-sql/pglite", // its .wasm and .data files sit next to its code
  "sharp", // native
  "typescript", // large, symbol ranges only
  "web-tree-sitter", // its .wasm sits next to its code
  "ai", // the agent loop's; one copy shared with the providers
  "@ai-sdk/*",
  "@modelcontextprotocol/sdk",
  "zod", // shared with ai and the MCP SDK (one copy of its classes)
  "pg", // CommonJS, two files
  "pg-native", // pg's optional native driver, never installed
  // Tracing's SDK, exporter and pg instrumentation (CommonJS; loaded only with telemetry configured;
  // the instrumentation patches pg from node_modules). @opentelemetry/api stays bundled: its copies share one global.
  "@opentelemetry/sdk-node",
  "@opentelemetry/sdk-trace",
  "@opentelemetry/exporter-trace-otlp-http",
  "@opentelemetry/instrumentation-pg",
];

await rm(path.join(root, "dist"), { recursive: true, force: true });
await build({
  absWorkingDir: root,
  entryPoints: ["src/cli/main.ts"],
  outdir: "dist/cli",
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  // ESM builds of packages first (jsonc-parser's "main" is a UMD build esbuild cannot follow).
  mainFields: ["module", "main"],
  chunkNames: "chunks/[name]-[hash]",
  external: EXTERNAL,
  sourcemap: true,
  // CommonJS packages inside the bundle call require().
  banner: { js: 'import { createRequire as __ledgerRequire } from "node:module";\nconst require = __ledgerRequire(import.meta.url);' },
  logLevel: "warning",
});
