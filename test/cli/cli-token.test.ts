import { mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { decodeJwt } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../support/cli.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";

// `ledger token` mints JWTs with the server's secret; two of them, used by the CLI against a
// real server (LEDGER_TOKEN is what the CLI sends): what one creates the other cannot see or touch.

const SECRET = "a-shared-secret-of-at-least-32-bytes!!";

let dir: string;
let t: TestLedger;
beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-cli-token-")));
  t = await startTestLedger(
    { auth: { jwt: { secret: SECRET, issuer: "https://login.test", audience: "ledger", tenant_claim: "org" } } },
    { transport: "http" },
  );
});
afterAll(async () => {
  await t?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const place = (env: NodeJS.ProcessEnv = {}) => ({ cwd: dir, env: { PATH: process.env.PATH, ...env } });
const configFile = () => path.join(dir, "ledger.json");

describe("ledger token", () => {
  it("mints a token with the configured claims; two users' tokens keep their sessions apart over --url", async () => {
    await writeFile(
      configFile(),
      JSON.stringify({ auth: { jwt: { issuer: "https://login.test", audience: "ledger", tenant_claim: "org" } } }),
    );
    const mint = async (sub: string, extra: string[] = []) => {
      const run = await runCli(
        ["token", "--sub", sub, "--tenant", "acme", "--config", configFile(), ...extra],
        place({ LEDGER_JWT_SECRET: SECRET }),
      );
      expect(run).toMatchObject({ code: 0, stderr: "" });
      return run.stdout.trim();
    };
    const alice = await mint("alice", ["--scope", "ledger:read,ledger:write", "--expires", "10m"]);
    const claims = decodeJwt(alice);
    expect(claims).toMatchObject({
      sub: "alice",
      org: "acme",
      scope: "ledger:read ledger:write",
      iss: "https://login.test",
      aud: "ledger",
    });
    expect(claims.exp! - claims.iat!).toBe(600);
    const bob = await mint("bob");

    const asAlice = await runCli(["prompt", "--no-reply", "mine", "--url", t.ledger.url], {
      cwd: t.dir,
      env: { PATH: process.env.PATH, LEDGER_TOKEN: alice },
    });
    expect(asAlice.code, asAlice.stderr).toBe(0);
    const sessionId = /session (ses_\w+)/.exec(asAlice.stdout)![1]!;
    const bobSees = await runCli(["sessions", "--url", t.ledger.url], place({ LEDGER_TOKEN: bob }));
    expect(bobSees).toMatchObject({ code: 0, stdout: "no sessions\n" });
    const bobReads = await runCli(["messages", sessionId, "--url", t.ledger.url], place({ LEDGER_TOKEN: bob }));
    expect(bobReads).toMatchObject({ code: 1, stderr: `error: NotFound: session_id: session ${sessionId} not found\n` });
    const aliceSees = await runCli(["sessions", "--url", t.ledger.url], place({ LEDGER_TOKEN: alice }));
    expect(aliceSees.stdout).toContain(sessionId);
    const anonymous = await runCli(["sessions", "--url", t.ledger.url], place());
    expect(anonymous.code).toBe(1);
    expect(anonymous.stderr).toMatch(/^error: Unauthenticated: authorization: a bearer token is required/);
    // In the CLI's terms: the API's "header authorization: Bearer" says nothing of LEDGER_TOKEN.
    expect(anonymous.stderr).toContain(
      "\nhint: the server wants a token: set LEDGER_TOKEN to its auth.token (or to a JWT, e.g. from ledger token --sub NAME)\n",
    );
  });

  it("says what is missing without a secret, and refuses an unknown scope", async () => {
    const empty = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-cli-token-none-")));
    const noSecret = await runCli(["token", "--sub", "x"], { cwd: empty, env: { PATH: process.env.PATH } });
    await rm(empty, { recursive: true, force: true });
    expect(noSecret.code).toBe(1);
    expect(noSecret.stderr).toBe(
      "error: ledger token signs with the shared secret: set LEDGER_JWT_SECRET (32+ bytes) or auth.jwt.secret; with a key set (jwks) your identity provider mints the tokens\n",
    );
    const noTenant = await runCli(["token", "--sub", "x", "--config", configFile()], place({ LEDGER_JWT_SECRET: SECRET }));
    expect(noTenant).toMatchObject({
      code: 1,
      stderr: 'error: --tenant: required: this server\'s tokens carry the tenant claim "org" (auth.jwt.tenant_claim)\n',
    });
    const past = await runCli(
      ["token", "--sub", "x", "--tenant", "acme", "--expires", "-1h", "--config", configFile()],
      place({ LEDGER_JWT_SECRET: SECRET }),
    );
    expect(past).toMatchObject({
      code: 1,
      stderr: 'error: --expires: expected a positive lifetime of at most 366d such as "30m", "1h" or "7d", got "-1h"\n',
    });
    // A trial, 2026-12-02: "0m" minted a token expired when made, "1x" printed jose's message
    // without the option, and "999999999d" was accepted.
    const expires = (value: string) =>
      runCli(
        ["token", "--sub", "x", "--tenant", "acme", "--expires", value, "--config", configFile()],
        place({ LEDGER_JWT_SECRET: SECRET }),
      );
    const lifetime = `error: --expires: expected a positive lifetime of at most 366d such as "30m", "1h" or "7d", got`;
    for (const zero of ["0m", "0s", "00h", "0d"])
      expect(await expires(zero)).toMatchObject({
        code: 1,
        stdout: "",
        stderr: `${lifetime} "${zero}": that token would be expired when it is made\n`,
      });
    expect(await expires("1x")).toMatchObject({ code: 1, stdout: "", stderr: `${lifetime} "1x" (Invalid time period format)\n` });
    expect(await expires("367d")).toMatchObject({ code: 1, stdout: "", stderr: `${lifetime} "367d"\n` });
    // An empty subject minted a token every server refuses (a trial, 2026-12-04): a usage error.
    for (const blank of ["", "  "])
      expect(
        await runCli(["token", "--sub", blank, "--tenant", "acme", "--config", configFile()], place({ LEDGER_JWT_SECRET: SECRET })),
      ).toMatchObject({
        code: 1,
        stdout: "",
        stderr: `error: option '--sub <subject>' argument '${blank}' is invalid. expected who the token is for, e.g. alice; got an empty subject\n(ledger <command> --help shows the usage)\n`,
      });
    expect(await expires("366d")).toMatchObject({ code: 0 });
    await writeFile(configFile(), JSON.stringify({ auth: { jwt: { secret: "{env:LEDGER_JWT_SECRET}" } } }));
    const unset = await runCli(["token", "--sub", "x", "--config", configFile()], place());
    expect(unset).toMatchObject({
      code: 1,
      stderr:
        'error: auth.jwt.secret: is empty (with "{env:LEDGER_JWT_SECRET}", is LEDGER_JWT_SECRET set?); give a secret of at least 32 bytes\n',
    });
    const badScope = await runCli(["token", "--sub", "x", "--scope", "ledger:root"], place({ LEDGER_JWT_SECRET: SECRET }));
    expect(badScope).toMatchObject({
      code: 1,
      stderr: "error: --scope: unknown ledger:root; expected ledger:read, ledger:write, ledger:admin\n",
    });
  });
});
