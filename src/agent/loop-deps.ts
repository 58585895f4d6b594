import type { LedgerDeps } from "../ledger/deps.js";
import type { TaskRunner } from "../tools/task.js";
import type { ModelResolver } from "./providers.js";

/** What the loop needs besides the ledger: models, and how to run a subagent task. */
export interface LoopDeps extends LedgerDeps {
  models: ModelResolver;
  /** Runs a subagent in a child session (the task tool); absent inside subagents. */
  runTask?: (parentSessionId: string) => TaskRunner;
}
