import { defineConfig } from "vitest/config";

// `npm test` runs the whole suite on Postgres and the database-backed tests again on PGlite.
// Each test file creates its own database (see test/support/db.ts). Tests that spawn
// bin/ledger.js run dist/: globalSetup builds it first when it is missing or stale.
export default defineConfig({
  test: {
    globalSetup: ["test/support/build-dist.ts"],
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
        },
      },
    ],
  },
});
