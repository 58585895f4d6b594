/**
 * The migrated PGlite template (issue 13 item 4): a new embedded database starts from it, two
 * processes racing to build it both start, a new migration list gives a new template, an
 * existing data directory is reopened as it is, and an unwritable cache falls back to initdb.
 * PGlite only (the pglite project); every test uses a cache folder of its own.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { cp, mkdtemp, readFile, readdir, realpath, rename, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { sql } from "kysely";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { openDatabase } from "../../src/storage/db.js";
import { migrations } from "../../src/storage/migrations/index.js";
import { templateBlob, templateCacheDir, templateKey } from "../../src/storage/pglite-template.js";
import { TEST_ENGINE } from "../support/db.js";

const ROOT = path.resolve(import.meta.dirname, "../..");
const TIMEOUT = 180_000;
const NAMES = Object.keys(migrations).sort();

let dir: string;
const savedCache = process.env.XDG_CACHE_HOME;

beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-template-")));
});

afterEach(() => {
  if (savedCache === undefined) delete process.env.XDG_CACHE_HOME;
  else process.env.XDG_CACHE_HOME = savedCache;
  delete process.env.LEDGER_PGLITE_TEMPLATE;
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** A new, empty cache folder as XDG_CACHE_HOME; returns the ledger's folder inside it. */
async function freshCache(name: string): Promise<string> {
  const cache = path.join(dir, name);
  process.env.XDG_CACHE_HOME = cache;
  return templateCacheDir();
}

/** The ledger's cache folder of the first test, once it holds the built template. */
let built: string | undefined;

/**
 * A new cache folder as XDG_CACHE_HOME that already holds the current template (a copy of the
 * one the first test built, or built here when that test did not run): for the tests about what
 * happens once a template exists, without building another one (about 10 s each).
 */
async function warmCache(name: string): Promise<string> {
  if (!built) {
    const source = await freshCache(`${name}-source`);
    await (await openDatabase({ kind: "pglite", dir: ":memory:" })).close();
    built = source;
  }
  const cache = await freshCache(name);
  await cp(built, cache, { recursive: true });
  return cache;
}

async function entries(folder: string): Promise<string[]> {
  return (await readdir(folder).catch(() => [])).sort();
}

/** The applied migrations of an open database, in order. */
async function applied(database: Awaited<ReturnType<typeof openDatabase>>): Promise<string[]> {
  const rows = await sql<{ name: string }>`select name from kysely_migration order by name`.execute(database.db);
  return rows.rows.map((r) => r.name);
}

describe.skipIf(TEST_ENGINE !== "pglite")("PGlite template", () => {
  it("keys the template by PGlite version and migration list: one more migration, another template", () => {
    expect(templateKey(NAMES)).toMatch(/^pglite-\d+\.\d+\.\d+-[0-9a-f]{16}$/);
    expect(templateKey(NAMES)).toBe(templateKey());
    expect(templateKey([...NAMES, "2099-01-01T0000-next"])).not.toBe(templateKey(NAMES));
  });

  it(
    "builds the template once; :memory: and a new directory start from it, migrated",
    async () => {
      const cache = await freshCache("build");
      const memory = await openDatabase({ kind: "pglite", dir: ":memory:" });
      try {
        expect(await applied(memory)).toEqual(NAMES);
      } finally {
        await memory.close();
      }
      expect(await entries(cache)).toEqual([templateKey()]);
      expect(await entries(path.join(cache, templateKey()))).toEqual(["pgdata", "pgdata.tar"]);

      const disk = await openDatabase({ kind: "pglite", dir: path.join(dir, "new-db") });
      try {
        expect(await applied(disk)).toEqual(NAMES);
      } finally {
        await disk.close();
      }
      // The template itself is never written to by a database started from it.
      expect(await entries(cache)).toEqual([templateKey()]);
      built = cache;
    },
    TIMEOUT,
  );

  it(
    ":memory: databases opened from the tarball in memory are each the template's, and the bytes handed to PGlite stay the file's",
    async () => {
      const cache = await warmCache("shared-tarball");
      const tarball = path.join(cache, templateKey(), "pgdata.tar");
      const sha = (bytes: ArrayBuffer | Uint8Array) =>
        createHash("sha256")
          .update(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes))
          .digest("hex");
      const blob = await templateBlob({ dataDir: path.join(cache, templateKey(), "pgdata"), tarball });
      // The same buffer every time (no 40 MB copy per open), and the Blob's own content is it too.
      // (A boolean: a failing toBe on two 41 MB buffers makes vitest diff them and run out of memory.)
      expect((await blob.arrayBuffer()) === (await blob.arrayBuffer()), "arrayBuffer() hands out the same buffer").toBe(true);
      expect(blob.size).toBe((await readFile(tarball)).length);
      expect(sha(await new Response(blob.stream()).arrayBuffer())).toBe(sha(await readFile(tarball)));

      const first = await openDatabase({ kind: "pglite", dir: ":memory:" });
      try {
        await sql`create table scribble (v text)`.execute(first.db);
        await sql`insert into scribble select repeat('x', 1000) from generate_series(1, 2000)`.execute(first.db);
        await sql`insert into kysely_migration (name, timestamp) values ('2099-zz', now()::text)`.execute(first.db);
      } finally {
        await first.close();
      }
      const second = await openDatabase({ kind: "pglite", dir: ":memory:" });
      try {
        expect(await applied(second)).toEqual(NAMES);
        const tables = await sql<{ n: number }>`select count(*)::int as n from pg_tables where tablename = 'scribble'`.execute(second.db);
        expect(tables.rows).toEqual([{ n: 0 }]);
      } finally {
        await second.close();
      }
      // What PGlite read from (and may read again in this process) is still the file's bytes.
      // (Both opens used this Blob: the cache hands it out while it is alive, as `blob` keeps it.)
      expect((await templateBlob({ dataDir: "", tarball })) === blob, "the opens used this Blob").toBe(true);
      expect(sha(await blob.arrayBuffer())).toBe(sha(await readFile(tarball)));

      // A caller that transfers the buffer away does not leave a dead Blob behind (a review,
      // 2026-12-04: the next open read a detached buffer and fell back to initdb, 2.9 s). On a
      // copy of the tarball, so that this file's other opens keep theirs.
      const copy = path.join(cache, "copy-of-pgdata.tar");
      await writeFile(copy, await readFile(tarball));
      const own = await templateBlob({ dataDir: "", tarball: copy });
      structuredClone(await own.arrayBuffer(), { transfer: [await own.arrayBuffer()] });
      expect(sha(await own.arrayBuffer())).toBe(sha(await readFile(tarball)));
    },
    TIMEOUT,
  );

  it(
    "rebuilds it for a new migration list (a template of the old list stays unused)",
    async () => {
      const cache = await warmCache("schema");
      const old = templateKey(NAMES.slice(0, -1));
      // Pretend the cached template was made before the last migration existed.
      await rename(path.join(cache, templateKey()), path.join(cache, old));
      const database = await openDatabase({ kind: "pglite", dir: ":memory:" });
      try {
        expect(await applied(database)).toEqual(NAMES);
      } finally {
        await database.close();
      }
      expect(await entries(cache)).toEqual([old, templateKey()].sort());
    },
    TIMEOUT,
  );

  it(
    "reopens an existing directory as it is, without touching the cache",
    async () => {
      await warmCache("reopen-first");
      const dbDir = path.join(dir, "reopen-db");
      const first = await openDatabase({ kind: "pglite", dir: dbDir });
      await sql`create table kept (v text)`.execute(first.db);
      await sql`insert into kept values ('still here')`.execute(first.db);
      await first.close();

      const cache = await freshCache("reopen-second");
      const again = await openDatabase({ kind: "pglite", dir: dbDir });
      try {
        expect((await sql<{ v: string }>`select v from kept`.execute(again.db)).rows).toEqual([{ v: "still here" }]);
      } finally {
        await again.close();
      }
      expect(await entries(cache)).toEqual([]);
    },
    TIMEOUT,
  );

  it(
    "falls back to initdb when the cache cannot be written, and when LEDGER_PGLITE_TEMPLATE=off",
    async () => {
      const blocked = path.join(dir, "not-a-folder");
      await writeFile(blocked, "a file where the cache folder would be\n");
      process.env.XDG_CACHE_HOME = blocked;
      const database = await openDatabase({ kind: "pglite", dir: ":memory:" });
      try {
        expect(await applied(database)).toEqual(NAMES);
      } finally {
        await database.close();
      }

      const cache = await freshCache("off");
      process.env.LEDGER_PGLITE_TEMPLATE = "off";
      const plain = await openDatabase({ kind: "pglite", dir: path.join(dir, "off-db") });
      try {
        expect(await applied(plain)).toEqual(NAMES);
      } finally {
        await plain.close();
      }
      expect(await entries(cache)).toEqual([]);
    },
    TIMEOUT,
  );

  it(
    "two `ledger serve` processes racing to build it both start, and leave one template",
    async () => {
      const cacheHome = path.join(dir, "race");
      const env: NodeJS.ProcessEnv = { ...process.env, XDG_CACHE_HOME: cacheHome, LEDGER_LOG_LEVEL: "warn" };
      delete env.NODE_OPTIONS;
      delete env.DATABASE_URL;
      delete env.LEDGER_CONFIG;
      const serve = (db: string) =>
        new Promise<void>((resolve, reject) => {
          const child = spawn(process.execPath, [path.join(ROOT, "bin/ledger.js"), "serve", "--port", "0", "--db", db], {
            cwd: dir,
            env,
            stdio: ["ignore", "pipe", "pipe"],
          });
          let stdout = "";
          let stderr = "";
          child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
          child.stdout.setEncoding("utf8").on("data", async (chunk: string) => {
            stdout += chunk;
            const m = /listening on (\S+)/.exec(stdout);
            if (!m) return;
            child.stdout.removeAllListeners("data");
            try {
              const client = createClient(SessionService, createConnectTransport({ baseUrl: m[1]!, httpVersion: "1.1" }));
              await client.createSession({ directory: dir });
              resolve();
            } catch (error) {
              reject(error as Error);
            } finally {
              child.kill("SIGTERM");
            }
          });
          child.once("exit", (code) => reject(new Error(`ledger serve exited (${code}) before answering; stderr:\n${stderr}`)));
        });
      await Promise.all([serve(":memory:"), serve(path.join(dir, "race-db"))]);
      const cache = path.join(cacheHome, "session-ledger");
      expect(await entries(cache)).toEqual([templateKey()]);
      expect(await entries(path.join(cache, templateKey()))).toEqual(["pgdata", "pgdata.tar"]);
    },
    TIMEOUT,
  );
});
