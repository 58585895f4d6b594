import { spawnSync } from "node:child_process";
import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";

// scripts/contract-check.mjs (issue 17 item 5): `buf breaking` (WIRE_JSON) between a workspace and
// proto/ at the commit proto/CONTRACT_BASE names. A temp copy of the workspace is changed: a renamed
// field (a JSON break) fails, an added field passes; a base missing from the clone fails clearly.

const ROOT = path.resolve(import.meta.dirname, "../..");
const SCRIPT = path.join(ROOT, "scripts/contract-check.mjs");
const SESSION = "proto/ledger/v1/session.proto";

let copy: string | undefined;
afterEach(async () => {
  if (copy) await rm(copy, { recursive: true, force: true });
  copy = undefined;
});

/** A copy of the buf workspace (buf.yaml, proto/, proto-vendor/) with `edit` applied to session.proto. */
async function workspace(edit: (source: string) => string): Promise<string> {
  copy = await mkdtemp(path.join(os.tmpdir(), "ledger-contract-test-"));
  for (const entry of ["buf.yaml", "proto", "proto-vendor"]) await cp(path.join(ROOT, entry), path.join(copy, entry), { recursive: true });
  const file = path.join(copy, SESSION);
  const before = await readFile(file, "utf8");
  const after = edit(before);
  expect(after).not.toBe(before);
  await writeFile(file, after);
  return copy;
}

function check(args: string[], env: NodeJS.ProcessEnv = {}) {
  const base = { ...process.env, ...env };
  if (!env.CONTRACT_BASE) delete base.CONTRACT_BASE;
  return spawnSync(process.execPath, [SCRIPT, ...args], { cwd: ROOT, env: base, encoding: "utf8" });
}

describe("the contract check", () => {
  it("passes for proto/ as it is", () => {
    const run = check([]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(
      /^buf breaking \(WIRE_JSON\): proto\/ is compatible with the released contract \(contract-v1, [0-9a-f]{12}\)\n$/,
    );
  });

  it("fails on a renamed field (its JSON name changes) and names it", async () => {
    const dir = await workspace((s) => s.replace(/string title = (\d+);/, "string heading = $1;"));
    const run = check(["--workspace", dir]);
    expect(run.status).toBe(1);
    expect(run.stderr).toContain('changed name from "title" to "heading"');
    expect(run.stderr).toContain("contract check: proto/ breaks wire or JSON compatibility with the released contract");
  });

  it("passes an added field", async () => {
    const dir = await workspace((s) => s.replace(/message Session \{\n/, "message Session {\n  string contract_test_note = 999;\n"));
    const run = check(["--workspace", dir]);
    expect(run.status, run.stderr).toBe(0);
  });

  it("fails clearly when the base commit is not in the clone", () => {
    const run = check([], { CONTRACT_BASE: "0123456789abcdef0123456789abcdef01234567" });
    expect(run.status).toBe(1);
    expect(run.stderr).toContain("is not in this clone");
  });
});
