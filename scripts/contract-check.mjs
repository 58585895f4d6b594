// `npm run lint` runs this: `buf breaking` with the WIRE_JSON rules (buf.yaml) between proto/ as
// it is now and proto/ as last released, the commit named in proto/CONTRACT_BASE. That commit is
// exported with `git archive` into a temp dir (works in a worktree, where .git is a file, and in
// a fresh clone without tags; a shallow clone fetches that one commit from origin, and fails
// saying how to fetch it when it cannot).
//
//   node scripts/contract-check.mjs [--workspace DIR]
//
// --workspace: the buf workspace to check (a dir with buf.yaml, proto/, proto-vendor/; default the
// repository). CONTRACT_BASE=<commit-ish> in the environment overrides the file.
// Exit 0: compatible; 1: a breaking change (buf's findings on stderr) or no base to compare with.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";

const root = path.resolve(import.meta.dirname, "..");
const BASE_FILE = path.join(root, "proto/CONTRACT_BASE");
const BUF = path.join(root, "node_modules/@bufbuild/buf/bin/buf");

const args = process.argv.slice(2);
const at = args.indexOf("--workspace");
const workspace = at >= 0 ? path.resolve(args[at + 1] ?? ".") : root;

const { commit, tag } = readBase();
const resolved = resolveCommit(commit, tag);
const against = mkdtempSync(path.join(os.tmpdir(), "ledger-contract-"));
try {
  const archive = execFileSync("git", ["-C", root, "archive", "--format=tar", resolved, "buf.yaml", "proto", "proto-vendor"], {
    maxBuffer: 64 * 1024 * 1024,
  });
  execFileSync("tar", ["-x", "-C", against], { input: archive });
  const run = spawnSync(BUF, ["breaking", workspace, "--against", against, "--error-format", "text"], { encoding: "utf8" });
  if (run.error) fail(`could not run buf (${BUF}): ${run.error.message}`);
  if (run.status !== 0) {
    process.stderr.write(run.stdout + run.stderr);
    fail(
      `proto/ breaks wire or JSON compatibility with the released contract (${describe(commit, tag)}).\n` +
        "Keep the old field numbers, names and types (add new ones instead), or put the change in a new package version\n" +
        "(ledger.v2); see docs/contract-changes.md.",
    );
  }
  process.stdout.write(`buf breaking (WIRE_JSON): proto/ is compatible with the released contract (${describe(commit, tag)})\n`);
} finally {
  rmSync(against, { recursive: true, force: true });
}

/** The base from CONTRACT_BASE (env) or proto/CONTRACT_BASE: `commit <sha>` and `tag <name>` lines, `#` comments. */
function readBase() {
  if (process.env.CONTRACT_BASE) return { commit: process.env.CONTRACT_BASE, tag: undefined };
  let text;
  try {
    text = readFileSync(BASE_FILE, "utf8");
  } catch {
    fail(`${BASE_FILE} is missing: it names the commit of the released contract ("commit <sha>")`);
  }
  const fields = Object.fromEntries(
    text
      .split("\n")
      .map((line) => line.replace(/#.*/, "").trim())
      .filter(Boolean)
      .map((line) => line.split(/\s+/, 2)),
  );
  if (!fields.commit) fail(`${BASE_FILE} names no commit (a line "commit <sha>")`);
  return { commit: fields.commit, tag: fields.tag };
}

/** The commit to compare with: `commit` when this clone has it, else the tag; fails saying what to fetch. */
function resolveCommit(commit, tag) {
  const verify = (ref) =>
    spawnSync("git", ["-C", root, "rev-parse", "-q", "--verify", `${ref}^{commit}`], { encoding: "utf8" }).stdout.trim() || undefined;
  let found = verify(commit);
  // A shallow clone (CI) lacks history: fetch the one commit needed (servers such as GitHub allow it).
  const shallow = spawnSync("git", ["-C", root, "rev-parse", "--is-shallow-repository"], { encoding: "utf8" }).stdout.trim() === "true";
  if (!found && shallow && /^[0-9a-f]{40}$/.test(commit)) {
    spawnSync("git", ["-C", root, "fetch", "--quiet", "--depth=1", "origin", commit], { stdio: ["ignore", "ignore", "inherit"] });
    found = verify(commit);
  }
  const tagged = tag ? verify(`refs/tags/${tag}`) : undefined;
  if (found && tagged && tagged !== found) {
    process.stderr.write(`warning: tag ${tag} is ${tagged}, not ${found} as proto/CONTRACT_BASE says; comparing with the file's commit\n`);
  }
  if (found) return found;
  if (tagged) return tagged;
  fail(
    `the released contract's commit ${commit}${tag ? ` (tag ${tag})` : ""} is not in this clone` +
      ` (a shallow clone? run "git fetch --unshallow" or "git fetch origin ${tag ? `tag ${tag}` : commit}")`,
  );
}

function describe(commit, tag) {
  return tag ? `${tag}, ${commit.slice(0, 12)}` : commit.slice(0, 12);
}

function fail(message) {
  process.stderr.write(`contract check: ${message}\n`);
  process.exit(1);
}
