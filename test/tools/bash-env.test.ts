import os from "node:os";
import { afterEach, describe, expect, it } from "vitest";
import { runCommand } from "../../src/tools/bash.js";

// A shell command runs with the server's environment minus its settings and secrets: a
// tenant's command must not read the JWT secret and mint itself an admin token.

const SECRETS = {
  LEDGER_JWT_SECRET: "the-hs256-secret-0123456789abcdef!!",
  LEDGER_TOKEN: "static-token-for-the-operator-0123",
  LEDGER_NATS_URL: "nats://user:pass@10.0.0.5:4222",
  DATABASE_URL: "postgres://postgres:db-password-5f1c9e@db/ledger",
  // Long and unusual: the test looks for each value in the whole environment, and a short one
  // ("pw") turned up inside the machine's own variables (a container name).
  PGPASSWORD: "pg-password-8d2b7a",
  OTEL_EXPORTER_OTLP_HEADERS: "authorization=Bearer collector-key",
};
const saved = new Map<string, string | undefined>();

afterEach(() => {
  for (const [name, value] of saved) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
  saved.clear();
});

describe("bash's environment", () => {
  it("hides every LEDGER_* variable, the database URLs, PG* and OTEL_*; keeps the rest", async () => {
    for (const [name, value] of Object.entries({ ...SECRETS, LEDGER_SOMETHING_NEW: "x", KEEP_ME: "visible" })) {
      saved.set(name, process.env[name]);
      process.env[name] = value;
    }
    const result = await runCommand("env", { cwd: os.tmpdir(), timeoutMs: 10_000 });
    const names = result.output.split("\n").map((line) => line.split("=", 1)[0]);
    for (const name of [...Object.keys(SECRETS), "LEDGER_SOMETHING_NEW"]) expect(names).not.toContain(name);
    expect(names).toContain("KEEP_ME");
    for (const value of Object.values(SECRETS)) expect(result.output).not.toContain(value);
  });
});
