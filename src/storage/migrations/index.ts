import type { Migration } from "kysely/migration";
import * as createLedger from "./2026-11-30T0200-create-ledger.js";
import * as eventRetention from "./2026-11-30T0300-event-retention.js";
import * as eventDataBytes from "./2026-11-30T2200-event-data-bytes.js";
import * as messageParentId from "./2026-12-02T0900-message-parent-id.js";
import * as permissionRequest from "./2026-12-05T0900-permission-request.js";
import * as sessionMessageCount from "./2026-12-05T0900-session-message-count.js";
import * as sessionTodo from "./2026-12-06T0900-session-todo.js";
import * as sessionOwner from "./2026-12-07T0900-session-owner.js";
import * as quotaUsage from "./2026-12-08T0900-quota-usage.js";
import * as messagePartDataBytes from "./2026-12-09T0900-message-part-data-bytes.js";
import * as dataBytesBackfill from "./2026-12-10T0900-data-bytes-backfill.js";

/**
 * Every migration, listed statically (not `FileMigrationProvider`) so tsx, vitest and compiled
 * JS see the same list. Keys sort in the order they run; never rename or edit a shipped one.
 */
export const migrations: Record<string, Migration> = {
  "2026-11-30T0200-create-ledger": createLedger,
  "2026-11-30T0300-event-retention": eventRetention,
  "2026-11-30T2200-event-data-bytes": eventDataBytes,
  "2026-12-02T0900-message-parent-id": messageParentId,
  "2026-12-05T0900-permission-request": permissionRequest,
  "2026-12-05T0900-session-message-count": sessionMessageCount,
  "2026-12-06T0900-session-todo": sessionTodo,
  "2026-12-07T0900-session-owner": sessionOwner,
  "2026-12-08T0900-quota-usage": quotaUsage,
  "2026-12-09T0900-message-part-data-bytes": messagePartDataBytes,
  "2026-12-10T0900-data-bytes-backfill": dataBytesBackfill,
};
