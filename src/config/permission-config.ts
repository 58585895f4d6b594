import { z } from "zod";
import type { AgentRule, PermissionAction, PermissionSetting } from "./agents.js";

const permissionAction = z.enum(["allow", "deny", "ask"]);
/** A tool's permission: one action, or an action per pattern (`{"git status*": "allow", "*": "ask"}`). */
const permissionSetting = z.union([permissionAction, z.record(z.string(), permissionAction)]);

/**
 * `permission` (top level or of an agent), as in opencode.json: tool (or wildcard, `"mymcp_*"`)
 * → setting, or one action for every tool (`"permission": "ask"` = `{"*": "ask"}`).
 */
export const permissionSchema = z.union([permissionAction, z.record(z.string(), permissionSetting)]);

/** `tools` (top level or of an agent), OpenCode's deprecated form: tool (or wildcard) → enabled. */
export const toolsSchema = z.record(z.string(), z.boolean());

/**
 * The tools OpenCode checks under the `edit` permission (its `EDIT_TOOLS`): a `tools` entry for
 * any of them sets `edit`, and an `edit` permission covers them all here too.
 */
export const EDIT_TOOLS = ["edit", "write", "patch", "multiedit"] as const;

/**
 * The permissions a rule for `permission` covers here: `edit` → `edit`, `write`, `patch` (OpenCode
 * checks all its edit tools under `edit`, while this service's `write` asks under its own name),
 * any other → itself. The one mapping for config rules ({@link configRules}), session rules (a
 * prompt's `tools` map, ALWAYS replies; `sessionRules` in src/tools/permission.ts). Follows
 * OpenCode `PermissionNext.disabled` (`EDIT_TOOLS`).
 */
export function coveredPermissions(permission: string): string[] {
  return permission === "edit" ? ["edit", "write", "patch"] : [permission];
}

/**
 * One `permission` + `tools` pair (top level, or one agent's) as a permission map, the way
 * OpenCode's config reads them: each `tools` entry becomes `allow` (true) or `deny` (false) for
 * that tool, where `write`, `edit`, `patch` and `multiedit` all set `edit`; then `permission`'s
 * entries are laid over it (they win; a key keeps its first position). A string `permission` is
 * `{"*": action}`. Follows OpenCode `Config.Agent`'s transform and `Config.state` (legacy `tools`).
 */
export function configPermission(
  tools: Record<string, boolean> | undefined,
  permission: PermissionAction | Record<string, PermissionSetting> | undefined,
): Record<string, PermissionSetting> {
  const out: Record<string, PermissionSetting> = {};
  for (const [tool, enabled] of Object.entries(tools ?? {})) {
    out[(EDIT_TOOLS as readonly string[]).includes(tool) ? "edit" : tool] = enabled ? "allow" : "deny";
  }
  Object.assign(out, typeof permission === "string" ? { "*": permission } : (permission ?? {}));
  return out;
}

/**
 * A permission map as rules, in the order they are weighed (the last match wins): the `"*"`
 * entry first (so any named tool overrides it, wherever it is written: a deliberate difference,
 * OpenCode keeps the order written), then every other entry in the order written; a pattern map
 * (`"bash": {"git status*": "allow", "*": "ask"}`) gives one rule per pattern in order, a plain
 * action one rule with pattern `*`. An `edit` entry also gives the same rules for `write` and
 * `patch` ({@link coveredPermissions}) unless the map has its own entry for them (a ledger.json
 * may set them apart). Follows OpenCode `Permission.fromConfig`.
 */
export function configRules(permission: Record<string, PermissionSetting>): AgentRule[] {
  const entries = Object.entries(permission);
  const ordered = [...entries.filter(([k]) => k === "*"), ...entries.filter(([k]) => k !== "*")];
  return ordered.flatMap(([tool, value]) =>
    coveredPermissions(tool)
      .filter((name) => name === tool || !Object.hasOwn(permission, name))
      .flatMap((name) =>
        typeof value === "string"
          ? [{ permission: name, pattern: "*", action: value }]
          : Object.entries(value).map(([pattern, action]) => ({ permission: name, pattern, action })),
      ),
  );
}

/**
 * Warnings about a `"*"` written after other entries, where this service and OpenCode may read
 * the map differently or a user may not expect what it means:
 * - in a pattern map, `"*"` after more specific patterns overrides them (the last matching
 *   pattern wins, as in OpenCode: `{"git push": "ask", "*": "allow"}` allows `git push`):
 *   `permission.bash: "*" is written after "git push" and wins over it (the last matching pattern
 *   wins, as in OpenCode); write "*" first`;
 * - in a `permission` or `tools` map (top level or an agent's), `"*"` after named tools is still
 *   weighed first here, so the named tools win (OpenCode weighs the order written, so there
 *   `{"edit": "allow", "*": "deny"}` denies edit; here it allows it):
 *   `permission: "*" is written after "edit" but is weighed before it here, so "edit" keeps its
 *   own setting (OpenCode weighs the order written: there "*" would override it); write "*" first`.
 * One message per such map, naming its key path (`where`, e.g. `agent.review.permission`).
 */
export function wildcardLastWarnings(
  maps: readonly (readonly [string, PermissionAction | Record<string, PermissionSetting | boolean> | undefined])[],
): string[] {
  const out: string[] = [];
  const quoted = (keys: string[]) => keys.map((p) => JSON.stringify(p)).join(", ");
  for (const [where, map] of maps) {
    if (!map || typeof map === "string") continue;
    const tools = Object.keys(map);
    const star = tools.indexOf("*");
    if (star > 0) {
      const before = tools.slice(0, star);
      const them = before.length > 1 ? "them" : "it";
      out.push(
        `${where}: "*" is written after ${quoted(before)} but is weighed before ${them} here, so ${before.length > 1 ? "they keep their" : `${quoted(before)} keeps its`} own setting (OpenCode weighs the order written: there "*" would override ${them}); write "*" first`,
      );
    }
    for (const [tool, setting] of Object.entries(map)) {
      if (typeof setting !== "object") continue;
      const patterns = Object.keys(setting);
      const starAt = patterns.indexOf("*");
      if (starAt <= 0) continue;
      const before = patterns.slice(0, starAt);
      out.push(
        `${where}.${tool}: "*" is written after ${quoted(before)} and wins over ${before.length > 1 ? "them" : "it"} (the last matching pattern wins, as in OpenCode); write "*" first`,
      );
    }
  }
  return out;
}
