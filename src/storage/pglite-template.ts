/**
 * The migrated PGlite template: a data directory made once per machine, PGlite version and
 * migration list, from which every new embedded database starts (a file copy for a `--db`
 * directory, PGlite's `loadDataDir` tarball for `:memory:`) instead of running initdb (~2 s) and
 * every migration again.
 *
 * Layout: `<cache>/pglite-<PGlite version>-<hash>/` holding `pgdata/` (the data directory,
 * cleanly shut down) and `pgdata.tar` (the same, as `dumpDataDir("none")` wrote it: about 40 MB
 * uncompressed; PGlite unpacks a gzip tarball through a `DecompressionStream` after a first
 * failed untar, which made a `:memory:` start 0.3–1 s slower, measured), where `<cache>`
 * is `$XDG_CACHE_HOME/session-ledger` or `~/.cache/session-ledger` and `<hash>` covers the
 * migration names and {@link TEMPLATE_FORMAT}. A template is built in a temporary directory next
 * to it and renamed into place, so a process never sees half of one, and two processes racing
 * to build it both end up using the one that was renamed first.
 */
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, readFile, readdir, rename, rm, stat } from "node:fs/promises";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import type { PGlite, PGliteOptions } from "@electric-sql/pglite";
import { migrations } from "./migrations/index.js";

/** Bumped when what a template holds changes for another reason than PGlite or the migrations. */
export const TEMPLATE_FORMAT = 2;

/** A template ready to start from. */
export interface PgliteTemplate {
  /** The data directory to copy for a new `--db` directory. */
  dataDir: string;
  /** The uncompressed tarball (PGlite `dumpDataDir("none")`) to pass as `loadDataDir` for `:memory:`. */
  tarball: string;
}

/**
 * The cache folder of the templates: `$XDG_CACHE_HOME/session-ledger` when set (and absolute),
 * else `~/.cache/session-ledger`.
 */
export function templateCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_CACHE_HOME;
  return path.join(xdg && path.isAbsolute(xdg) ? xdg : path.join(os.homedir(), ".cache"), "session-ledger");
}

/** The installed PGlite's version (`@electric-sql/pglite`'s package.json), e.g. "0.5.17". */
export function pgliteVersion(): string {
  const require = createRequire(import.meta.url);
  // The package's exports hide package.json: walk up from its entry point to its root.
  let dir = path.dirname(require.resolve("@electric-sql/pglite"));
  for (;;) {
    const file = path.join(dir, "package.json");
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, "utf8")) as { name?: string; version?: string };
      if (pkg.name === "@electric-sql/pglite" && pkg.version) return pkg.version;
    }
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error("@electric-sql/pglite's package.json not found");
    dir = parent;
  }
}

/**
 * The template's folder name: `pglite-<version>-<first 16 hex of sha256(format, migration
 * names in order)>`. A new migration, or another PGlite, gives a new name (a new template).
 */
export function templateKey(migrationNames: readonly string[] = Object.keys(migrations).sort()): string {
  const hash = createHash("sha256")
    .update(JSON.stringify({ format: TEMPLATE_FORMAT, migrations: migrationNames }))
    .digest("hex");
  return `pglite-${pgliteVersion()}-${hash.slice(0, 16)}`;
}

/** Whether `LEDGER_PGLITE_TEMPLATE=off` (or `0`, `false`) asks for initdb on every new database. */
export function templateDisabled(env: NodeJS.ProcessEnv = process.env): boolean {
  return ["off", "0", "false"].includes((env.LEDGER_PGLITE_TEMPLATE ?? "").toLowerCase());
}

/**
 * What `dir` holds as an embedded database directory:
 * - `new`: missing, or an empty directory (the CLI's lock creates it empty): a database is made;
 * - `database`: a directory holding `PG_VERSION`, opened as it is;
 * - `refused`, with `reason` (one sentence a person reads): a file, or a directory that holds
 *   something else (a typo'd path, a project folder, a database whose creation was interrupted
 *   before `PG_VERSION`): nothing is written into it.
 * Throws what `stat`/`readdir` throw for an unreadable directory (`EACCES`, ...).
 */
export async function dataDirState(dir: string): Promise<{ kind: "new" | "database" } | { kind: "refused"; reason: string }> {
  let entries: string[];
  try {
    if (!(await stat(dir)).isDirectory()) return { kind: "refused", reason: "it is a file, not a directory" };
    entries = await readdir(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { kind: "new" };
    throw error;
  }
  if (entries.length === 0) return { kind: "new" };
  if (entries.includes("PG_VERSION")) return { kind: "database" };
  return {
    kind: "refused",
    reason:
      `it is not empty and holds no database (no PG_VERSION among its ${entries.length} entries): ` +
      "name a new or empty directory to create one, or an existing database",
  };
}

/**
 * Removes the staged copies (`.<name>.<pid>-<hex>.tmp`, see {@link stagedCopyPath}) that a
 * process which died while making the database `dir` left next to it; copies of a process
 * still running are left alone. Never throws (a copy that cannot be removed stays).
 */
export async function removeDeadStagedCopies(dir: string): Promise<void> {
  const parent = path.dirname(dir);
  const prefix = `.${path.basename(dir)}.`;
  const names = await readdir(parent).catch(() => [] as string[]);
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const m = /^(\d+)-[0-9a-f]+\.tmp$/.exec(name.slice(prefix.length));
    if (!m || processAlive(Number(m[1]))) continue;
    await rm(path.join(parent, name), { recursive: true, force: true }).catch(() => undefined);
  }
}

/**
 * Where a new database `dir` is copied to before it is renamed into place:
 * `<parent>/.<name>.<pid>-<8 hex>.tmp`, on the same file system as `dir`.
 */
export function stagedCopyPath(dir: string): string {
  return path.join(path.dirname(dir), `.${path.basename(dir)}.${process.pid}-${randomBytes(4).toString("hex")}.tmp`);
}

/** Whether a process with this pid runs on this machine (signal 0; `EPERM` means it does). */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * The template for this PGlite and migration list, built first when missing: PGlite's initdb
 * in a temporary folder of the cache, `migrate` (the caller's, on that database), a checkpoint,
 * the tarball, a clean shutdown, then a rename into place. Returns undefined, after a warning on
 * stderr, when the cache cannot be written (read-only home, full disk, ...): the caller then runs
 * initdb on its own database, as without a template. `open` creates a PGlite (the caller's
 * options, so the template has the same settings).
 */
export async function ensureTemplate(
  open: (dataDir: string) => Promise<PGlite>,
  migrate: (pglite: PGlite) => Promise<void>,
  cacheDir: string = templateCacheDir(),
): Promise<PgliteTemplate | undefined> {
  const final = path.join(cacheDir, templateKey());
  const template = { dataDir: path.join(final, "pgdata"), tarball: path.join(final, "pgdata.tar") };
  if (existsSync(template.tarball)) return template;
  const temp = `${final}.${process.pid}-${randomBytes(4).toString("hex")}.tmp`;
  try {
    await mkdir(temp, { recursive: true });
    const pglite = await open(path.join(temp, "pgdata"));
    try {
      await migrate(pglite);
      await pglite.exec("CHECKPOINT");
      const tarball = await pglite.dumpDataDir("none");
      const { writeFile } = await import("node:fs/promises");
      await writeFile(path.join(temp, "pgdata.tar"), new Uint8Array(await tarball.arrayBuffer()));
    } finally {
      await pglite.close();
    }
    try {
      await rename(temp, final);
    } catch (error) {
      // Another process renamed its template first: use that one.
      const code = (error as NodeJS.ErrnoException).code;
      if ((code !== "ENOTEMPTY" && code !== "EEXIST") || !existsSync(template.tarball)) throw error;
    }
    return template;
  } catch (error) {
    process.stderr.write(
      `note: no PGlite template in ${cacheDir} (${error instanceof Error ? error.message : String(error)}); ` +
        "the new embedded database runs initdb\n",
    );
    return undefined;
  } finally {
    await rm(temp, { recursive: true, force: true }).catch(() => undefined);
  }
}

/**
 * The last tarball read (path and Blob), held weakly: a process that opens several embedded
 * databases in a row (the tests; a CLI command opens one) reads the ~40 MB file once while the
 * Blob is alive, and a server that opened its one database lets the collector take it.
 */
let lastBlob: { tarball: string; blob: WeakRef<Blob> } | undefined;

/**
 * The template's tarball as a Blob, for PGlite's `loadDataDir` (PGlite only reads it). The Blob
 * of the last read is reused while it is still alive: five `:memory:` opens in a row took
 * 1.1–1.6 s each reading the file every time, 0.75–1.05 s reusing it (2-vCPU machine, 2026-12-02).
 * It is a {@link TarballBlob}, whose `arrayBuffer()` hands out the bytes read instead of copying
 * them (PGlite 0.5 calls it once per open and only reads the result). That buffer is shared by
 * every caller in the process: read it, never write to it (a write would change every later
 * open's template).
 */
export async function templateBlob(template: PgliteTemplate): Promise<NonNullable<PGliteOptions["loadDataDir"]>> {
  const cached = lastBlob?.tarball === template.tarball ? lastBlob.blob.deref() : undefined;
  if (cached) return cached;
  const { buffer, byteOffset, byteLength } = await readFile(template.tarball);
  // A file this large is read into a buffer of its own (not Node's shared pool): no copy then.
  const own = byteOffset === 0 && byteLength === buffer.byteLength ? buffer : buffer.slice(byteOffset, byteOffset + byteLength);
  const blob = new TarballBlob(own as ArrayBuffer);
  lastBlob = { tarball: template.tarball, blob: new WeakRef(blob) };
  return blob;
}

/**
 * A Blob of the template's tarball whose `arrayBuffer()` resolves to the one `ArrayBuffer` it was
 * made from, every time, instead of a copy. Why: a `:memory:` open is PGlite reading its
 * `loadDataDir` with `new Uint8Array(await blob.arrayBuffer())`, untarring it and writing each
 * file into its in-memory file system (Emscripten's `FS.writeFile`, which copies); Node 20's
 * `Blob.arrayBuffer()` took 220 ms of a 550–650 ms open for the 41 MB tarball (`--cpu-prof`:
 * `readNext` and `concat`), where handing out the same buffer takes none. Nothing writes to the
 * buffer: test/storage/pglite-template.test.ts checks its bytes after databases were opened from
 * it and written to. The Blob's own content (`stream()`, `text()`, `slice()`) is the same bytes,
 * in a copy of its own: while the Blob is alive it holds the tarball twice (2 × 41 MB of
 * `ArrayBuffer`s, freed with it; it is held weakly). A buffer that was transferred away (detached)
 * is not handed out: `arrayBuffer()` then returns a copy of the Blob's content, as a plain Blob does.
 */
class TarballBlob extends Blob {
  readonly #buffer: ArrayBuffer;

  constructor(buffer: ArrayBuffer) {
    super([buffer]);
    this.#buffer = buffer;
  }

  override arrayBuffer(): Promise<ArrayBuffer> {
    // A buffer someone transferred (detached: 0 bytes) is not handed out again: the Blob's own copy is.
    if (this.#buffer.byteLength !== this.size) return super.arrayBuffer();
    return Promise.resolve(this.#buffer);
  }
}
