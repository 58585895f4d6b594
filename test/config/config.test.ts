import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import {
  buildConfig,
  ConfigError,
  configFileSchema,
  lineAndColumn,
  loadConfig,
  parseConfigText,
  parseModelRef,
} from "../../src/config/config.js";
import { InvalidArgumentError } from "../../src/errors.js";

describe("parseModelRef", () => {
  it('splits "provider/model" at the first slash (the model id may contain more)', () => {
    expect(parseModelRef("local/qwen")).toEqual({ providerId: "local", modelId: "qwen" });
    expect(parseModelRef("ollama/qwen2.5-coder:7b")).toEqual({ providerId: "ollama", modelId: "qwen2.5-coder:7b" });
    expect(parseModelRef("openrouter/anthropic/claude-sonnet-4")).toEqual({
      providerId: "openrouter",
      modelId: "anthropic/claude-sonnet-4",
    });
  });

  const bad: Array<[string, string]> = [
    ["garbage", "no slash"],
    ["", "empty"],
    ["/qwen", "empty provider"],
    ["local/", "empty model"],
    ["/", "both empty"],
    ["  /qwen", "blank provider"],
    ["local/  ", "blank model"],
  ];
  for (const [value, why] of bad) {
    it(`refuses ${JSON.stringify(value)} (${why}) with an InvalidArgumentError naming the field and the expected form`, () => {
      let error: unknown;
      try {
        parseModelRef(value, "--model");
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe("--model");
      expect((error as Error).message).toContain(`--model: ${JSON.stringify(value)}`);
      expect((error as Error).message).toContain('"provider/model"');
    });
  }

  it('names "model" by default', () => {
    expect(() => parseModelRef("garbage")).toThrow(/^model: "garbage" is not a model reference/);
  });
});

describe("model references in ledger.json", () => {
  const load = (file: Record<string, unknown>) => buildConfig(configFileSchema.parse(file), "ledger.json", "/");

  it("parses model, agent.<name>.model and command.<name>.model", () => {
    const config = load({ model: "local/qwen", agent: { plan: { model: "a/b/c" } }, command: { c: { template: "t", model: "x/y" } } });
    expect(config.model).toEqual({ providerId: "local", modelId: "qwen" });
    expect(config.agents.get("plan")?.model).toEqual({ providerId: "a", modelId: "b/c" });
    expect(config.commands.c?.model).toEqual({ providerId: "x", modelId: "y" });
  });

  // A trial, 2026-12-02: "model": "x/y" without a provider x started silently; every prompt then failed.
  it("warns at start about each chosen model no provider configures, naming its key and the configured models", () => {
    const config = load({
      model: "x/y",
      provider: { local: { options: { baseURL: "http://127.0.0.1:1/v1" }, models: { qwen: {} } } },
      agent: { plan: { model: "local/qwen" }, build: { model: "local/other" } },
      command: { c: { template: "t", model: "a/b/c" } },
    });
    expect(config.warnings).toEqual([
      'ledger.json: model: "x/y" is not a configured model (no provider.x.models.y): prompts that use it end with a model_not_found error; configured models: local/qwen',
      'ledger.json: agent.build.model: "local/other" is not a configured model (no provider.local.models.other): prompts that use it end with a model_not_found error; configured models: local/qwen',
      'ledger.json: command.c.model: "a/b/c" is not a configured model (no provider.a.models.b/c): prompts that use it end with a model_not_found error; configured models: local/qwen',
    ]);
    expect(
      load({ model: "local/qwen", provider: { local: { options: { baseURL: "http://127.0.0.1:1/v1" }, models: { qwen: {} } } } }).warnings,
    ).toEqual([]);
  });

  // A review, 2026-12-03: "constructor/x" threw a TypeError at load, "local/toString" got no
  // warning (the provider answers model_not_found), and a disabled agent's model was warned about.
  it("looks models up by own keys only, and skips disabled agents", () => {
    const provider = { local: { options: { baseURL: "http://127.0.0.1:1/v1" }, models: { qwen: {} } } };
    const warned = (ref: string) => load({ model: ref, provider }).warnings.map((w) => w.split(" is not")[0]);
    expect(warned("constructor/x")).toEqual(['ledger.json: model: "constructor/x"']);
    expect(warned("local/toString")).toEqual(['ledger.json: model: "local/toString"']);
    expect(load({ provider, agent: { plan: { disable: true, model: "gone/x" } } }).warnings).toEqual([]);
  });

  it("refuses a model without a slash or with an empty part before building anything", () => {
    for (const model of ["garbage", "/qwen", "local/"]) {
      expect(() => configFileSchema.parse({ model })).toThrow(/provider\/model/);
      expect(() => configFileSchema.parse({ agent: { plan: { model } } })).toThrow(/provider\/model/);
      expect(() => configFileSchema.parse({ command: { c: { template: "t", model } } })).toThrow(/provider\/model/);
    }
    expect(ConfigError).toBeDefined();
  });
});

describe("parseConfigText", () => {
  it("names the line and column (1-based) of a JSONC syntax error, not a character offset", () => {
    const text = '{\n  // comment\n  "model": "a/b",\n  "roots": [,]\n}\n';
    expect(() => parseConfigText(text, "ledger.json")).toThrow(ConfigError);
    expect(() => parseConfigText(text, "ledger.json")).toThrow(/^ledger\.json: invalid JSONC at line 4, column 13: value expected$/);
    expect(() => parseConfigText('{ "model": "a/b" "x": 1 }', "ledger.json")).toThrow(/at line 1, column 18: comma expected$/);
    // Comments and trailing commas are JSONC, not errors.
    expect(parseConfigText('{ "roots": ["a",], /* c */ }', "ledger.json").roots).toEqual(["a"]);
  });

  it("a config path that is a directory is a ConfigError naming it, not a raw EISDIR (a trial, 2026-12-04)", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-config-dir-"));
    try {
      for (const options of [{ explicitPath: dir }, { env: { LEDGER_CONFIG: dir } }]) {
        expect(() => loadConfig({ cwd: dir, env: {}, ...options })).toThrow(ConfigError);
        expect(() => loadConfig({ cwd: dir, env: {}, ...options })).toThrow(
          `config file ${dir} is a directory: give the path of a ledger.json file`,
        );
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("lineAndColumn counts lines and columns from 1", () => {
    expect(lineAndColumn("abc", 0)).toEqual({ line: 1, column: 1 });
    expect(lineAndColumn("ab\ncd\nef", 7)).toEqual({ line: 3, column: 2 });
    expect(lineAndColumn("ab\n", 3)).toEqual({ line: 2, column: 1 });
  });
});

describe("bus.nats and LEDGER_NATS_URL", () => {
  const withFile = async (text: string, env: NodeJS.ProcessEnv) => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-config-nats-"));
    try {
      await writeFile(path.join(dir, "ledger.json"), text);
      return loadConfig({ cwd: dir, env });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };

  it("reads the servers and the name from the file; none configured: undefined (the Postgres relay)", async () => {
    expect((await withFile('{ "bus": { "nats": { "servers": ["nats://a:4222", "nats://b:4222"], "name": "eu-1" } } }', {})).nats).toEqual({
      servers: ["nats://a:4222", "nats://b:4222"],
      name: "eu-1",
    });
    expect((await withFile("{}", {})).nats).toBeUndefined();
  });

  it("LEDGER_NATS_URL (comma-separated, blanks ignored) replaces the file's servers and keeps its name", async () => {
    const env = { LEDGER_NATS_URL: " nats://x:4222, ,nats://y:4222 " };
    expect((await withFile('{ "bus": { "nats": { "servers": ["nats://a:4222"], "name": "eu-1" } } }', env)).nats).toEqual({
      servers: ["nats://x:4222", "nats://y:4222"],
      name: "eu-1",
    });
    expect((await withFile("{}", env)).nats).toEqual({ servers: ["nats://x:4222", "nats://y:4222"], name: undefined });
  });

  it("refuses an empty server list in the file and a LEDGER_NATS_URL without a server", async () => {
    await expect(withFile('{ "bus": { "nats": { "servers": [] } } }', {})).rejects.toThrow(/ledger\.json: bus\.nats\.servers: /);
    await expect(withFile("{}", { LEDGER_NATS_URL: " , " })).rejects.toThrow(
      new ConfigError("LEDGER_NATS_URL: expected one or more NATS server URLs, comma-separated"),
    );
  });
});

// A trial, 2026-12-02: "default_agent": "explore" was accepted, and prompts naming no agent ran as a subagent.
describe("default_agent", () => {
  const build = (file: Record<string, unknown>) => () =>
    buildConfig(configFileSchema.parse(file), "/etc/ledger/ledger.json", "/etc/ledger");

  it("must name a visible primary agent, as OpenCode's Agent.defaultAgent requires: checked at load, naming the primary agents", () => {
    expect(build({ default_agent: "nobody" })).toThrow(
      new ConfigError(`/etc/ledger/ledger.json: default_agent: agent "nobody" is not defined`),
    );
    expect(build({ default_agent: "explore" })).toThrow(
      new ConfigError(`/etc/ledger/ledger.json: default_agent: agent "explore" is a subagent; name a primary agent: build, plan`),
    );
    expect(build({ default_agent: "quiet", agent: { quiet: { hidden: true } } })).toThrow(
      new ConfigError(`/etc/ledger/ledger.json: default_agent: agent "quiet" is hidden; name a primary agent: build, plan`),
    );
    expect(build({ default_agent: "plan" })().defaultAgent).toBe("plan");
    expect(build({ default_agent: "mine", agent: { mine: {} } })().defaultAgent).toBe("mine");
  });

  // A review, 2026-12-03: without default_agent, a config making build a subagent failed to load,
  // blaming a default_agent it does not set.
  it("unset: build, or when build is not a visible primary agent, the first one that is", () => {
    expect(build({})().defaultAgent).toBe("build");
    expect(build({ agent: { build: { mode: "subagent" } } })().defaultAgent).toBe("plan");
    expect(build({ agent: { build: { hidden: true }, plan: { disable: true }, mine: {} } })().defaultAgent).toBe("mine");
    expect(build({ agent: { build: { disable: true }, plan: { mode: "subagent" } } })).toThrow(
      new ConfigError(`/etc/ledger/ledger.json: agent: no visible primary agent is left to run prompts that name none`),
    );
  });
});

describe("command.<name>.agent", () => {
  const build = (command: Record<string, unknown>) => () =>
    buildConfig(configFileSchema.parse({ command }), "/etc/ledger/ledger.json", "/etc/ledger");

  it("must name a configured agent: checked at load, naming the key and the agents", () => {
    expect(build({ x: { template: "t", agent: "nobody" } })).toThrow(
      new ConfigError(`/etc/ledger/ledger.json: command.x.agent: agent "nobody" is not defined; agents: build, plan, general, explore`),
    );
  });

  it("of a subtask command must be a subagent", () => {
    expect(build({ x: { template: "t", agent: "plan", subtask: true } })).toThrow(
      new ConfigError(
        `/etc/ledger/ledger.json: command.x.agent: agent "plan" is a primary agent and the command is a subtask; name a subagent: general, explore`,
      ),
    );
  });

  it("accepts a configured agent, a subagent for a subtask, and no agent", () => {
    const config = build({
      a: { template: "t", agent: "plan" },
      b: { template: "t", agent: "explore", subtask: true },
      c: { template: "t" },
    })();
    expect(Object.keys(config.commands)).toEqual(["a", "b", "c"]);
  });
});
