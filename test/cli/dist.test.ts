/**
 * `bin/ledger.js` runs the compiled dist/ (built by vitest's globalSetup when stale) without tsx,
 * and `ledger serve` loads its heavy modules only when first needed (issue 13 item 3). Which
 * modules a child loads comes from Node's module resolve hook (test/support/module-log.mjs).
 */
import { spawn } from "node:child_process";
import { mkdtemp, readFile, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { createTestDatabase, TEST_ENGINE, type TestDatabase } from "../support/db.js";

const ROOT = path.resolve(import.meta.dirname, "../..");
const BIN = path.join(ROOT, "bin/ledger.js");
const MODULE_LOG = pathToFileURL(path.join(ROOT, "test/support/module-log.mjs")).href;
const TIMEOUT = 120_000;

/** Packages `ledger serve` must not load before a prompt needs them (noReply prompts never do). */
const LAZY = [
  "tsx",
  "sharp",
  "@modelcontextprotocol/sdk",
  "typescript",
  "web-tree-sitter",
  "ai",
  "@ai-sdk/",
  "@nats-io/",
  // Tracing: its SDK only with telemetry configured; @opentelemetry/api is in the bundle.
  "@opentelemetry/",
];

let dir: string;
let database: TestDatabase | undefined;

beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-dist-")));
  await writeFile(path.join(dir, "notes.txt"), "first line\nsecond line\n");
  if (TEST_ENGINE === "postgres") database = await createTestDatabase("postgres");
});

afterAll(async () => {
  await database?.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The child's environment: no NODE_OPTIONS (no loader inherited from vitest), no config. */
function childEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, LEDGER_LOG_LEVEL: "warn", ...extra };
  delete env.NODE_OPTIONS;
  delete env.LEDGER_CONFIG;
  delete env.DATABASE_URL;
  if (database?.url) env.DATABASE_URL = database.url;
  return env;
}

/** The package a module URL belongs to ("@scope/name" or "name"), or undefined outside node_modules. */
function packageOf(url: string): string | undefined {
  const m = /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  return m?.[1];
}

describe("bin/ledger.js", () => {
  it("does not import tsx and runs dist/", async () => {
    const source = await readFile(BIN, "utf8");
    expect(source).not.toMatch(/from\s+["']tsx|import\(["']tsx|register\(/);
    expect(source).toContain("../dist/cli/main.js");
  });

  it(
    "prints --version without NODE_OPTIONS",
    async () => {
      const child = spawn(process.execPath, [BIN, "--version"], { cwd: dir, env: childEnv(), stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
      const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
      const pkg = JSON.parse(await readFile(path.join(ROOT, "package.json"), "utf8")) as { version: string };
      expect(code).toBe(0);
      expect(stdout).toBe(`${pkg.version}\n`);
    },
    TIMEOUT,
  );

  it(
    "serves a real prompt with a file, loading neither tsx nor the lazily loaded modules",
    async () => {
      const log = path.join(dir, `modules-${TEST_ENGINE}.txt`);
      const args = ["--import", MODULE_LOG, BIN, "serve", "--port", "0", ...(TEST_ENGINE === "pglite" ? ["--db", ":memory:"] : [])];
      const child = spawn(process.execPath, args, {
        cwd: dir,
        env: childEnv({ LEDGER_MODULE_LOG: log }),
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
      child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
      const closed = new Promise<number | null>((resolve) => child.once("close", resolve));
      try {
        const url = await new Promise<string>((resolve, reject) => {
          const onData = () => {
            const m = /listening on (\S+)/.exec(stdout);
            if (m) resolve(m[1]!);
          };
          child.stdout.on("data", onData);
          child.once("exit", () => reject(new Error(`ledger serve exited before listening; stderr:\n${stderr}`)));
        });
        const client = createClient(SessionService, createConnectTransport({ baseUrl: url, httpVersion: "1.1" }));
        const { session } = await client.createSession({ directory: dir });
        const fileUrl = pathToFileURL(path.join(dir, "notes.txt")).href;
        const res = await client.prompt({
          sessionId: session!.id,
          noReply: true,
          parts: [
            { kind: { case: "text", value: { text: "read this" } } },
            { kind: { case: "file", value: { url: fileUrl, mime: "text/plain" } } },
          ],
        });
        const texts = res.message!.parts.flatMap((p) => (p.kind.case === "text" ? [p.kind.value.text] : []));
        expect(texts.join("\n")).toContain("1: first line");
      } finally {
        child.kill("SIGTERM");
      }
      expect(await closed, stderr).toBe(0);

      const loaded = new Set((await readFile(log, "utf8")).split("\n").flatMap((url) => packageOf(url) ?? []));
      expect(loaded.has("pg"), "the log sees packages").toBe(true);
      const lazy = [...loaded].filter((name) => LAZY.some((prefix) => (prefix.endsWith("/") ? name.startsWith(prefix) : name === prefix)));
      expect(lazy).toEqual([]);
      expect(loaded.has("@electric-sql/pglite")).toBe(TEST_ENGINE === "pglite");
    },
    TIMEOUT,
  );
});
