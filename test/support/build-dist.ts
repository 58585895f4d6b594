/**
 * vitest globalSetup: tests that spawn `bin/ledger.js` run the bundled dist/, so build it
 * (`npm run build`: scripts/build.mjs, esbuild, a few seconds) when any file of src/, gen/ or the
 * build script is newer than the last build, or dist/ is missing. Same for the page that
 * `ledger serve` serves: web/dist (`npm run build:web`, Vite, about 2 s) when older than web/src.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";

const ROOT = path.resolve(import.meta.dirname, "../..");
const STAMP = path.join(ROOT, "dist/cli/main.js");
const WEB_STAMP = path.join(ROOT, "web/dist/index.html");

/** The newest modification time (ms) of the files under `dir`. */
function newest(dir: string): number {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) latest = Math.max(latest, statSync(path.join(entry.parentPath, entry.name)).mtimeMs);
  }
  return latest;
}

/** Whether dist/ is missing or older than a source file (or the build script, or package.json). */
export function distIsStale(): boolean {
  if (!existsSync(STAMP)) return true;
  const built = statSync(STAMP).mtimeMs;
  const sources = Math.max(
    newest(path.join(ROOT, "src")),
    newest(path.join(ROOT, "gen")),
    statSync(path.join(ROOT, "scripts/build.mjs")).mtimeMs,
    statSync(path.join(ROOT, "package.json")).mtimeMs,
  );
  return sources > built;
}

/** Whether web/dist is missing or older than a file of web/ (its sources, index.html, config) or gen/. */
export function webDistIsStale(): boolean {
  if (!existsSync(WEB_STAMP)) return true;
  const sources = Math.max(
    newest(path.join(ROOT, "web/src")),
    newest(path.join(ROOT, "gen")),
    statSync(path.join(ROOT, "web/index.html")).mtimeMs,
    statSync(path.join(ROOT, "web/vite.config.ts")).mtimeMs,
  );
  return sources > statSync(WEB_STAMP).mtimeMs;
}

export default function setup(): void {
  if (distIsStale()) {
    process.stderr.write("dist/ is missing or older than src/: npm run build\n");
    execFileSync(process.execPath, [path.join(ROOT, "scripts/build.mjs")], { cwd: ROOT, stdio: "inherit" });
  }
  if (webDistIsStale()) {
    process.stderr.write("web/dist is missing or older than web/: npm run build:web\n");
    execFileSync(process.execPath, [path.join(ROOT, "node_modules/vite/bin/vite.js"), "build", "web", "--logLevel", "warn"], {
      cwd: ROOT,
      stdio: "inherit",
    });
  }
}
