import { mkdtemp, realpath, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll } from "vitest";
import type { RunningLedger } from "../../src/app.js";
import { createTestDatabase, type TestDatabase } from "./db.js";
import { startFakeOpenAI, type FakeOpenAI } from "./openai-server.js";

/** What in-process replicas of one test file share: a working directory, a Postgres database, a scripted model. */
export interface ReplicaShared {
  dir: string;
  database: TestDatabase;
  fake: FakeOpenAI;
}

/**
 * Registers the file's `beforeAll`/`afterAll` for in-process ledgers on one Postgres database
 * (when `enabled`; PGlite serves one process): a fresh temporary directory (named `prefix…`),
 * database and fake OpenAI server, handed to `use` once made; after the file, every ledger
 * pushed on the returned list is closed (newest first, 1 s grace) and the rest is removed.
 */
export function replicaLifecycle(prefix: string, enabled: boolean, use: (shared: ReplicaShared) => void): RunningLedger[] {
  const running: RunningLedger[] = [];
  let shared: ReplicaShared | undefined;
  beforeAll(async () => {
    if (!enabled) return;
    const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), prefix)));
    shared = { dir, database: await createTestDatabase("postgres"), fake: await startFakeOpenAI() };
    use(shared);
  });
  afterAll(async () => {
    for (const r of running.reverse()) await r.close(1000);
    await shared?.fake.close();
    await shared?.database.drop();
    if (shared) await rm(shared.dir, { recursive: true, force: true });
  });
  return running;
}
