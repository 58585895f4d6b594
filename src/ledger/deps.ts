import type { Kysely } from "kysely";
import type { LedgerConfig } from "../config/config.js";
import type { EventBus } from "../events/bus.js";
import type { PluginHost } from "../plugins/plugins.js";
import type { DB } from "../storage/schema.js";

/**
 * The stable dependencies of the ledger domain, built once at start and passed to every call:
 * the database, the in-process event bus, configuration and loaded plugins.
 */
export interface LedgerDeps {
  db: Kysely<DB>;
  bus: EventBus;
  config: LedgerConfig;
  plugins: PluginHost;
  /** The server's working directory: the default directory of new sessions. */
  cwd: string;
}
