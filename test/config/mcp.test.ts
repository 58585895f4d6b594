import { describe, expect, it } from "vitest";
import { buildConfig, parseConfigText } from "../../src/config/config.js";

/** The `mcp` of `text` (a whole ledger.json) as the ledger reads it, `{env:NAME}` from `env`. */
function mcpOf(text: string, env: NodeJS.ProcessEnv = {}) {
  return buildConfig(parseConfigText(text, "ledger.json", env), "ledger.json", "/etc/ledger").mcp;
}

const failure = (text: string): string => {
  try {
    mcpOf(text);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error("expected a ConfigError");
};

describe("mcp config in the opencode.json style", () => {
  it("reads local and remote entries with OpenCode's keys", () => {
    const mcp = mcpOf(`{
      "mcp": {
        "everything": { "type": "local", "command": ["npx", "-y", "@modelcontextprotocol/server-everything"],
                        "environment": { "GREETING": "hi" }, "enabled": true, "timeout": 5000 },
        "off": { "type": "local", "command": ["./server.js"], "enabled": false },
        "remote": { "type": "remote", "url": "https://mcp.example.com/mcp", "headers": { "Authorization": "Bearer x" }, "timeout": 3000 },
        "bare": { "type": "remote", "url": "http://127.0.0.1:3001/mcp", "enabled": false, "oauth": false },
      },
    }`);
    expect(mcp).toEqual({
      everything: {
        type: "local",
        command: ["npx", "-y", "@modelcontextprotocol/server-everything"],
        environment: { GREETING: "hi" },
        enabled: true,
        timeoutMs: 5000,
      },
      off: { type: "local", command: ["/etc/ledger/server.js"], environment: {}, enabled: false, timeoutMs: 10_000 },
      remote: {
        type: "remote",
        url: "https://mcp.example.com/mcp",
        headers: { Authorization: "Bearer x" },
        enabled: true,
        timeoutMs: 3000,
      },
      bare: { type: "remote", url: "http://127.0.0.1:3001/mcp", headers: {}, enabled: false, timeoutMs: 10_000 },
    });
  });

  it("substitutes {env:NAME} in every string: command, environment, url and headers", () => {
    const env = { BIN: "/opt/mcp", TOKEN: "s3cret", HOST: "mcp.example.com" };
    const mcp = mcpOf(
      `{ "mcp": {
        "a": { "type": "local", "command": ["{env:BIN}/server", "--token={env:TOKEN}"], "environment": { "TOKEN": "{env:TOKEN}", "MISSING": "[{env:NOPE}]" } },
        "b": { "type": "remote", "url": "https://{env:HOST}/mcp", "headers": { "Authorization": "Bearer {env:TOKEN}" } },
      } }`,
      env,
    );
    expect(mcp.a).toMatchObject({ command: ["/opt/mcp/server", "--token=s3cret"], environment: { TOKEN: "s3cret", MISSING: "[]" } });
    expect(mcp.b).toMatchObject({ url: "https://mcp.example.com/mcp", headers: { Authorization: "Bearer s3cret" } });
  });

  it("names unknown keys instead of ignoring them", () => {
    expect(failure(`{ "mcp": { "a": { "type": "local", "command": ["x"], "enviroment": {}, "cwd": "/" } } }`)).toBe(
      "ledger.json: unknown keys mcp.a.enviroment, mcp.a.cwd (not a ledger.json or opencode.json key; --lenient-config ignores unknown keys)",
    );
    expect(failure(`{ "mcp": { "a": { "type": "remote", "url": "https://x.example/mcp", "command": ["x"] } } }`)).toBe(
      "ledger.json: unknown key mcp.a.command (not a ledger.json or opencode.json key; --lenient-config ignores unknown keys)",
    );
    expect(failure(`{ "mcp": { "a": { "command": ["x"], "url": "https://x.example/mcp" } } }`)).toBe(
      "ledger.json: unknown key mcp.a.url (not a ledger.json or opencode.json key; --lenient-config ignores unknown keys)",
    );
  });

  it("explains a wrong type, a remote entry without a URL, OAuth and both spellings of a key", () => {
    expect(failure(`{ "mcp": { "a": { "type": "sse", "url": "https://x.example" } } }`)).toBe(
      'ledger.json: mcp.a.type: expected "type": "local" or "remote"',
    );
    expect(failure(`{ "mcp": { "a": { "type": "remote" } } }`)).toMatch(/^ledger\.json: mcp\.a\.url: /);
    expect(failure(`{ "mcp": { "a": { "type": "remote", "url": "ftp://x.example" } } }`)).toBe(
      "ledger.json: mcp.a.url: expected an http(s) URL",
    );
    expect(failure(`{ "mcp": { "a": { "type": "remote", "url": "https://x.example", "oauth": {} } } }`)).toBe(
      'ledger.json: mcp.a.oauth: OAuth is not supported yet: give "oauth": false and put a token in "headers"',
    );
    expect(failure(`{ "mcp": { "a": { "command": ["x"], "env": {}, "environment": {} } } }`)).toBe(
      'ledger.json: mcp.a.env: give "environment" only ("env" is its old name)',
    );
    expect(failure(`{ "mcp": { "a": { "command": ["x"], "timeout": 1, "timeout_ms": 2 } } }`)).toBe(
      'ledger.json: mcp.a.timeout_ms: give "timeout" only ("timeout_ms" is its old name)',
    );
    expect(failure(`{ "mcp": { "a": { "type": "local", "command": ["x"], "timeout": 0 } } }`)).toMatch(/^ledger\.json: mcp\.a\.timeout: /);
  });

  it("keeps the old keys: an entry without type is local, env and timeout_ms are environment and timeout", () => {
    expect(mcpOf(`{ "mcp": { "a": { "command": ["x"], "env": { "K": "v" }, "timeout_ms": 500 } } }`)).toEqual({
      a: { type: "local", command: ["x"], environment: { K: "v" }, enabled: true, timeoutMs: 500 },
    });
  });
});
