// Loading plugins (src/plugins/plugins.ts): a module that cannot be imported stops the start
// with a ConfigError that says which and why, and that OpenCode plugins are not ours.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError } from "../../src/config/config-error.js";
import { loadPlugins } from "../../src/plugins/plugins.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "ledger-plugins-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("loadPlugins", () => {
  it("names a package that is not installed, with the import's reason", async () => {
    const error = await loadPlugins(["opencode-wakatime"]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toBe(
      "plugin opencode-wakatime cannot be loaded: Cannot find package 'opencode-wakatime' imported from " +
        `${path.resolve(import.meta.dirname, "../../src/plugins/plugins.ts")} (a plugin is a module of this service's plugin interface, not an OpenCode plugin: docs/configuration.md#plugins)`,
    );
  });

  it("names a module that throws as it is imported, with its error", async () => {
    const broken = path.join(dir, "broken.mjs");
    await writeFile(broken, 'throw new Error("no API key");\n');
    await expect(loadPlugins([broken])).rejects.toThrow(
      `plugin ${broken} cannot be loaded: no API key (a plugin is a module of this service's plugin interface, not an OpenCode plugin: docs/configuration.md#plugins)`,
    );
  });

  it("loads a module and reports its name", async () => {
    const ok = path.join(dir, "ok.mjs");
    await writeFile(ok, "export function chatMessage(input) { return input; }\n");
    expect((await loadPlugins([ok])).names).toEqual([ok]);
  });
});
