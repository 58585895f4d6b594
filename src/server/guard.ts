import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { checkSessionAccess } from "../ledger/access.js";
import type { LedgerDeps } from "../ledger/deps.js";
import { SESSION_SERVICE_ACCESS } from "./access.js";
import { principalKey } from "./auth.js";

type Method = keyof ServiceImpl<typeof SessionService>;
type AnyHandler = (req: { sessionId?: string; parentId?: string }, ctx: HandlerContext) => unknown;

/**
 * Wraps every method of `impl` with its access check (docs/security.md, "Who may see which
 * session"), before the handler reads or writes anything: a method on one session
 * (`SESSION_SERVICE_ACCESS[...].resource === "session"`) checks the caller may use
 * `session_id`; `CreateSession` with a `parent_id` checks the parent. What the caller may not see
 * answers exactly as a missing session: `NOT_FOUND` (`SessionNotFoundError`). Lists filter in
 * their handlers. Server-streaming methods check before their first message.
 */
export function guardSessionService(
  deps: Pick<LedgerDeps, "db" | "config">,
  impl: ServiceImpl<typeof SessionService>,
): ServiceImpl<typeof SessionService> {
  const guarded: Record<string, AnyHandler> = {};
  for (const method of SessionService.methods) {
    const name = method.localName as Method;
    const handler = impl[name] as unknown as AnyHandler;
    const rule = SESSION_SERVICE_ACCESS[name];
    const check = async (req: { sessionId?: string; parentId?: string }, ctx: HandlerContext) => {
      const principal = ctx.values.get(principalKey);
      if (rule.resource === "session") await checkSessionAccess(deps, principal, req.sessionId ?? "");
      else if (rule.resource === "create" && req.parentId) await checkSessionAccess(deps, principal, req.parentId, "parent_id");
    };
    guarded[name] =
      method.methodKind === "server_streaming"
        ? async function* (req, ctx) {
            await check(req, ctx);
            yield* handler(req, ctx) as AsyncIterable<unknown>;
          }
        : async (req, ctx) => {
            await check(req, ctx);
            return handler(req, ctx);
          };
  }
  return guarded as unknown as ServiceImpl<typeof SessionService>;
}
