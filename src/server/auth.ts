import { createHash, timingSafeEqual } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { ERROR_DOMAIN } from "./errors.js";

/** Services callable without a token (load balancers probe health). */
const PUBLIC_SERVICES = new Set(["grpc.health.v1.Health"]);

/**
 * Requires `authorization: Bearer <token>` on every RPC except health checks. The comparison is
 * constant-time (SHA-256 digests compared with `timingSafeEqual`), so response time does not
 * reveal how much of a guess was right. Missing or wrong → `UNAUTHENTICATED` with an `ErrorInfo`
 * (reason `TOKEN_MISSING` or `TOKEN_INVALID`); the token is never echoed or logged.
 */
export function bearerAuth(token: string): Interceptor {
  const expected = digest(token);
  return (next) => async (req) => {
    if (PUBLIC_SERVICES.has(req.service.typeName)) return next(req);
    const header = req.header.get("authorization") ?? "";
    const match = /^Bearer\s+(.+)$/i.exec(header.trim());
    if (!match)
      throw unauthenticated("TOKEN_MISSING", "authorization: a bearer token is required (header `authorization: Bearer <token>`)");
    if (!timingSafeEqual(digest(match[1]!), expected))
      throw unauthenticated("TOKEN_INVALID", "authorization: the bearer token is not valid");
    return next(req);
  };
}

/** True for addresses only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

function digest(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}

function unauthenticated(reason: string, message: string): ConnectError {
  return new ConnectError(message, Code.Unauthenticated, undefined, [
    { desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason, domain: ERROR_DOMAIN }) },
  ]);
}
