import { mkdir, mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PermissionAction as ProtoAction, type PermissionRule } from "../../gen/ledger/v1/session_pb.js";
import { buildConfig, CONFIG_FILE_NAMES, ConfigError, configFileSchema, loadConfig, readConfigText } from "../../src/config/config.js";
import { substituteVariables } from "../../src/config/variables.js";
import { decide, permissionRules } from "../../src/tools/permission.js";

// Issue 20: an opencode.json means here what it means in OpenCode (supported keys), says what it
// does not (ignored keys, one warning), and refuses what nobody knows (unknown keys).

const FIXTURE_DIR = path.resolve(import.meta.dirname, "fixtures/opencode");
const FIXTURE = path.join(FIXTURE_DIR, "opencode.json");

let dir: string;
beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-opencode-config-")));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** A fresh directory under `dir` holding `files` (name → content). */
async function place(files: Record<string, string>): Promise<string> {
  const where = await mkdtemp(path.join(dir, "case-"));
  for (const [name, content] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(where, name)), { recursive: true });
    await writeFile(path.join(where, name), content);
  }
  return where;
}

const r = (permission: string, pattern: string, action: "allow" | "deny" | "ask") => ({ permission, pattern, action });
const REVIEW_PROMPT =
  "You are in code review mode. Focus on:\n\n- Code quality and best practices\n- Potential bugs and edge cases\n- Performance implications\n- Security considerations\n\nProvide constructive feedback without making direct changes.";

describe("a realistic opencode.json (written from OpenCode's docs)", () => {
  const config = () => loadConfig({ explicitPath: FIXTURE, cwd: dir, env: { ANTHROPIC_API_KEY: "sk-test" } });

  it("gives the effective agents: the top-level permission on every agent, the agent's tools map as deny rules after it", () => {
    const agents = Object.fromEntries(config().agents);
    expect(Object.keys(agents)).toEqual(["build", "plan", "explore", "review", "docs"]);
    const global = [
      r("edit", "*", "ask"),
      r("write", "*", "ask"),
      r("patch", "*", "ask"),
      r("bash", "git push", "ask"),
      r("bash", "*", "allow"),
    ];
    expect(agents.build!.rules).toEqual([r("*", "*", "allow"), ...global]);
    expect(agents.plan!.rules).toEqual([
      r("*", "*", "allow"),
      r("edit", "*", "deny"),
      r("write", "*", "deny"),
      r("patch", "*", "deny"),
      r("bash", "*", "deny"),
      ...global,
    ]);
    expect(agents.explore!.rules).toEqual([
      r("*", "*", "allow"),
      r("edit", "*", "deny"),
      r("write", "*", "deny"),
      r("patch", "*", "deny"),
      r("bash", "*", "deny"),
      r("todowrite", "*", "deny"),
      r("todoread", "*", "deny"),
      ...global,
    ]);
    expect(agents.review).toEqual({
      name: "review",
      description: "Reviews code for best practices and potential issues",
      mode: "subagent",
      hidden: false,
      builtIn: false,
      model: { providerId: "anthropic", modelId: "claude-sonnet-4-5" },
      prompt: REVIEW_PROMPT,
      temperature: 0.1,
      topP: 0.9,
      steps: 5,
      permission: { "*": "allow", edit: "deny", bash: { "git push": "ask", "*": "allow" } },
      // "tools": {"write": false, "edit": false} → edit: deny, which covers write and patch.
      rules: [r("*", "*", "allow"), ...global, r("edit", "*", "deny"), r("write", "*", "deny"), r("patch", "*", "deny")],
    });
    expect(agents.docs).toEqual({
      name: "docs",
      description: "Writes documentation",
      mode: "primary",
      hidden: false,
      builtIn: false,
      model: { providerId: "ollama", modelId: "qwen2.5-coder:7b" },
      steps: 8, // maxSteps, OpenCode's older name
      options: { num_predict: 2048 },
      permission: { "*": "allow", edit: "ask", bash: "deny", "mymcp_*": "deny", webfetch: "deny" },
      rules: [r("*", "*", "allow"), ...global, r("bash", "*", "deny"), r("mymcp_*", "*", "deny"), r("webfetch", "*", "deny")],
    });
  });

  it("gives the model, providers (limits and options) and commands", () => {
    const c = config();
    expect(c.source).toBe(FIXTURE);
    expect(c.model).toEqual({ providerId: "anthropic", modelId: "claude-sonnet-4-5" });
    expect(c.defaultAgent).toBe("build");
    expect(c.providers).toEqual({
      anthropic: {
        options: { apiKey: "sk-test" },
        models: { "claude-sonnet-4-5": { variants: {}, limit: { context: 200000, output: 64000 }, options: {} } },
      },
      ollama: {
        npm: "@ai-sdk/openai-compatible",
        name: "Ollama (local)",
        options: { baseURL: "http://localhost:11434/v1" },
        models: {
          "qwen2.5-coder:7b": {
            name: "Qwen 2.5 Coder 7B",
            variants: {},
            limit: { context: 32768, output: 8192 },
            options: { num_ctx: 32768 },
          },
        },
      },
    });
    expect(c.commands).toEqual({
      test: {
        template: "Run the full test suite with coverage report and show any failures.\nFocus on the failing tests and suggest fixes.",
        description: "Run tests with coverage",
        agent: "build",
        model: { providerId: "anthropic", modelId: "claude-sonnet-4-5" },
        subtask: undefined,
      },
      component: {
        template: "Create a new React component named $ARGUMENTS with TypeScript support.",
        description: "Create a new component",
        agent: undefined,
        model: undefined,
        subtask: true,
      },
    });
    expect(readConfigText("{}", FIXTURE).config.instructions).toEqual([]);
    expect(readConfigText('{ "instructions": ["CONTRIBUTING.md"] }', FIXTURE).config.instructions).toEqual(["CONTRIBUTING.md"]);
  });

  it('warns once about the ignored keys, each with its reason, and about a "*" written last', () => {
    expect(config().warnings).toEqual([
      [
        `${FIXTURE}: these OpenCode keys are ignored (docs/opencode-migration.md):`,
        "  theme: the colour theme of OpenCode's terminal UI; this service has no terminal UI",
        "  keybinds: key bindings of OpenCode's terminal UI; this service has no terminal UI",
        "  tui: settings of OpenCode's terminal UI; this service has no terminal UI",
        "  autoupdate: OpenCode updating itself; this service is updated by its deployment",
        "  share: sharing sessions on opencode.ai; not offered here",
        "  username: the name OpenCode's terminal UI shows; this service has no terminal UI (callers are known by their token)",
        "  small_model: the model OpenCode uses for titles; this service writes no titles, and compaction uses the session's model",
        "  formatter: OpenCode runs formatters after edits; this service does not",
        "  lsp: OpenCode's language servers; none are run here",
        "  watcher: ignore globs of OpenCode's file watcher; not configurable here",
        "  snapshot: OpenCode's on/off switch; here snapshots are taken whenever an agent may change files (snapshot is {dir, max_bytes, max_files})",
        "  agent.review.color: the agent's colour in OpenCode's terminal UI; this service has no terminal UI",
        "  provider.anthropic.options.timeout: only baseURL, apiKey and headers of a provider's options are used here",
      ].join("\n"),
      `${FIXTURE}: permission.bash: "*" is written after "git push" and wins over it (the last matching pattern wins, as in OpenCode); write "*" first`,
    ]);
  });

  it('warns about a "*" written after named tools in a permission or tools map: named tools keep their setting here, OpenCode lets "*" override them', () => {
    const read = readConfigText(
      '{ "permission": { "edit": "allow", "*": "deny" }, "tools": { "*": false, "read": true }, "agent": { "a": { "tools": { "read": true, "bash": false, "*": false }, "permission": { "*": "ask", "bash": { "ls": "allow", "*": "deny" } } } } }',
      "opencode.json",
    );
    expect(read.warnings).toEqual([
      'opencode.json: permission: "*" is written after "edit" but is weighed before it here, so "edit" keeps its own setting (OpenCode weighs the order written: there "*" would override it); write "*" first',
      'opencode.json: agent.a.tools: "*" is written after "read", "bash" but is weighed before them here, so they keep their own setting (OpenCode weighs the order written: there "*" would override them); write "*" first',
      'opencode.json: agent.a.permission.bash: "*" is written after "ls" and wins over it (the last matching pattern wins, as in OpenCode); write "*" first',
    ]);
  });

  it("a variant's disabled flag is set aside, not sent to the provider as an option", () => {
    const read = readConfigText(
      '{ "provider": { "p": { "models": { "m": { "variants": { "high": { "reasoningEffort": "high" }, "low": { "disabled": true } } } } } } }',
      "opencode.json",
    );
    expect(read.config.provider.p!.models.m!.variants).toEqual({ high: { reasoningEffort: "high" }, low: {} });
    expect(read.ignored).toEqual([
      {
        path: "provider.p.models.m.variants.low.disabled",
        reason: "OpenCode hides a disabled variant; here every configured variant is offered (remove it instead)",
      },
    ]);
  });

  it("a ledger.json without OpenCode keys gives no warning", async () => {
    const where = await place({
      "ledger.json": '{ "agent": { "build": { "permission": { "bash": { "*": "ask", "git status*": "allow" } } } } }',
    });
    expect(loadConfig({ cwd: where, env: {} }).warnings).toEqual([]);
  });

  it("warns about providers that would silently call a local Ollama (no npm, no baseURL: OpenCode reads them from models.dev)", async () => {
    const where = await place({
      "opencode.json": JSON.stringify({
        model: "openrouter/qwen",
        provider: {
          openrouter: { models: { qwen: {} } },
          groq: { options: { apiKey: "k" }, models: { llama: {} } },
          anthropic: { models: { "claude-sonnet-4-5": {} } },
          ollama: { options: { baseURL: "http://127.0.0.1:11434/v1" }, models: { q: {} } },
          vllm: { npm: "@ai-sdk/openai-compatible", options: { baseURL: "http://gpu:8000/v1" }, models: { m: {} } },
        },
      }),
    });
    expect(loadConfig({ cwd: where, env: {} }).warnings).toEqual([
      `${path.join(where, "opencode.json")}: provider.openrouter, provider.groq: no "npm" and no "options.baseURL", so their models are ` +
        "called as @ai-sdk/openai-compatible at http://127.0.0.1:11434/v1 (a local Ollama); OpenCode takes a provider's package and " +
        'address from models.dev, which is not read here: give "npm" and "options.baseURL"',
    ]);
  });
});

describe("discovery", () => {
  it("looks for ledger.json, ledger.jsonc, opencode.json, opencode.jsonc in the working directory, in that order", async () => {
    expect(CONFIG_FILE_NAMES).toEqual(["ledger.json", "ledger.jsonc", "opencode.json", "opencode.jsonc"]);
    const all = {
      "ledger.json": '{ "default_agent": "plan" }',
      "ledger.jsonc": '{ "agent": { "two": {} }, "default_agent": "two" }',
      "opencode.json": '{ "agent": { "three": {} }, "default_agent": "three" }',
      "opencode.jsonc": '{ "default_agent": "build" }',
    };
    const names = Object.keys(all) as (keyof typeof all)[];
    for (let i = 0; i < names.length; i++) {
      const where = await place(Object.fromEntries(names.slice(i).map((n) => [n, all[n]])));
      const config = loadConfig({ cwd: where, env: {} });
      expect(config.source).toBe(path.join(where, names[i]!));
    }
  });

  it("--config and LEDGER_CONFIG win over a discovered file", async () => {
    const where = await place({
      "opencode.json": '{ "default_agent": "plan" }',
      "other.json": '{ "agent": { "mine": {} }, "default_agent": "mine" }',
    });
    expect(loadConfig({ cwd: where, env: { LEDGER_CONFIG: "other.json" } }).defaultAgent).toBe("mine");
    expect(loadConfig({ cwd: where, env: {}, explicitPath: "other.json" }).defaultAgent).toBe("mine");
    expect(loadConfig({ cwd: where, env: {} }).defaultAgent).toBe("plan");
  });
});

describe("{file:} and {env:} in every string", () => {
  it("replaces {file:PATH} (relative to the config file, trimmed) and {env:NAME} anywhere, arrays and nested keys included", async () => {
    const where = await place({
      "conf/opencode.json": JSON.stringify({
        agent: { review: { prompt: "{file:./prompts/review.txt}", description: "by {env:WHO}" } },
        provider: { p: { options: { apiKey: "{file:../secrets/key}", baseURL: "http://{env:HOST}/v1" }, models: { m: {} } } },
        roots: ["{env:MISSING}/x", "{file:/ABS}"],
      }).replace("/ABS", "ABS_PLACEHOLDER"),
      "conf/prompts/review.txt": "\n  Review carefully.\n\n",
      "secrets/key": "sk-from-file\n",
      "abs.txt": "absolute",
    });
    const file = path.join(where, "conf/opencode.json");
    const { readFile } = await import("node:fs/promises");
    await writeFile(file, (await readFile(file, "utf8")).replace("ABS_PLACEHOLDER", path.join(where, "abs.txt")));
    const config = loadConfig({ explicitPath: file, cwd: dir, env: { WHO: "ada", HOST: "127.0.0.1:8080" } });
    expect(config.agents.get("review")).toMatchObject({ prompt: "Review carefully.", description: "by ada" });
    expect(config.providers.p!.options).toEqual({ apiKey: "sk-from-file", baseURL: "http://127.0.0.1:8080/v1" });
    expect(config.roots).toEqual([path.resolve(where, "conf", "/x"), path.resolve(where, "conf", "absolute")]);
  });

  it("expands ~/ to the home directory", async () => {
    const home = await place({ "prompts/p.txt": "from home" });
    const value = substituteVariables({ a: ["{file:~/prompts/p.txt}"] }, { env: {}, baseDir: "/nowhere", source: "opencode.json", home });
    expect(value).toEqual({ a: ["from home"] });
  });

  it("a missing file, a directory: ConfigError naming the file, the key path and the resolved path", async () => {
    const where = await place({
      "missing.json": '{ "agent": { "review": { "prompt": "{file:./prompts/review.txt}" } } }',
      "dir.json": '{ "instructions": ["x", "{file:./prompts}"] }',
      "prompts/.keep": "",
    });
    const load = (name: string) => () => loadConfig({ explicitPath: path.join(where, name), cwd: where, env: {} });
    expect(load("missing.json")).toThrow(ConfigError);
    expect(load("missing.json")).toThrow(
      `${path.join(where, "missing.json")}: agent.review.prompt: {file:./prompts/review.txt}: ${path.join(where, "prompts/review.txt")} does not exist`,
    );
    expect(load("dir.json")).toThrow(
      `${path.join(where, "dir.json")}: instructions.1: {file:./prompts}: ${path.join(where, "prompts")} is not a regular file`,
    );
  });

  it("an unset {env:NAME} is empty; a file's own {env:} text is not replaced again", async () => {
    const where = await place({ "opencode.json": '{ "agent": { "a": { "prompt": "[{env:NOPE}] {file:p.txt}" } } }', "p.txt": "{env:WHO}" });
    expect(loadConfig({ cwd: where, env: { WHO: "ada" } }).agents.get("a")!.prompt).toBe("[] {env:WHO}");
  });
});

describe("unknown keys and wrong shapes", () => {
  const text =
    '{ "model": "a/b", "provider": { "a": { "options": { "baseURL": "http://127.0.0.1:1/v1" }, "models": { "b": {} } } }, "agent": { "review": { "colour": "#fff", "prompt": "x" } }, "permisions": {} }';

  it("an unknown key is an error naming every unknown key with its path", async () => {
    const where = await place({ "opencode.json": text });
    expect(() => loadConfig({ cwd: where, env: {} })).toThrow(
      `${path.join(where, "opencode.json")}: unknown keys agent.review.colour, permisions (not a ledger.json or opencode.json key; --lenient-config ignores unknown keys)`,
    );
    expect(() => readConfigText('{ "limits": { "request_byte": 1 } }', "ledger.json")).toThrow(
      "ledger.json: unknown key limits.request_byte (not a ledger.json or opencode.json key; --lenient-config ignores unknown keys)",
    );
  });

  it("lenient (--lenient-config, LEDGER_LENIENT_CONFIG=1): dropped with a warning, the rest read", async () => {
    const where = await place({ "opencode.json": text });
    const warning = `${path.join(where, "opencode.json")}: unknown keys ignored (--lenient-config): agent.review.colour, permisions`;
    const lenient = loadConfig({ cwd: where, env: {}, lenient: true });
    expect(lenient.warnings).toEqual([warning]);
    expect(lenient.agents.get("review")!.prompt).toBe("x");
    expect(loadConfig({ cwd: where, env: { LEDGER_LENIENT_CONFIG: "1" } }).warnings).toEqual([warning]);
  });

  it("unknown keys are found before substitution: a {file:} under a misspelled key is not read", async () => {
    const where = await place({
      "opencode.json": '{ "agent": { "review": { "promt": "{file:missing.txt}", "prompt": "x" } } }',
    });
    expect(() => loadConfig({ cwd: where, env: {} })).toThrow(
      `${path.join(where, "opencode.json")}: unknown key agent.review.promt (not a ledger.json or opencode.json key; --lenient-config ignores unknown keys)`,
    );
    const lenient = loadConfig({ cwd: where, env: {}, lenient: true });
    expect(lenient.warnings).toEqual([`${path.join(where, "opencode.json")}: unknown keys ignored (--lenient-config): agent.review.promt`]);
    expect(lenient.agents.get("review")!.prompt).toBe("x");
  });

  it("a value of the wrong shape is an error naming its path", () => {
    const fails = (json: string) => () => readConfigText(json, "opencode.json");
    expect(fails('{ "agent": { "review": { "temperature": "hot" } } }')).toThrow(
      "opencode.json: agent.review.temperature: Invalid input: expected number, received string",
    );
    expect(fails('{ "agent": { "review": { "tools": { "write": "no" } } } }')).toThrow(
      "opencode.json: agent.review.tools.write: Invalid input: expected boolean, received string",
    );
    expect(fails('{ "permission": { "bash": { "rm *": "never" } } }')).toThrow(
      'opencode.json: permission.bash.rm *: Invalid option: expected one of "allow"|"deny"|"ask"',
    );
    expect(fails('{ "provider": { "p": { "models": { "m": { "limit": { "context": "big" } } } } } }')).toThrow(
      "opencode.json: provider.p.models.m.limit.context: Invalid input: expected number, received string",
    );
  });
});

describe("permission precedence: built-in agent, top-level tools/permission, agent tools/permission, session rules (the last match wins)", () => {
  const session = (permission: string, pattern: string, action: "allow" | "deny" | "ask"): PermissionRule =>
    ({
      permission,
      pattern,
      action: action === "deny" ? ProtoAction.DENY : action === "ask" ? ProtoAction.ASK : ProtoAction.ALLOW,
    }) as PermissionRule;
  type Row = {
    what: string;
    file: Record<string, unknown>;
    agent?: string;
    session?: PermissionRule[];
    tool: string;
    pattern?: string;
    expected: "allow" | "deny" | "ask";
  };
  const rows: Row[] = [
    { what: "nothing configured: build allows", file: {}, tool: "bash", pattern: "ls", expected: "allow" },
    { what: "built-in plan denies bash", file: {}, agent: "plan", tool: "bash", pattern: "ls", expected: "deny" },
    { what: "top-level edit: ask reaches build", file: { permission: { edit: "ask" } }, tool: "edit", pattern: "a.ts", expected: "ask" },
    {
      what: "top-level edit covers write (OpenCode's edit tools)",
      file: { permission: { edit: "ask" } },
      tool: "write",
      pattern: "a.ts",
      expected: "ask",
    },
    {
      what: "top-level comes after the built-in agent's own rules (plan + bash allow)",
      file: { permission: { bash: "allow" } },
      agent: "plan",
      tool: "bash",
      pattern: "ls",
      expected: "allow",
    },
    { what: 'top-level "permission": "ask" = every tool asks', file: { permission: "ask" }, tool: "read", expected: "ask" },
    {
      what: "bash patterns: the last match wins ({git push: ask, *: allow} allows git push)",
      file: { permission: { bash: { "git push": "ask", "*": "allow" } } },
      tool: "bash",
      pattern: "git push",
      expected: "allow",
    },
    {
      what: "bash patterns written * first: git push asks",
      file: { permission: { bash: { "*": "allow", "git push": "ask" } } },
      tool: "bash",
      pattern: "git push",
      expected: "ask",
    },
    {
      what: "bash patterns: another command allowed",
      file: { permission: { bash: { "*": "allow", "git push": "ask" } } },
      tool: "bash",
      pattern: "git status",
      expected: "allow",
    },
    { what: "top-level tools: false denies", file: { tools: { bash: false } }, tool: "bash", pattern: "ls", expected: "deny" },
    {
      what: "top-level tools write: false denies edit (OpenCode maps it to edit)",
      file: { tools: { write: false } },
      tool: "edit",
      pattern: "a.ts",
      expected: "deny",
    },
    { what: "top-level tools wildcard (mymcp_*: false)", file: { tools: { "mymcp_*": false } }, tool: "mymcp_search", expected: "deny" },
    {
      what: "top-level permission wins over top-level tools",
      file: { tools: { bash: false }, permission: { bash: "ask" } },
      tool: "bash",
      pattern: "ls",
      expected: "ask",
    },
    {
      what: "agent permission wins over top-level permission",
      file: { permission: { edit: "deny" }, agent: { build: { permission: { edit: "allow" } } } },
      tool: "edit",
      pattern: "a.ts",
      expected: "allow",
    },
    {
      what: "agent tools win over top-level permission",
      file: { permission: { bash: "allow" }, agent: { build: { tools: { bash: false } } } },
      tool: "bash",
      pattern: "ls",
      expected: "deny",
    },
    {
      what: "agent permission wins over agent tools",
      file: { agent: { build: { tools: { bash: false }, permission: { bash: "ask" } } } },
      tool: "bash",
      pattern: "ls",
      expected: "ask",
    },
    {
      what: "a new agent starts from allow + top-level",
      file: { permission: { bash: "deny" }, agent: { mine: {} } },
      agent: "mine",
      tool: "bash",
      pattern: "ls",
      expected: "deny",
    },
    {
      what: "agent * is weighed before its named tools",
      file: { agent: { build: { permission: { bash: "allow", "*": "deny" } } } },
      tool: "bash",
      pattern: "ls",
      expected: "allow",
    },
    {
      what: "session rules come last: session allow beats agent deny",
      file: { agent: { build: { permission: { bash: "deny" } } } },
      session: [session("bash", "*", "allow")],
      tool: "bash",
      pattern: "ls",
      expected: "allow",
    },
    {
      what: "session rules come last: session deny beats top-level allow",
      file: { permission: { read: "allow" } },
      session: [session("read", "*", "deny")],
      tool: "read",
      expected: "deny",
    },
    {
      what: "session edit: deny (a prompt's tools: {edit: false}) denies write too, as OpenCode disables every edit tool",
      file: {},
      session: [session("edit", "*", "deny")],
      tool: "write",
      pattern: "a.ts",
      expected: "deny",
    },
    {
      what: "session edit: deny covers patch too",
      file: { permission: { patch: "allow" } },
      session: [session("edit", "*", "deny")],
      tool: "patch",
      pattern: "a.ts",
      expected: "deny",
    },
    {
      what: "an ALWAYS reply to an edit request (session edit on a.ts: allow) also allows writing a.ts",
      file: { permission: { edit: "ask" } },
      session: [session("edit", "a.ts", "allow")],
      tool: "write",
      pattern: "a.ts",
      expected: "allow",
    },
    {
      what: "session rules in order: edit: deny, then write on a.ts: allow",
      file: {},
      session: [session("edit", "*", "deny"), session("write", "a.ts", "allow")],
      tool: "write",
      pattern: "a.ts",
      expected: "allow",
    },
    {
      what: 'top-level * written last is weighed first: {edit: allow, "*": deny} allows edit (OpenCode denies; warned at start)',
      file: { permission: { edit: "allow", "*": "deny" } },
      tool: "edit",
      pattern: "a.ts",
      expected: "allow",
    },
    {
      what: 'top-level * written last still denies the tools not named: {edit: allow, "*": deny} denies bash',
      file: { permission: { edit: "allow", "*": "deny" } },
      tool: "bash",
      pattern: "ls",
      expected: "deny",
    },
    {
      what: "a session rule for another tool changes nothing",
      file: { permission: { bash: "ask" } },
      session: [session("read", "*", "allow")],
      tool: "bash",
      pattern: "ls",
      expected: "ask",
    },
  ];
  for (const row of rows) {
    it(`${row.what} → ${row.expected}`, () => {
      const config = buildConfig(configFileSchema.parse(row.file), "opencode.json", "/");
      const agent = config.agents.get(row.agent ?? "build")!;
      expect(decide(permissionRules(agent, row.session ?? []), row.tool, [row.pattern ?? "*"])).toBe(row.expected);
    });
  }
});
