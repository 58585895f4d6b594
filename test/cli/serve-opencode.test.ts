import { cp, mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, startCli } from "../support/cli.js";
import { waitFor } from "../support/wait.js";

// `ledger serve` on an opencode.json, as an OpenCode user would start it (issue 20): it starts,
// says once which keys mean nothing here, refuses a key nobody knows unless --lenient-config.

const LISTENING = /^session-ledger listening on (http:\/\/127\.0\.0\.1:\d+)\n/;
const FIXTURE_DIR = path.resolve(import.meta.dirname, "../config/fixtures/opencode");

let dir: string;
beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-serve-opencode-")));
  await cp(FIXTURE_DIR, dir, { recursive: true });
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

const place = (cwd = dir) => ({ cwd, env: { PATH: process.env.PATH, ANTHROPIC_API_KEY: "sk-test" } });

/** Runs `serve` with `args` until it listens, then stops it; returns its stderr up to then. */
async function serveOnce(args: string[], cwd = dir): Promise<string> {
  const serve = startCli(["serve", "--port", "0", "--db", ":memory:", "--no-web", ...args], place(cwd));
  try {
    await serve.waitForStdout(LISTENING);
    return serve.stderr();
  } finally {
    serve.signal("SIGTERM");
    await serve.done;
    await waitFor("the server to close", () => serve.stderr().includes("database closed"));
  }
}

describe("ledger serve with an opencode.json", () => {
  it("--config opencode.json: starts and prints the ignored keys once, with their reasons", async () => {
    const stderr = await serveOnce(["--config", "opencode.json"]);
    const file = path.join(dir, "opencode.json");
    expect(stderr).toContain(
      `warning: ${file}: these OpenCode keys are ignored (docs/opencode-migration.md):\n  theme: the colour theme of OpenCode's terminal UI; this service has no terminal UI\n`,
    );
    expect(stderr).toContain("\n  agent.review.color: the agent's colour in OpenCode's terminal UI; this service has no terminal UI\n");
    expect(stderr).toContain(`warning: ${file}: permission.bash: "*" is written after "git push" and wins over it`);
    expect(stderr.split("these OpenCode keys are ignored").length).toBe(2);
  });

  it("discovered in the working directory without --config", async () => {
    const stderr = await serveOnce([]);
    expect(stderr).toContain(`warning: ${path.join(dir, "opencode.json")}: these OpenCode keys are ignored`);
  });

  it("an unknown key stops the start naming it; --lenient-config starts with a warning", async () => {
    const other = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-serve-opencode-unknown-")));
    try {
      await writeFile(path.join(other, "opencode.json"), '{ "theme": "x", "agent": { "review": { "colour": "#fff" } } }');
      const refused = await runCli(["serve", "--port", "0", "--db", ":memory:", "--no-web"], place(other));
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toContain(
        `${path.join(other, "opencode.json")}: unknown key agent.review.colour (not a ledger.json or opencode.json key; --lenient-config ignores unknown keys)`,
      );
      const stderr = await serveOnce(["--lenient-config"], other);
      expect(stderr).toContain(
        `warning: ${path.join(other, "opencode.json")}: unknown keys ignored (--lenient-config): agent.review.colour\n`,
      );
    } finally {
      await rm(other, { recursive: true, force: true });
    }
  });
});

describe("client commands running the ledger in-process on an opencode.json", () => {
  let other: string;
  beforeAll(async () => {
    other = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-client-opencode-")));
    await writeFile(
      path.join(other, "opencode.json"),
      '{ "theme": "x", "agent": { "review": { "colour": "#fff" } }, "instructions": ["https://example.com/rules.md"] }',
    );
  });
  afterAll(async () => {
    if (other) await rm(other, { recursive: true, force: true });
  });
  const file = () => path.join(other, "opencode.json");
  const expectWarnedOnce = (stderr: string) => {
    expect(stderr).toBe(
      `warning: ${file()}: these OpenCode keys are ignored (docs/opencode-migration.md):\n  theme: the colour theme of OpenCode's terminal UI; this service has no terminal UI\n` +
        `warning: ${file()}: unknown keys ignored (--lenient-config): agent.review.colour\n` +
        `warning: ${file()}: instructions: URLs are not fetched (out of scope); ignoring "https://example.com/rules.md"\n`,
    );
  };

  it("an unknown key stops them naming it, and --lenient-config (which the error suggests) is an option of theirs", async () => {
    const refused = await runCli(["sessions", "--db", ":memory:"], place(other));
    expect(refused).toMatchObject({ code: 1, stdout: "" });
    expect(refused.stderr).toBe(
      `error: ${file()}: unknown key agent.review.colour (not a ledger.json or opencode.json key; --lenient-config ignores unknown keys)\n`,
    );
    const lenient = await runCli(["sessions", "--db", ":memory:", "--lenient-config"], place(other));
    expect(lenient).toMatchObject({ code: 0, stdout: "no sessions\n" });
    expectWarnedOnce(lenient.stderr);
  });

  it("ledger prompt prints the config's warnings on stderr once (LEDGER_LENIENT_CONFIG=1 works as the option)", async () => {
    const { env } = place(other);
    const run = await runCli(["prompt", "hello", "--no-reply", "--db", ":memory:", "--json"], {
      cwd: other,
      env: { ...env, LEDGER_LENIENT_CONFIG: "1" },
    });
    expect(run.code).toBe(0);
    expectWarnedOnce(run.stderr);
    const flagged = await runCli(["prompt", "hello", "--no-reply", "--db", ":memory:", "--json", "--lenient-config"], place(other));
    expect(flagged.code).toBe(0);
    expectWarnedOnce(flagged.stderr);
  });
});
