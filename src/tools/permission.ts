import { isMatch } from "matcher";
import { PermissionAction as ProtoAction, type PermissionRule } from "../../gen/ledger/v1/session_pb.js";
import type { AgentInfo, AgentRule, PermissionAction } from "../config/agents.js";
import { configRules, coveredPermissions } from "../config/permission-config.js";
import type { ToolAsk } from "./tool-context.js";

/** One permission rule (see `AgentRule` in src/config/agents.ts; OpenCode `PermissionNext.Rule`). */
export type Rule = AgentRule;

/**
 * The rules of `agent`'s permission config, in the order they are weighed: `agent.rules` when the
 * config loader set them (built-in, top-level and agent layers), else its `permission` map
 * (`configRules`: the `"*"` entry first, then the others in the order written, one rule per
 * pattern; `edit` also covers `write` and `patch`). Follows OpenCode `PermissionNext.fromConfig`.
 */
export function agentRules(agent: Pick<AgentInfo, "permission" | "rules">): Rule[] {
  return agent.rules ?? configRules(agent.permission);
}

/**
 * A session's stored rules (`Session.permission`: a prompt's `tools` map, ALWAYS replies) as
 * rules, in order; an unspecified action counts as allow. A rule for `edit` also gives the same
 * rule for `write` and `patch` (`coveredPermissions`, as config rules do), so `tools: {"edit":
 * false}` disables every edit tool as in OpenCode (`PermissionNext.disabled`, `EDIT_TOOLS`).
 */
export function sessionRules(rules: readonly PermissionRule[]): Rule[] {
  return rules.flatMap((r) =>
    coveredPermissions(r.permission).map((permission) => ({
      permission,
      pattern: r.pattern || "*",
      action: r.action === ProtoAction.DENY ? ("deny" as const) : r.action === ProtoAction.ASK ? ("ask" as const) : ("allow" as const),
    })),
  );
}

/**
 * What happens to a call of `permission` on `pattern`: the action of the last rule matching both
 * (OpenCode `PermissionNext.evaluate`: `findLast`), `allow` when none matches (this service's
 * default; OpenCode asks).
 */
export function evaluate(rules: readonly Rule[], permission: string, pattern: string): PermissionAction {
  const rule = rules.findLast((r) => wildcard(permission, r.permission) && wildcard(pattern, r.pattern));
  return rule?.action ?? "allow";
}

/**
 * The decision for a call with several patterns (OpenCode asks once per call): `deny` when any
 * pattern is denied, else `ask` when any asks, else `allow`. No patterns count as `["*"]`.
 */
export function decide(rules: readonly Rule[], permission: string, patterns: readonly string[]): PermissionAction {
  const actions = (patterns.length > 0 ? patterns : ["*"]).map((p) => evaluate(rules, permission, p));
  if (actions.includes("deny")) return "deny";
  if (actions.includes("ask")) return "ask";
  return "allow";
}

/** Whether `rule` applies to the tool `permission` (its `permission` wildcard matches the name). */
export function namesTool(rule: Rule, permission: string): boolean {
  return wildcard(permission, rule.permission);
}

/**
 * The tools of `ids` denied outright, which the model is not offered at all: those whose last
 * rule naming them has the pattern `*` and the action `deny` (OpenCode `PermissionNext.disabled`
 * as its `resolveTools` applies it). A tool denied only on some patterns (`bash` on `rm *`) stays
 * offered; its calls are weighed one by one.
 */
export function disabledTools(rules: readonly Rule[], ids: readonly string[]): Set<string> {
  const disabled = new Set<string>();
  for (const id of ids) {
    const rule = rules.findLast((r) => namesTool(r, id));
    if (rule?.pattern === "*" && rule.action === "deny") disabled.add(id);
  }
  return disabled;
}

function wildcard(value: string, pattern: string): boolean {
  if (pattern === "*") return true;
  return isMatch(value, pattern, { caseSensitive: true });
}

/** Asks the user about one call (the ledger's `askPermission`); resolves when allowed, throws the rejection. */
export type Asker = (request: ToolAsk & { callId: string }, signal: AbortSignal) => Promise<void>;

/**
 * The rules a call of `agent` in a session is weighed against, in order: the agent's
 * `permission` config (`agentRules`), then the session's rules (a prompt's deprecated `tools`
 * map, ALWAYS replies), so with the last match winning the session's rules win. Follows OpenCode
 * `PermissionNext.merge(agent.permission, session.permission)`.
 */
export function permissionRules(agent: Pick<AgentInfo, "permission" | "rules">, rules: readonly PermissionRule[]): Rule[] {
  return [...agentRules(agent), ...sessionRules(rules)];
}

/**
 * Whether `agent` may use `toolName` at all in this session, weighed on the pattern `*`; `ask`
 * counts as no here (use {@link createTools}' asker to ask).
 */
export function isAllowed(agent: AgentInfo, rules: PermissionRule[], toolName: string): boolean {
  return decide(permissionRules(agent, rules), toolName, ["*"]) === "allow";
}

/**
 * Weighs one call against `rules` (see {@link createTools}): resolves when allowed, throws the
 * denial, or asks through `asker` (which throws the user's rejection).
 */
export async function checkPermission(
  agentName: string,
  rules: readonly Rule[],
  request: ToolAsk & { callId: string },
  signal: AbortSignal,
  asker: Asker | undefined,
): Promise<void> {
  const action = decide(rules, request.permission, request.patterns);
  if (action === "allow") return;
  const denied = () => {
    const on = request.patterns.filter((p) => p !== "*");
    return new Error(
      `permission denied: the ${agentName} agent may not use the ${request.permission} tool` +
        (on.length > 0 ? ` on ${on.map((p) => JSON.stringify(p)).join(", ")}` : ""),
    );
  };
  if (action === "deny" || !asker) throw denied();
  await asker(request, signal);
}
