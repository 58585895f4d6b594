import { execFileSync } from "node:child_process";
import { mkdir, rm, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  globalInstructionFile,
  INSTRUCTION_FILE_BYTES,
  instructionSections,
  INSTRUCTIONS_TOTAL_BYTES,
  projectInstructionFiles,
} from "../../src/agent/instructions.js";
import { loadConfig } from "../../src/config/config.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { compatibleProvider } from "../support/mock-models.js";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { captureStderr } from "../support/stderr.js";
import { listenLoopback, type LoopbackServer } from "../support/fake-http.js";

// Instruction files in the system prompt, observed where the model sees them: the `system`
// message of the chat-completions request the local OpenAI-compatible server receives.
// HOME and XDG_CONFIG_HOME point into the test's temp dir (restored in afterAll), so the
// global file is the test's own and the machine's ~/.config is never read.

let t: TestLedger;
let fake: FakeOpenAI;
/** A loopback server an `instructions` URL points to: it counts requests (there must be none). */
let rulesServer: LoopbackServer;
let rulesRequests = 0;
let home: string;
let xdg: string;
const savedEnv = { HOME: process.env.HOME, XDG_CONFIG_HOME: process.env.XDG_CONFIG_HOME };
/** Files and directories a test created, removed after it. */
let created: string[] = [];

beforeAll(async () => {
  fake = await startFakeOpenAI();
  rulesServer = await listenLoopback(async (_req, res) => {
    rulesRequests++;
    res.end("remote rules");
  });
  t = await startTestLedger({
    model: "local/qwen",
    provider: { local: compatibleProvider(fake.url, { qwen: {} }) },
    // Relative to the config's directory (t.dir here; loadConfig's case is tested below).
    instructions: ["team/rules.md", "team/guides/**/*.md", "~/personal.md", `${rulesServer.origin}/rules.md`, "team/missing.md"],
  });
  home = path.join(t.dir, "home");
  xdg = path.join(t.dir, "xdg");
  await mkdir(home);
  process.env.HOME = home;
  process.env.XDG_CONFIG_HOME = xdg;
});
afterEach(async () => {
  for (const p of created.reverse()) await rm(p, { recursive: true, force: true });
  created = [];
});
afterAll(async () => {
  for (const [key, value] of Object.entries(savedEnv)) {
    if (value === undefined) delete process.env[key];
    else process.env[key] = value;
  }
  await t?.close();
  await fake?.close();
  await rulesServer?.close();
});

/** Writes `files` (path relative to t.dir → contents), creating directories; all removed after the test. */
async function layout(files: Record<string, string>): Promise<void> {
  for (const [rel, contents] of Object.entries(files)) {
    const file = path.join(t.dir, rel);
    await mkdir(path.dirname(file), { recursive: true });
    if (rel.endsWith("/.git")) await mkdir(file, { recursive: true });
    else await writeFile(file, contents);
    created.push(file);
  }
}

/** A new empty session directory under t.dir (removed after the test). */
async function sessionDir(rel: string): Promise<string> {
  const dir = path.join(t.dir, rel);
  await mkdir(dir, { recursive: true });
  created.push(path.join(t.dir, rel.split("/")[0]!));
  return dir;
}

/**
 * Prompts once, in a new session in `directory` (or in `sessionId`); returns the system message
 * the model server received.
 */
async function systemSent(directory: string, system?: string, sessionId?: string): Promise<string> {
  fake.push({ kind: "stream", chunks: [{ text: "ok" }] });
  sessionId ??= (await t.client.createSession({ directory })).session!.id;
  await t.client.prompt({ sessionId, parts: [text("hi")], system });
  const messages = fake.requests.at(-1)!.body.messages as Array<{ role: string; content: unknown }>;
  expect(messages[0]!.role).toBe("system");
  expect(messages.filter((m) => m.role === "system")).toHaveLength(1);
  return messages[0]!.content as string;
}

/** The build agent's default prompt, as before instructions existed. */
const defaultPrompt = (dir: string) =>
  `You are build, a coding agent working in the project directory ${dir}.\n` +
  "Use the tools to read, list, glob and grep files before you answer; cite file paths.\n" +
  "Answer concisely.";

describe("no instruction files", () => {
  it("sends the system prompt exactly as before, with and without the message's own system text", async () => {
    const dir = await sessionDir("plain/project");
    expect(await systemSent(dir)).toBe(defaultPrompt(dir));
    expect(await systemSent(dir, "be brief")).toBe(`${defaultPrompt(dir)}\n\nbe brief`);
  });
});

describe("the project's AGENTS.md", () => {
  it("is sent from the session directory, labelled with its path, before the message's system text", async () => {
    const dir = await sessionDir("one/project");
    await layout({ "one/project/AGENTS.md": "# Rules\nUse tabs.\n" });
    expect(await systemSent(dir, "be brief")).toBe(
      `${defaultPrompt(dir)}\n\nInstructions from: ${dir}/AGENTS.md\n# Rules\nUse tabs.\n\n\nbe brief`,
    );
  });

  it("is read again at each step: an edit counts from the next prompt of the same session", async () => {
    const dir = await sessionDir("edited/project");
    const sessionId = (await t.client.createSession({ directory: dir })).session!.id;
    expect(await systemSent(dir, undefined, sessionId)).toBe(defaultPrompt(dir));
    await layout({ "edited/project/AGENTS.md": "new rule" });
    expect(await systemSent(dir, undefined, sessionId)).toBe(`${defaultPrompt(dir)}\n\nInstructions from: ${dir}/AGENTS.md\nnew rule`);
  });

  it("leaves out an AGENTS.md that is not a regular file (a FIFO never blocks the step)", async () => {
    const dir = await sessionDir("fifo/project");
    execFileSync("mkfifo", [path.join(dir, "AGENTS.md")]);
    await layout({ "fifo/project/CLAUDE.md": "claude rules" });
    expect(await systemSent(dir)).toBe(`${defaultPrompt(dir)}\n\nInstructions from: ${dir}/CLAUDE.md\nclaude rules`);
  });

  it("is sent from every directory up to the git root, nearest first, and not from above it", async () => {
    const dir = await sessionDir("mono/repo/pkg/src");
    await layout({
      "mono/AGENTS.md": "above the git root",
      "mono/repo/.git": "",
      "mono/repo/AGENTS.md": "repo rules",
      "mono/repo/CLAUDE.md": "claude rules, unused: there is an AGENTS.md",
      "mono/repo/pkg/AGENTS.md": "package rules",
    });
    const repo = path.join(t.dir, "mono/repo");
    expect(await systemSent(dir)).toBe(
      `${defaultPrompt(dir)}\n\n` +
        `Instructions from: ${repo}/pkg/AGENTS.md\npackage rules\n\n` +
        `Instructions from: ${repo}/AGENTS.md\nrepo rules`,
    );
  });

  it("takes a .git file (a linked worktree) as the root too", async () => {
    const dir = await sessionDir("linked/tree/sub");
    await layout({ "linked/AGENTS.md": "above", "linked/tree/AGENTS.md": "tree rules" });
    await writeFile(path.join(t.dir, "linked/tree/.git"), "gitdir: /elsewhere/.git/worktrees/tree\n");
    expect(await systemSent(dir)).toBe(`${defaultPrompt(dir)}\n\nInstructions from: ${t.dir}/linked/tree/AGENTS.md\ntree rules`);
  });

  it("without a git root, is read from the session directory only", async () => {
    const dir = await sessionDir("nogit/sub");
    await layout({ "nogit/AGENTS.md": "parent rules" });
    expect(await systemSent(dir)).toBe(defaultPrompt(dir));
  });

  it("stops at a tenant's root holding the session directory when that is below the git root (never above it)", async () => {
    const dir = await sessionDir("hosted/tenants/acme/app");
    await layout({
      "hosted/.git": "",
      "hosted/AGENTS.md": "the operator's rules",
      "hosted/tenants/acme/AGENTS.md": "acme rules",
      "hosted/tenants/acme/app/AGENTS.md": "app rules",
    });
    const acme = path.join(t.dir, "hosted/tenants/acme");
    expect(await projectInstructionFiles(dir, [path.join(t.dir, "elsewhere"), acme])).toEqual([`${dir}/AGENTS.md`, `${acme}/AGENTS.md`]);
    // No root of the tenant holds it: the session directory alone.
    expect(await projectInstructionFiles(dir, [path.join(t.dir, "elsewhere")])).toEqual([`${dir}/AGENTS.md`]);
    // A git root below the tenant's root stays the top.
    expect(await projectInstructionFiles(dir, [t.dir])).toEqual([`${dir}/AGENTS.md`, `${acme}/AGENTS.md`, `${t.dir}/hosted/AGENTS.md`]);
  });

  describe("through a symlink", () => {
    const stderr = captureStderr();
    it("leaves out an AGENTS.md that leads outside the worktree, with a warning", async () => {
      const dir = await sessionDir("escape/repo");
      await layout({ "escape/secret.txt": "outside the worktree", "escape/repo/.git": "" });
      await symlink(path.join(t.dir, "escape/secret.txt"), path.join(dir, "AGENTS.md"));
      expect(await systemSent(dir)).toBe(defaultPrompt(dir));
      const warnings = stderr
        .written()
        .filter((line) => line.includes("instructions:"))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      expect(warnings).toEqual([
        {
          time: expect.any(String),
          level: "warn",
          msg: "instructions: project instruction file leads outside its worktree through a symlink; left out",
          file: `${dir}/AGENTS.md`,
        },
      ]);
    });
  });
});

describe("CLAUDE.md", () => {
  it("is sent when there is no AGENTS.md from the session directory to the git root", async () => {
    const dir = await sessionDir("claude/repo/app");
    await layout({ "claude/repo/.git": "", "claude/repo/CLAUDE.md": "root claude", "claude/repo/app/CLAUDE.md": "app claude" });
    expect(await systemSent(dir)).toBe(
      `${defaultPrompt(dir)}\n\n` +
        `Instructions from: ${dir}/CLAUDE.md\napp claude\n\n` +
        `Instructions from: ${t.dir}/claude/repo/CLAUDE.md\nroot claude`,
    );
  });

  it("is not sent when an AGENTS.md is found at any level", async () => {
    const dir = await sessionDir("both/repo/app");
    await layout({ "both/repo/.git": "", "both/repo/AGENTS.md": "root agents", "both/repo/app/CLAUDE.md": "app claude" });
    expect(await systemSent(dir)).toBe(`${defaultPrompt(dir)}\n\nInstructions from: ${t.dir}/both/repo/AGENTS.md\nroot agents`);
  });
});

describe("the global file", () => {
  it("is $XDG_CONFIG_HOME/ledger/AGENTS.md, after the project's, else OpenCode's, else ~/.claude/CLAUDE.md", async () => {
    const dir = await sessionDir("global/project");
    await layout({
      "global/project/AGENTS.md": "project",
      "xdg/ledger/AGENTS.md": "ledger global",
      "xdg/opencode/AGENTS.md": "opencode global",
      "home/.claude/CLAUDE.md": "claude global",
    });
    const project = `${defaultPrompt(dir)}\n\nInstructions from: ${dir}/AGENTS.md\nproject`;
    expect(await systemSent(dir)).toBe(`${project}\n\nInstructions from: ${xdg}/ledger/AGENTS.md\nledger global`);
    await rm(path.join(xdg, "ledger"), { recursive: true });
    expect(await systemSent(dir)).toBe(`${project}\n\nInstructions from: ${xdg}/opencode/AGENTS.md\nopencode global`);
    await rm(path.join(xdg, "opencode"), { recursive: true });
    expect(await systemSent(dir)).toBe(`${project}\n\nInstructions from: ${home}/.claude/CLAUDE.md\nclaude global`);
  });

  it("defaults XDG_CONFIG_HOME to ~/.config", async () => {
    await layout({ "home/.config/ledger/AGENTS.md": "x" });
    expect(await globalInstructionFile({ HOME: home })).toBe(`${home}/.config/ledger/AGENTS.md`);
    expect(await globalInstructionFile({ HOME: home, XDG_CONFIG_HOME: xdg })).toBeUndefined();
  });
});

describe("instructions in the config", () => {
  it("sends its files and globs (relative to the config, ~ expanded) after the project and global files; URLs and missing files are skipped", async () => {
    const dir = await sessionDir("configured/project");
    await layout({
      "configured/project/AGENTS.md": "project",
      "xdg/ledger/AGENTS.md": "global",
      "team/rules.md": "team rules",
      "team/guides/b.md": "guide b",
      "team/guides/deep/a.md": "guide deep a",
      "team/guides/notes.txt": "not a .md",
      "home/personal.md": "personal rules",
    });
    const g = path.join(t.dir, "team/guides");
    expect(await systemSent(dir)).toBe(
      `${defaultPrompt(dir)}\n\n` +
        `Instructions from: ${dir}/AGENTS.md\nproject\n\n` +
        `Instructions from: ${xdg}/ledger/AGENTS.md\nglobal\n\n` +
        `Instructions from: ${t.dir}/team/rules.md\nteam rules\n\n` +
        `Instructions from: ${g}/b.md\nguide b\n\n` +
        `Instructions from: ${g}/deep/a.md\nguide deep a\n\n` +
        `Instructions from: ${home}/personal.md\npersonal rules`,
    );
    expect(rulesRequests).toBe(0);
  });

  it("sends a file once when the project, the global file and a glob name it", async () => {
    const dir = await sessionDir("team");
    await layout({ "team/rules.md": "team rules", "team/guides/AGENTS.md": "guide" });
    // The session directory is t.dir/team/guides: its AGENTS.md is also matched by team/guides/**/*.md.
    const guides = path.join(dir, "guides");
    expect(await systemSent(guides)).toBe(
      `${defaultPrompt(guides)}\n\nInstructions from: ${guides}/AGENTS.md\nguide\n\nInstructions from: ${dir}/rules.md\nteam rules`,
    );
  });

  it("are relative to the config file's directory when loaded from a file", async () => {
    const etc = path.join(t.dir, "etc");
    await layout({ "etc/ledger.json": JSON.stringify({ instructions: ["rules.md", "~/x.md"] }) });
    const config = loadConfig({ explicitPath: path.join(etc, "ledger.json"), cwd: home, env: {} });
    expect(config.instructions).toEqual({ baseDir: etc, entries: ["rules.md", "~/x.md"] });
  });

  describe("a URL", () => {
    const stderr = captureStderr();
    it("is one of the config's start warnings (printed on stderr by serve and client commands), never fetched, not logged by the ledger itself", async () => {
      const where = path.join(t.dir, "url-config");
      await layout({
        "url-config/ledger.json": JSON.stringify({
          instructions: ["https://example.com/rules.md", "notes.md", "http://me:pw@example.com/b.md?token=secret#x"],
        }),
      });
      const file = path.join(where, "ledger.json");
      expect(loadConfig({ explicitPath: file, env: {} }).warnings).toEqual([
        `${file}: instructions: URLs are not fetched (out of scope); ignoring "https://example.com/rules.md", "http://example.com/b.md"`,
      ]);
      const other = await startTestLedger({ instructions: ["https://example.com/rules.md", "notes.md", "http://example.com/b.md"] });
      expect(other.ledger.deps.config.warnings).toEqual([
        'instructions: URLs are not fetched (out of scope); ignoring "https://example.com/rules.md", "http://example.com/b.md"',
      ]);
      await other.close();
      expect(stderr.written().filter((line) => line.includes("instructions:"))).toEqual([]);
    });
  });
});

describe("size limits", () => {
  it("cuts a file at the per-file limit (on a whole character) and the rest at the total limit, with notes", async () => {
    const dir = await sessionDir("big/repo/app");
    const big = "x" + "é".repeat(24_999) + "!"; // 50,000 bytes: byte 40,960 falls inside an "é"
    const medium = "m".repeat(30_000);
    await layout({ "big/repo/.git": "", "big/repo/app/AGENTS.md": big, "big/repo/AGENTS.md": medium, "xdg/ledger/AGENTS.md": "global" });
    const limits = `(limits: ${INSTRUCTION_FILE_BYTES} bytes a file, ${INSTRUCTIONS_TOTAL_BYTES} bytes for all instructions)`;
    const label = (file: string) => `Instructions from: ${file}\n`;
    const firstBytes = INSTRUCTION_FILE_BYTES - 1;
    // The total counts each file's "Instructions from:" line too.
    const rest = INSTRUCTIONS_TOTAL_BYTES - label(`${dir}/AGENTS.md`).length - firstBytes - label(`${t.dir}/big/repo/AGENTS.md`).length;
    expect(await systemSent(dir)).toBe(
      `${defaultPrompt(dir)}\n\n` +
        `${label(`${dir}/AGENTS.md`)}${"x" + "é".repeat((firstBytes - 1) / 2)}\n\n` +
        `[truncated: this file is 50000 bytes; only its first ${firstBytes} bytes are included ${limits}]\n\n` +
        `${label(`${t.dir}/big/repo/AGENTS.md`)}${"m".repeat(rest)}\n\n` +
        `[truncated: this file is 30000 bytes; only its first ${rest} bytes are included ${limits}]\n\n` +
        `[omitted: 1 instruction file, as the instructions already fill their ${INSTRUCTIONS_TOTAL_BYTES}-byte limit: ${xdg}/ledger/AGENTS.md]`,
    );
  });

  it("holds the total with many small files: the ones past it are named in one note, not each given a section", async () => {
    const dir = await sessionDir("many/repo");
    const files: Record<string, string> = { "many/repo/.git": "" };
    for (let i = 0; i < 300; i++) files[`many/repo/rules/r${String(i).padStart(3, "0")}.md`] = "r".repeat(1000);
    await layout(files);
    const sections = await instructionSections({ directory: dir, instructions: { baseDir: dir, entries: ["rules/*.md"] } });
    const rule = (i: number) => `${dir}/rules/r${String(i).padStart(3, "0")}.md`;
    const fit = Math.floor(INSTRUCTIONS_TOTAL_BYTES / (`Instructions from: ${rule(0)}\n`.length + 1000));
    expect(sections.slice(0, fit)).toEqual(Array.from({ length: fit }, (_, i) => `Instructions from: ${rule(i)}\n${"r".repeat(1000)}`));
    // The next file gets what is left, cut; the rest are named in one note, never opened.
    const label = `Instructions from: ${rule(fit)}\n`;
    const left = INSTRUCTIONS_TOTAL_BYTES - fit * (label.length + 1000) - label.length;
    const named = Array.from({ length: 10 }, (_, k) => rule(fit + 1 + k)).join(", ");
    const limits = `(limits: ${INSTRUCTION_FILE_BYTES} bytes a file, ${INSTRUCTIONS_TOTAL_BYTES} bytes for all instructions)`;
    expect(sections.slice(fit)).toEqual([
      `${label}${"r".repeat(left)}\n\n[truncated: this file is 1000 bytes; only its first ${left} bytes are included ${limits}]`,
      `[omitted: ${300 - fit - 1} instruction files, as the instructions already fill their ${INSTRUCTIONS_TOTAL_BYTES}-byte limit: ${named} and ${300 - fit - 11} more]`,
    ]);
  });
});
