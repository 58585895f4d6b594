import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { toBinary } from "@bufbuild/protobuf";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { checkSessionAccess } from "../ledger/access.js";
import type { LedgerDeps } from "../ledger/deps.js";
import { checkPromptQuotas } from "../ledger/quotas.js";
import { SESSION_SERVICE_ACCESS } from "./access.js";
import { principalKey } from "./auth.js";

type Method = keyof ServiceImpl<typeof SessionService>;
type Request = { sessionId?: string; parentId?: string; noReply?: boolean };
type AnyHandler = (req: Request, ctx: HandlerContext) => unknown;

/**
 * The methods that store a user prompt, counted in `prompts_per_minute` (docs/security.md,
 * "Quotas"); `loop`: it starts an agent loop unless the request says `no_reply`, so
 * `concurrent_loops` applies.
 */
const PROMPTING: ReadonlyMap<Method, { loop: boolean }> = new Map<Method, { loop: boolean }>([
  ["prompt", { loop: true }],
  ["promptStream", { loop: true }],
  ["promptAsync", { loop: true }],
  ["command", { loop: true }],
  ["shell", { loop: false }],
]);

/**
 * Wraps every method of `impl` with its access check (docs/security.md, "Who may see which
 * session"), before the handler reads or writes anything: a method on one session
 * (`SESSION_SERVICE_ACCESS[...].resource === "session"`) checks the caller may use
 * `session_id`; `CreateSession` with a `parent_id` checks the parent. What the caller may not see
 * answers exactly as a missing session: `NOT_FOUND` (`SessionNotFoundError`). Lists filter in
 * their handlers. Then a method that stores a prompt ({@link PROMPTING}) checks and counts the
 * caller's quotas (`checkPromptQuotas`: RESOURCE_EXHAUSTED `QuotaExceededError`, nothing
 * stored). Server-streaming methods check before their first message.
 */
export function guardSessionService(
  deps: Pick<LedgerDeps, "db" | "config" | "metrics">,
  impl: ServiceImpl<typeof SessionService>,
): ServiceImpl<typeof SessionService> {
  const guarded: Record<string, AnyHandler> = {};
  for (const method of SessionService.methods) {
    const name = method.localName as Method;
    const handler = impl[name] as unknown as AnyHandler;
    const rule = SESSION_SERVICE_ACCESS[name];
    const prompting = PROMPTING.get(name);
    const check = async (req: Request, ctx: HandlerContext) => {
      const principal = ctx.values.get(principalKey);
      if (rule.resource === "session") await checkSessionAccess(deps, principal, req.sessionId ?? "");
      else if (rule.resource === "create" && req.parentId) await checkSessionAccess(deps, principal, req.parentId, "parent_id");
      if (prompting)
        await checkPromptQuotas(deps, principal, {
          sessionId: req.sessionId ?? "",
          startsLoop: prompting.loop && !req.noReply,
          bytes: () => toBinary(method.input, req as never).length,
        });
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
