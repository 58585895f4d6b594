import { configDefaults, defineConfig } from "vitest/config";

// `npm test` runs the whole suite on Postgres and the database-backed tests again on PGlite.
// Each test file creates its own database (see test/support/db.ts). Tests that spawn
// bin/ledger.js run dist/: globalSetup builds it first when it is missing or stale.
// isolate: false — the files of one worker share its module cache, so the server stack (AI SDK,
// sharp, tree-sitter, pg, PGlite) is imported once per worker instead of once per file (about
// half the wall time of the light files; see docs/development.md "Test tiers"). Files still get
// their own database, server and temp dirs; a file that changes process-wide state (the log
// level, an env variable, a stderr spy) restores it in afterAll/afterEach.
// maxWorkers: 2 — two files at a time even on 2 CPUs (vitest's default there is 1): most of a
// file's time is spent waiting on Postgres, child processes and sockets. Quiet 2-vCPU machine,
// 2026-12-01: 1 worker 345 s, 2 workers 255 s, same 1,329 tests passing (docs/development.md).
export default defineConfig({
  test: {
    globalSetup: ["test/support/build-dist.ts"],
    isolate: false,
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      {
        extends: true,
        test: { name: "postgres", env: { LEDGER_TEST_DB: "postgres", LEDGER_LOG_LEVEL: "warn" }, include: ["test/**/*.test.ts"] },
      },
      {
        extends: true,
        test: {
          name: "pglite",
          env: { LEDGER_TEST_DB: "pglite", LEDGER_LOG_LEVEL: "warn" },
          include: ["test/{storage,events,ledger,server,cli,agent,security,observe}/**/*.test.ts"],
          // Transport, process and config behaviour that no storage choice changes: Postgres
          // covers them (the browser page's files, config parsing, the system prompt's instructions;
          // 58 s of PGlite test time on 2026-12-02). The MCP files too: MCP servers' tools and
          // resources reach storage as the parts any draft or tool call makes, which the other
          // files store on PGlite (71 s of PGlite test time in .ci/run, 2026-12-02).
          exclude: [
            ...configDefaults.exclude,
            "test/server/drain.test.ts",
            "test/server/jwt.test.ts",
            "test/server/access.test.ts",
            "test/observe/tracing.test.ts",
            "test/server/web-page.test.ts",
            "test/cli/cli-web.test.ts",
            "test/cli/serve-opencode.test.ts",
            "test/cli/cli-url.test.ts",
            "test/server/mcp-discovery.test.ts",
            "test/ledger/mcp-limits.test.ts",
            "test/agent/mcp-tools.test.ts",
            "test/agent/mcp-remote.test.ts",
            "test/cli/cli-mcp.test.ts",
            "test/cli/walkthrough-mcp.test.ts",
            "test/agent/instructions.test.ts",
          ],
        },
      },
    ],
  },
});
