import { mkdtemp, realpath, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createClient, createRouterTransport, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { createValidateInterceptor } from "@connectrpc/validate";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import type { ModelResolver } from "../../src/agent/providers.js";
import { startLedger, type RunningLedger } from "../../src/app.js";
import { buildConfig, configFileSchema } from "../../src/config/config.js";
import { errorInterceptor } from "../../src/server/errors.js";
import { createRoutes } from "../../src/server/routes.js";
import type { WebPage } from "../../src/server/web-page.js";
import type { TracingOptions } from "../../src/observe/tracing.js";
import { createTestDatabase, type TestDatabase } from "./db.js";
import { compatibleProvider } from "./mock-models.js";
import { startFakeOpenAI, type FakeOpenAI } from "./openai-server.js";

/** A real ledger on a loopback port with its own database and a temporary project directory. */
export interface TestLedger {
  ledger: RunningLedger;
  /** A client of the ledger over the transport chosen (see {@link TestLedgerOptions.transport}). */
  client: Client<typeof SessionService>;
  /** A fresh temporary directory (resolved): the directory tests give new sessions. */
  dir: string;
  database: TestDatabase;
  close(): Promise<void>;
}

/** How {@link startTestLedger} builds the ledger and its client. */
export interface TestLedgerOptions {
  /** Replaces the providers of the config (e.g. `mockResolver` from ./mock-models.ts). */
  models?: ModelResolver;
  /**
   * What `client` talks through. "memory" (the default, for handler and domain tests): connect-es's
   * in-memory `createRouterTransport` over the server's own routes with its error mapping and
   * request validation (`errorInterceptor`, protovalidate) — the same handlers, codes, messages and
   * error details, without a socket. "http": a Connect client over HTTP/1.1 with JSON to the real
   * server, for tests where the network path matters (auth, request logging and metrics,
   * protocols, limits, shutdown of open streams). `ledger.url` serves either way.
   */
  transport?: "memory" | "http";
  /** The browser page the server serves at `/` (see `loadWebPage`); absent: none. */
  web?: WebPage;
  /** Options of the tracing a `telemetry` config starts (e.g. in-memory span processors). */
  tracing?: TracingOptions;
}

/**
 * Starts a ledger for one test file: a new database (engine from `LEDGER_TEST_DB`), `config`
 * as the raw ledger.json object, relative config paths against a new temp dir. Call `close()` in `afterAll`.
 */
export async function startTestLedger(config: Record<string, unknown> = {}, options: TestLedgerOptions = {}): Promise<TestLedger> {
  const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-test-")));
  const database = await createTestDatabase();
  const ledger = await startLedger({
    config: buildConfig(configFileSchema.parse(config), undefined, dir),
    database: database.target,
    models: options.models,
    web: options.web,
    tracing: options.tracing,
  });
  const transport: Transport =
    options.transport === "http"
      ? createConnectTransport({ baseUrl: ledger.url, httpVersion: "1.1", useBinaryFormat: false })
      : createRouterTransport(createRoutes(ledger.deps), { router: { interceptors: [errorInterceptor, createValidateInterceptor()] } });
  const client = createClient(SessionService, transport);
  return {
    ledger,
    client,
    dir,
    database,
    async close() {
      // The test's calls are done: no request is on its way (test/server/drain.test.ts closes with the default).
      await ledger.close(1000, { quietMs: 0 });
      await database.drop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A {@link TestLedger} answered by a fake OpenAI server of its own; see {@link startFakeModelLedger}. */
export interface FakeModelLedger extends TestLedger {
  /** The model server: script its replies with `push`, read what it was sent in `requests`. */
  fake: FakeOpenAI;
}

/**
 * Starts a fake OpenAI server (./openai-server.ts) and a test ledger whose default model is that
 * server's model "m", configured as provider `provider` (default "fake", API key "test"), with
 * the rest of `config` and `options` as {@link startTestLedger} takes them; `options.modelConfig`
 * is the model's entry in the provider's `models` (e.g. `{ limit: { context, output } }`).
 * `close()` closes the ledger, then the server.
 */
export async function startFakeModelLedger(
  config: Record<string, unknown> = {},
  options: TestLedgerOptions & { provider?: string; modelConfig?: Record<string, unknown> } = {},
): Promise<FakeModelLedger> {
  const provider = options.provider ?? "fake";
  const fake = await startFakeOpenAI();
  const t = await startTestLedger(
    { model: `${provider}/m`, provider: { [provider]: compatibleProvider(fake.url, { m: options.modelConfig ?? {} }, "test") }, ...config },
    options,
  ).catch(async (error: unknown) => {
    await fake.close();
    throw error;
  });
  return {
    ...t,
    fake,
    async close() {
      await t.close();
      await fake.close();
    },
  };
}
