/**
 * The Python client (clients/python): generated with Debian's protoc + grpc_python_plugin, run
 * with /usr/bin/python3 (python3-grpcio, python3-protobuf) against a real `ledger serve` child
 * over gRPC (h2c). Skipped when those tools are missing, unless LEDGER_PYTHON_CLIENT_REQUIRED=1
 * (set by .ci/run, which installs them), where missing tools fail the test instead.
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdir, mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { finished, type CliRun } from "../support/cli.js";
import { compatibleProvider } from "../support/mock-models.js";

const ROOT = path.resolve(import.meta.dirname, "../..");
const BIN = path.join(ROOT, "bin/ledger.js");
const CLIENT = path.join(ROOT, "clients/python");
const PYTHON = "/usr/bin/python3";
const TIMEOUT = 180_000;
const TOKEN = "python-client-test-token-0123456789";
const EVENT_LINE = /^(\d+) (\w+) (.*)$/;
const ID = "[0-9A-HJKMNP-TV-Z]{26}";

/** Why the Python client cannot run here, or undefined when it can. */
function missingTools(): string | undefined {
  const python = spawnSync(PYTHON, ["-c", "import grpc, google.protobuf"], { encoding: "utf8" });
  if (python.status !== 0)
    return `${PYTHON} cannot import grpc and google.protobuf (apt-get install python3-grpcio python3-protobuf): ${python.stderr || python.error}`.trim();
  for (const [tool, pkg] of [
    ["protoc", "protobuf-compiler"],
    ["grpc_python_plugin", "protobuf-compiler-grpc"],
  ]) {
    if (spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0) return `${tool} not found (apt-get install ${pkg})`;
  }
  return undefined;
}

const missing = missingTools();
const required = process.env.LEDGER_PYTHON_CLIENT_REQUIRED === "1";
if (missing && !required) console.warn(`test/clients/python.test.ts skipped: ${missing}`);

/** The environment of every child: no database, config, token or proxy from the outer one. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of [
    "DATABASE_URL",
    "LEDGER_CONFIG",
    "LEDGER_TOKEN",
    "LEDGER_ADDR",
    "http_proxy",
    "https_proxy",
    "grpc_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "GRPC_PROXY",
  ])
    delete env[name];
  return { ...env, ...extra };
}

/** A `ledger serve --port 0 --db <cwd>/db` child (PGlite) and its address as host:port. */
interface Served {
  addr: string;
  stop(): Promise<CliRun>;
}

async function serve(cwd: string, env: Record<string, string> = {}): Promise<Served> {
  const child = spawn(process.execPath, [BIN, "serve", "--port", "0", "--db", path.join(cwd, "db")], {
    cwd,
    env: cleanEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = finished(child);
  const addr = await new Promise<string>((resolve, reject) => {
    let seen = "";
    child.stdout!.on("data", (chunk: Buffer | string) => {
      seen += String(chunk);
      const match = /^session-ledger listening on http:\/\/(\S+)\n/.exec(seen);
      if (match) resolve(match[1]!);
    });
    void exited.then((run) => reject(new Error(`serve exited early (${run.code}):\n${run.stderr}`)));
  });
  return {
    addr,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      return exited;
    },
  };
}

interface EventLine {
  seq: number;
  kind: string;
  summary: string;
}

function eventLines(stdout: string): EventLine[] {
  return stdout.split("\n").flatMap((line) => {
    const m = EVENT_LINE.exec(line);
    return m ? [{ seq: Number(m[1]), kind: m[2]!, summary: m[3]! }] : [];
  });
}

describe.skipIf(Boolean(missing) && !required)("clients/python example.py against ledger serve", () => {
  let tmp: string;
  let gen: string;
  let project: string;
  let notes: string;
  let server: Served | undefined;

  /** Runs example.py to completion with the generated modules from the temp dir. */
  function example(args: string[], env: Record<string, string> = {}): Promise<CliRun> {
    const child = spawn(PYTHON, [path.join(CLIENT, "example.py"), ...args], {
      cwd: project,
      env: cleanEnv({ LEDGER_PY_GEN: gen, PYTHONDONTWRITEBYTECODE: "1", ...env }),
      stdio: ["ignore", "pipe", "pipe"],
      timeout: 120_000,
    });
    return finished(child);
  }

  beforeAll(async () => {
    expect(missing, "Python client tools are required (LEDGER_PYTHON_CLIENT_REQUIRED=1)").toBeUndefined();
    tmp = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-python-")));
    gen = path.join(tmp, "gen");
    const generated = spawnSync("sh", [path.join(CLIENT, "generate.sh")], { env: cleanEnv({ OUT: gen }), encoding: "utf8" });
    expect(generated.status, `generate.sh failed:\n${generated.stdout}\n${generated.stderr}`).toBe(0);

    project = path.join(tmp, "project");
    await mkdir(project);
    notes = path.join(project, "notes.txt");
    await writeFile(notes, "hello from notes\nsecond line\n");
    server = await serve(project);
  }, TIMEOUT);

  afterAll(async () => {
    const run = await server?.stop();
    if (run) expect(run.code, run.stderr).toBe(0);
    if (tmp) await rm(tmp, { recursive: true, force: true });
  }, TIMEOUT);

  it(
    "--no-reply: creates a session and prints the stored events of the prompt with a file",
    async () => {
      const run = await example([
        "--url",
        server!.addr,
        "--dir",
        project,
        "--file",
        notes,
        "--text",
        "what is in notes.txt?",
        "--no-reply",
      ]);
      expect(run.code, `exit code; stderr:\n${run.stderr}\nstdout:\n${run.stdout}`).toBe(0);
      expect(run.stdout).toMatch(new RegExp(`^session ses_${ID} ${project}\n`));

      const events = eventLines(run.stdout);
      const seqs = events.map((e) => e.seq);
      expect(seqs, "seq strictly increasing").toEqual([...seqs].sort((a, b) => a - b));
      expect(new Set(seqs).size).toBe(seqs.length);

      const user = events.find((e) => e.kind === "message_updated");
      expect(user?.summary).toMatch(new RegExp(`^msg_${ID} user agent=build model=\\(none\\) no_reply=true$`));
      const parts = events.filter((e) => e.kind === "part_updated").map((e) => e.summary);
      expect(parts).toHaveLength(4);
      expect(parts[0]).toMatch(new RegExp(`^prt_${ID} text what is in notes\\.txt\\?$`));
      expect(parts[1]).toMatch(
        new RegExp(`^prt_${ID} text \\[synthetic\\] Called the Read tool with the following input: \\{"filePath":"${notes}"\\}$`),
      );
      expect(parts[2]).toMatch(new RegExp(`^prt_${ID} text \\[synthetic\\] <path>${notes}</path>`));
      expect(parts[3]).toBe(`${parts[3]!.split(" ")[0]} file text/plain notes.txt ${pathToFileURL(notes).href}`);
      expect(events.map((e) => e.kind)).toContain("prompted");
      expect(events.find((e) => e.kind === "prompted")?.summary).toMatch(/ no_reply=true$/);
      expect(events.map((e) => e.kind)).not.toContain("part_delta");
    },
    TIMEOUT,
  );

  it(
    "without --no-reply on a server with no model: notes it, stores the prompt, exit 0",
    async () => {
      const run = await example(["--url", `http://${server!.addr}`, "--dir", project, "--file", notes]);
      expect(run.code, run.stderr).toBe(0);
      expect(run.stderr).toContain("no model configured");
      expect(eventLines(run.stdout).filter((e) => e.kind === "part_updated")).toHaveLength(4);
    },
    TIMEOUT,
  );

  it(
    "an RPC error: exit 1 with the status code, message and decoded ErrorInfo / BadRequest",
    async () => {
      const run = await example(["--url", server!.addr, "--dir", "/nonexistent", "--file", notes, "--no-reply"], {
        LEDGER_ADDR: "ignored:1",
      });
      expect(run.code).toBe(1);
      expect(run.stderr).toMatch(/^error: INVALID_ARGUMENT: directory: /m);
      expect(run.stderr).toMatch(/^ {2}ErrorInfo reason=INVALID_ARGUMENT domain=\S+ .*field=directory/m);
      expect(run.stderr).toMatch(/^ {2}BadRequest field=directory: /m);
      expect(run.stdout).toBe("");
    },
    TIMEOUT,
  );

  it(
    "LEDGER_ADDR is the default address; a file outside the session directory is PERMISSION_DENIED",
    async () => {
      const run = await example(["--dir", project, "--file", "/etc/hostname", "--no-reply"], { LEDGER_ADDR: server!.addr });
      expect(run.code).toBe(1);
      expect(run.stderr).toMatch(/^error: PERMISSION_DENIED: /m);
      expect(run.stderr).toMatch(/BadRequest field=parts\[1\]\.file\.url: /);
    },
    TIMEOUT,
  );

  describe("with a model (fake OpenAI-compatible provider) and a bearer token", () => {
    let fake: FakeOpenAI;
    let modelProject: string;
    let modelServer: Served | undefined;

    beforeAll(async () => {
      fake = await startFakeOpenAI();
      modelProject = path.join(tmp, "model-project");
      await mkdir(modelProject);
      await writeFile(path.join(modelProject, "notes.txt"), "hello from notes\n");
      const config = {
        model: "local/qwen",
        provider: { local: compatibleProvider(fake.url, { qwen: {} }) },
      };
      await writeFile(path.join(modelProject, "ledger.json"), JSON.stringify(config, null, 2));
      modelServer = await serve(modelProject, { LEDGER_TOKEN: TOKEN });
    }, TIMEOUT);

    afterAll(async () => {
      const run = await modelServer?.stop();
      await fake?.close();
      if (run) expect(run.code, run.stderr).toBe(0);
    }, TIMEOUT);

    it(
      "streams the reply: part_delta lines, the finished assistant message, then session_status idle",
      async () => {
        fake.push({
          kind: "stream",
          chunks: [{ text: "The notes " }, { text: "say hello." }],
          delayMs: 20,
          usage: { prompt_tokens: 100, completion_tokens: 5 },
        });
        const file = path.join(modelProject, "notes.txt");
        const run = await example(["--url", modelServer!.addr, "--dir", modelProject, "--file", file, "--text", "summarize notes.txt"], {
          LEDGER_TOKEN: TOKEN,
        });
        expect(run.code, `exit code; stderr:\n${run.stderr}\nstdout:\n${run.stdout}`).toBe(0);
        expect(run.stderr).toBe("");

        const events = eventLines(run.stdout);
        const kinds = events.map((e) => e.kind);
        expect(events.find((e) => e.kind === "prompted")?.summary).toMatch(/ no_reply=false$/);
        expect(
          events
            .filter((e) => e.kind === "part_updated")
            .map((e) => e.summary)
            .slice(0, 4)
            .at(-1),
        ).toMatch(/ file text\/plain notes\.txt file:\/\//);
        const deltas = events.filter((e) => e.kind === "part_delta").map((e) => e.summary);
        expect(deltas.length).toBeGreaterThan(0);
        expect(deltas.join("\n")).toContain('"The notes "');
        expect(deltas.join("\n")).toContain('"say hello."');
        expect(events.some((e) => e.kind === "message_updated" && / assistant .*model=local\/qwen finish=stop/.test(e.summary))).toBe(true);
        expect(kinds).toContain("session_status");
        expect(events.filter((e) => e.kind === "session_status").at(-1)?.summary).toBe("idle");
        expect(kinds.at(-1)).toBe("session_status");
        expect(fake.requests.length).toBe(1);
      },
      TIMEOUT,
    );

    it(
      "without LEDGER_TOKEN the server refuses: UNAUTHENTICATED with ErrorInfo TOKEN_MISSING, exit 1",
      async () => {
        const run = await example(["--url", modelServer!.addr, "--dir", modelProject, "--no-reply"]);
        expect(run.code).toBe(1);
        expect(run.stderr).toMatch(/^error: UNAUTHENTICATED: /m);
        expect(run.stderr).toMatch(/ErrorInfo reason=TOKEN_MISSING/);
      },
      TIMEOUT,
    );
  });
});
