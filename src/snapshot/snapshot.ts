import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { lstat, mkdir, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** Most bytes git may print for one command (file contents for diffs, file lists). */
const GIT_MAX_BUFFER = 256 * 1024 * 1024;

/** Limits of one snapshot; see `LedgerConfig.snapshot`. */
export interface SnapshotConfig {
  /** Directory holding one snapshot git directory per session directory. */
  dir: string;
  /** A tree with more bytes than this (in files git would track) is not snapshotted. */
  maxBytes: number;
  /** A tree with more files than this is not snapshotted. */
  maxFiles: number;
}

/** What `track` recorded: the tree id, or why there is none. */
export type TrackResult = { hash: string; skipped?: undefined } | { hash?: undefined; skipped: string };

/** One file changed between two snapshots. Follows OpenCode `Snapshot.FileDiff`. */
export interface FileChange {
  /** Relative to the session directory, "/"-separated. */
  file: string;
  /** Content before ("" when created or binary). */
  before: string;
  /** Content after ("" when deleted or binary). */
  after: string;
  additions: number;
  deletions: number;
}

/** A step's changes, as its `patch` part records them: the snapshot before it and the files it changed. */
export interface Patch {
  hash: string;
  files: string[];
}

/**
 * Snapshots of session directories in git trees, with the system `git` and a git directory of
 * their own under `config.dir` (one per session directory, named by a hash of its path), never
 * the project's `.git`. Follows OpenCode `Snapshot` (snapshot/index.ts): `track` stages the whole
 * work tree (`git add -A`, so `.gitignore` applies and nested `.git` directories are skipped) and
 * writes a tree; `patch`/`diff` compare trees; `revert` and `restore` check files out of them. No
 * commits are made. Operations on one directory run one at a time in this process.
 */
export class Snapshots {
  readonly #locks = new Map<string, Promise<unknown>>();

  constructor(readonly config: SnapshotConfig) {}

  /** The snapshot git directory of `directory`: `<config.dir>/<sha1(directory)[0:16]>`. */
  gitDir(directory: string): string {
    return path.join(this.config.dir, createHash("sha1").update(directory).digest("hex").slice(0, 16));
  }

  /**
   * Records `directory` now (OpenCode `Snapshot.track`): the id of a git tree of every file git
   * would track (ignored ones left out). When the tree holds more than `maxFiles` files or
   * `maxBytes` bytes, nothing is recorded and `skipped` says so
   * ("snapshot skipped: <dir> holds 250000 files (more than snapshot.max_files 100000)").
   * @throws the git error (git missing, unreadable files).
   */
  track(directory: string): Promise<TrackResult> {
    return this.#serial(directory, async () => {
      await this.#init(directory);
      const files = (await this.#git(directory, ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]))
        .split("\0")
        .filter(Boolean);
      if (files.length > this.config.maxFiles)
        return {
          skipped: `snapshot skipped: ${directory} holds ${files.length} files (more than snapshot.max_files ${this.config.maxFiles})`,
        };
      let bytes = 0;
      for (const file of files) {
        const info = await lstat(path.join(directory, file)).catch(() => undefined);
        bytes += info?.isFile() ? info.size : 0;
        if (bytes > this.config.maxBytes)
          return {
            skipped: `snapshot skipped: ${directory} holds more than snapshot.max_bytes (${this.config.maxBytes} bytes) in files git would track`,
          };
      }
      await this.#git(directory, ["add", "-A", "."]);
      return { hash: (await this.#git(directory, ["write-tree"])).trim() };
    });
  }

  /** Files (relative, sorted) that differ between the trees `from` and `to`. */
  changedFiles(directory: string, from: string, to: string): Promise<string[]> {
    return this.#serial(directory, async () =>
      (await this.#git(directory, ["diff", "--no-renames", "--name-only", "-z", from, to, "--", "."])).split("\0").filter(Boolean).sort(),
    );
  }

  /**
   * Every file that differs between the trees `from` and `to`, with both contents and line
   * counts (OpenCode `Snapshot.diffFull`); binary files have empty contents and 0 counts. Sorted by path.
   */
  diff(directory: string, from: string, to: string): Promise<FileChange[]> {
    return this.#serial(directory, async () => {
      const out = await this.#git(directory, ["diff", "--no-renames", "--numstat", "-z", from, to, "--", "."]);
      const changes: FileChange[] = [];
      for (const record of out.split("\0").filter(Boolean)) {
        const [added, deleted, ...name] = record.split("\t");
        const file = name.join("\t");
        const binary = added === "-";
        changes.push({
          file,
          before: binary ? "" : await this.#show(directory, from, file),
          after: binary ? "" : await this.#show(directory, to, file),
          additions: binary ? 0 : Number(added),
          deletions: binary ? 0 : Number(deleted),
        });
      }
      return changes.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0));
    });
  }

  /**
   * Puts every file named by `patches` back as it was in the earliest patch naming it (OpenCode
   * `Snapshot.revert`): checked out of that patch's tree, or deleted when it was not in it.
   */
  revert(directory: string, patches: readonly Patch[]): Promise<void> {
    return this.#serial(directory, async () => {
      const done = new Set<string>();
      for (const patch of patches) {
        for (const file of patch.files) {
          if (done.has(file)) continue;
          done.add(file);
          await this.#putBack(directory, patch.hash, file);
        }
      }
    });
  }

  /**
   * Makes the tracked files of `directory` what they were in the tree `hash` (OpenCode
   * `Snapshot.restore`, which only checks out; here files added since are also deleted).
   */
  async restore(directory: string, hash: string): Promise<void> {
    const now = await this.track(directory);
    await this.#serial(directory, async () => {
      if (!now.hash) {
        await this.#git(directory, ["read-tree", hash]);
        await this.#git(directory, ["checkout-index", "-a", "-f"]);
        return;
      }
      const files = (await this.#git(directory, ["diff", "--no-renames", "--name-only", "-z", hash, now.hash, "--", "."]))
        .split("\0")
        .filter(Boolean);
      for (const file of files) await this.#putBack(directory, hash, file);
    });
  }

  /** `file` as in tree `hash`: checked out, or deleted when the tree does not have it. */
  async #putBack(directory: string, hash: string, file: string): Promise<void> {
    const inTree = (await this.#git(directory, ["ls-tree", "--name-only", hash, "--", file])).trim() !== "";
    if (inTree) await this.#git(directory, ["checkout", hash, "--", file]);
    else await rm(path.join(directory, file), { force: true });
  }

  async #show(directory: string, tree: string, file: string): Promise<string> {
    try {
      return await this.#git(directory, ["show", `${tree}:${file}`]);
    } catch {
      return ""; // not in that tree
    }
  }

  /** Creates the snapshot git directory on first use, excluding the ledger's own data directory when it lies in the work tree. */
  async #init(directory: string): Promise<void> {
    const gitDir = this.gitDir(directory);
    if (await lstat(path.join(gitDir, "HEAD")).catch(() => undefined)) return;
    await mkdir(gitDir, { recursive: true });
    await this.#git(directory, ["init", "--quiet"]);
    await this.#git(directory, ["config", "core.autocrlf", "false"]);
    await this.#git(directory, ["config", "core.quotepath", "false"]);
    const data = path.relative(directory, path.dirname(this.config.dir));
    const excludes = ["# the ledger's data directory", ...(data && !data.startsWith("..") && !path.isAbsolute(data) ? [`/${data}/`] : [])];
    await mkdir(path.join(gitDir, "info"), { recursive: true });
    await writeFile(path.join(gitDir, "info", "exclude"), `${excludes.join("\n")}\n`);
  }

  async #git(directory: string, args: string[]): Promise<string> {
    const gitDir = this.gitDir(directory);
    const { stdout } = await run("git", ["--git-dir", gitDir, "--work-tree", directory, "-c", "core.hooksPath=/dev/null", ...args], {
      cwd: directory,
      maxBuffer: GIT_MAX_BUFFER,
      env: { ...process.env, GIT_DIR: gitDir, GIT_WORK_TREE: directory, GIT_CONFIG_NOSYSTEM: "1", GIT_TERMINAL_PROMPT: "0" },
    });
    return stdout;
  }

  #serial<T>(directory: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.#locks.get(directory) ?? Promise.resolve();
    const next = previous.then(fn, fn);
    const settled = next.catch(() => undefined);
    this.#locks.set(directory, settled);
    void settled.then(() => {
      if (this.#locks.get(directory) === settled) this.#locks.delete(directory);
    });
    return next;
  }
}
