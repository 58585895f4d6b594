import { mkdtemp, realpath, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import type { ModelResolver } from "../../src/agent/providers.js";
import { startLedger, type RunningLedger } from "../../src/app.js";
import { buildConfig, configFileSchema } from "../../src/config/config.js";
import { createTestDatabase, type TestDatabase } from "./db.js";

/** A real ledger on a loopback port with its own database and a temporary project directory. */
export interface TestLedger {
  ledger: RunningLedger;
  /** Connect client over HTTP/1.1 with JSON. */
  client: Client<typeof SessionService>;
  /** A fresh temporary directory (resolved): the directory tests give new sessions. */
  dir: string;
  database: TestDatabase;
  close(): Promise<void>;
}

/**
 * Starts a ledger for one test file: a new database (engine from `LEDGER_TEST_DB`), `config`
 * as the raw ledger.json object, relative config paths against a new temp dir. `options.models` replaces the
 * providers of `config` (e.g. `mockResolver` from ./mock-models.ts). Call `close()` in `afterAll`.
 */
export async function startTestLedger(config: Record<string, unknown> = {}, options: { models?: ModelResolver } = {}): Promise<TestLedger> {
  const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-test-")));
  const database = await createTestDatabase();
  const ledger = await startLedger({
    config: buildConfig(configFileSchema.parse(config), undefined, dir),
    database: database.target,
    models: options.models,
  });
  const client = createClient(SessionService, createConnectTransport({ baseUrl: ledger.url, httpVersion: "1.1", useBinaryFormat: false }));
  return {
    ledger,
    client,
    dir,
    database,
    async close() {
      await ledger.close(1000);
      await database.drop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
