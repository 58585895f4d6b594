/**
 * vitest globalSetup: tests that spawn `bin/ledger.js` run the compiled dist/, so build it
 * (`npm run build`, incremental tsc) when any file of src/ or gen/ is newer than the last build,
 * or dist/ is missing (a fresh clone before `npm ci`'s `prepare`, or after `git pull`).
 */
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, statSync, utimesSync } from "node:fs";
import path from "node:path";

const ROOT = path.resolve(import.meta.dirname, "../..");
const STAMP = path.join(ROOT, "dist/.tsbuildinfo");

/** The newest modification time (ms) of the files under `dir`. */
function newest(dir: string): number {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) latest = Math.max(latest, statSync(path.join(entry.parentPath, entry.name)).mtimeMs);
  }
  return latest;
}

/** Whether dist/ is missing or older than a source file (or tsconfig). */
export function distIsStale(): boolean {
  if (!existsSync(STAMP) || !existsSync(path.join(ROOT, "dist/src/cli/main.js"))) return true;
  const built = statSync(STAMP).mtimeMs;
  const sources = Math.max(
    newest(path.join(ROOT, "src")),
    newest(path.join(ROOT, "gen")),
    statSync(path.join(ROOT, "tsconfig.json")).mtimeMs,
    statSync(path.join(ROOT, "tsconfig.build.json")).mtimeMs,
  );
  return sources > built;
}

export default function setup(): void {
  if (!distIsStale()) return;
  process.stderr.write("dist/ is missing or older than src/: building it (tsc -p tsconfig.build.json)\n");
  try {
    execFileSync(path.join(ROOT, "node_modules/.bin/tsc"), ["-p", "tsconfig.build.json"], { cwd: ROOT, stdio: "inherit" });
  } catch (error) {
    // tsc emits despite type errors (`npm run lint` reports them); only a missing output stops the tests.
    if (!existsSync(path.join(ROOT, "dist/src/cli/main.js"))) throw error;
    process.stderr.write("tsc reported errors; dist/ was written anyway\n");
  }
  // An incremental build that had nothing to emit leaves the stamp old: mark dist/ as current.
  const now = new Date();
  utimesSync(STAMP, now, now);
}
