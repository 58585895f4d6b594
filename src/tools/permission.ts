import { isMatch } from "matcher";
import { PermissionAction as ProtoAction, type PermissionRule } from "../../gen/ledger/v1/session_pb.js";
import type { AgentInfo, PermissionAction } from "../config/agents.js";

/**
 * One permission rule: `action` for calls of the tool `permission` whose pattern (a file path
 * relative to the session directory, a bash command, ...) matches `pattern`. Both are wildcards
 * where `*` matches any characters, `/` and spaces included (the `matcher` library, case
 * sensitive). Follows OpenCode `PermissionNext.Rule`.
 */
export interface Rule {
  permission: string;
  pattern: string;
  action: PermissionAction;
}

/**
 * An agent's `permission` config as rules, in the order they are weighed: the top-level `"*"`
 * entry first (so any named tool overrides it, wherever it is written), then every other entry
 * in the order written; a tool given a pattern map (`"bash": {"git status*": "allow", "*":
 * "ask"}`) contributes one rule per pattern in order, a plain action one rule with pattern `*`.
 * Follows OpenCode `PermissionNext.fromConfig`.
 */
export function agentRules(agent: Pick<AgentInfo, "permission">): Rule[] {
  const entries = Object.entries(agent.permission);
  const ordered = [...entries.filter(([k]) => k === "*"), ...entries.filter(([k]) => k !== "*")];
  return ordered.flatMap(([permission, value]) =>
    typeof value === "string"
      ? [{ permission, pattern: "*", action: value }]
      : Object.entries(value).map(([pattern, action]) => ({ permission, pattern, action })),
  );
}

/** A session's stored rules (`Session.permission`) as rules; an unspecified action counts as allow. */
export function sessionRules(rules: readonly PermissionRule[]): Rule[] {
  return rules.map((r) => ({
    permission: r.permission,
    pattern: r.pattern || "*",
    action: r.action === ProtoAction.DENY ? "deny" : r.action === ProtoAction.ASK ? "ask" : "allow",
  }));
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

function wildcard(value: string, pattern: string): boolean {
  if (pattern === "*") return true;
  return isMatch(value, pattern, { caseSensitive: true });
}
