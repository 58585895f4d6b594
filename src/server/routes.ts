import type { ConnectRouter } from "@connectrpc/connect";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import type { LedgerDeps } from "../ledger/deps.js";
import { createLedgerHandlers } from "./ledger-handlers.js";

/** Registers every service of the ledger on `router`. */
export function createRoutes(deps: LedgerDeps): (router: ConnectRouter) => void {
  return (router) => {
    router.service(SessionService, createLedgerHandlers(deps));
  };
}
