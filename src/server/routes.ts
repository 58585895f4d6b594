import type { ConnectRouter } from "@connectrpc/connect";
import { file_google_rpc_error_details } from "../../gen/google/rpc/error_details_pb.js";
import { file_google_rpc_status } from "../../gen/google/rpc/status_pb.js";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import type { LedgerDeps } from "../ledger/deps.js";
import type { Drain } from "./drain.js";
import { createHealthHandlers } from "./health.js";
import { createLedgerHandlers } from "./ledger-handlers.js";
import { guardSessionService } from "./guard.js";
import { createReflectionHandlers, ServerReflection, ServerReflectionV1Alpha } from "./reflection.js";

/**
 * Registers every service of the ledger on `router`: `ledger.v1.SessionService`, gRPC health
 * (`grpc.health.v1.Health`, no token needed) and server reflection (`grpc.reflection.v1` and
 * `v1alpha`, which describe all four, plus `google.rpc` error details for decoding errors).
 * With `options.drain`, health answers `NOT_SERVING` once it drains (the drain's interceptor
 * does the rest, see `drain.ts`).
 */
export function createRoutes(deps: LedgerDeps, options: { drain?: Drain } = {}): (router: ConnectRouter) => void {
  const drain = options.drain;
  const reflection = createReflectionHandlers(
    [SessionService, Health, ServerReflection, ServerReflectionV1Alpha],
    [file_google_rpc_error_details, file_google_rpc_status],
  );
  return (router) => {
    router.service(SessionService, guardSessionService(deps, createLedgerHandlers(deps)));
    router.service(Health, createHealthHandlers(deps, { draining: drain ? () => drain.draining : undefined }));
    router.service(ServerReflection, reflection.v1);
    router.service(ServerReflectionV1Alpha, reflection.v1alpha);
  };
}
