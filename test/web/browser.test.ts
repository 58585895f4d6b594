import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { build } from "vite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SignJWT } from "jose";
import { loadWebPage, PAGE_CSP } from "../../src/server/web-page.js";
import { startTestLedger } from "../support/ledger.js";
import { startFakeOpenAI, type FakeOpenAI, type ScriptedReply } from "../support/openai-server.js";
import { spawnServe, type ServeProcess } from "../support/serve-process.js";
import { compatibleProvider } from "../support/mock-models.js";
import { text } from "../support/prompt.js";

// The browser client (web/) end to end: built with Vite, served at / by a real `ledger serve`
// process (LEDGER_WEB_DIR names the fresh build; the page runs under the server's
// Content-Security-Policy and talks to its own origin), driven in
// headless Chromium (Debian's /usr/bin/chromium; playwright-core never downloads a browser)
// against a real ledger whose model is the scripted fake OpenAI server. The screenshot is
// saved to test/web/artifacts/browser.png.

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
// .ci/run installs Chromium and sets LEDGER_BROWSER_TEST_REQUIRED=1: there a missing browser fails.
const REQUIRED = process.env.LEDGER_BROWSER_TEST_REQUIRED === "1";
const MISSING = existsSync(CHROMIUM)
  ? undefined
  : `${CHROMIUM} not found: install it (apt-get install chromium) or set CHROMIUM_PATH; skipping the browser test`;
if (MISSING && !REQUIRED) console.warn(MISSING);

const WEB = path.resolve(import.meta.dirname, "../../web");
const SCREENSHOT = path.resolve(import.meta.dirname, "artifacts/browser.png");
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const PROMPT = "What do the notes say? My file is attached.";
const ATTACHED = "hi from the browser\n";
const ANSWER_CHUNKS = ["The notes say ", "the launch code ", "is 0000, and ", "your file says hi."];
const ANSWER = ANSWER_CHUNKS.join("");

let outDir: string;
let profileDir: string;
let fake: FakeOpenAI;
let t: ServeProcess;
let context: BrowserContext;
let page: Page;
const pageErrors: string[] = [];

beforeAll(async () => {
  if (MISSING && REQUIRED) throw new Error(MISSING.replace("; skipping the browser test", " (LEDGER_BROWSER_TEST_REQUIRED=1)"));
  if (MISSING) return;
  outDir = await mkdtemp(path.join(os.tmpdir(), "ledger-web-dist-"));
  await build({ root: WEB, configFile: path.join(WEB, "vite.config.ts"), logLevel: "warn", build: { outDir, emptyOutDir: true } });

  fake = await startFakeOpenAI();
  t = await spawnServe(
    {
      model: "local/qwen",
      provider: {
        local: compatibleProvider(fake.url, { qwen: { name: "Qwen (fake)" } }, "test"),
      },
      // The second test's writes wait for an answer from the page; the first test only reads.
      agent: { build: { permission: { write: "ask" } } },
    },
    { LEDGER_WEB_DIR: outDir },
  );
  // The page's line follows the listening line on the other pipe: wait for it rather than race it.
  const [pageLine] = await t.waitForStderr(/^browser page: \S+\n/m);
  expect(pageLine).toBe(`browser page: ${t.ledger.url}/\n`);
  await writeFile(path.join(t.dir, "notes.txt"), "The launch code is 0000.\n");

  profileDir = await mkdtemp(path.join(os.tmpdir(), "ledger-web-chromium-"));
  context = await chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    args: CHROMIUM_ARGS,
    headless: true,
    viewport: { width: 1280, height: 820 },
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (error) => pageErrors.push(`pageerror: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error") pageErrors.push(`console: ${message.text()} (${message.location().url})`);
  });
  // Record every tool state and assistant text the page renders, to check that it updated live
  // (the renderer replaces a part's element on each change). A string: no DOM types here.
  await page.addInitScript(`
    window.__seen = { tools: [], texts: [] };
    new MutationObserver((records) => {
      for (const r of records) for (const n of r.addedNodes) {
        if (!(n instanceof HTMLElement)) continue;
        for (const el of [n, ...n.querySelectorAll(".part")]) {
          if (!el.closest(".message.assistant")) continue;
          if (el.matches(".part.tool")) window.__seen.tools.push(el.dataset.state);
          else if (el.matches(".part.text")) window.__seen.texts.push(el.textContent);
        }
      }
    }).observe(document, { childList: true, subtree: true });
  `);
}, 120_000);

afterAll(async () => {
  await context?.close();
  await t?.close();
  await fake?.close();
  for (const dir of [outDir, profileDir]) if (dir) await rm(dir, { recursive: true, force: true });
});

describe("browser client", () => {
  it("creates a session, sends a prompt with an attached file, and renders the streamed reply and tool state", async (ctx) => {
    if (MISSING) ctx.skip(MISSING);

    fake.push(
      {
        kind: "stream",
        chunks: [{ toolCall: { id: "call_1", name: "read", arguments: JSON.stringify({ filePath: "notes.txt" }) } }],
        delayMs: 100,
        usage: { prompt_tokens: 812, completion_tokens: 9 },
      },
      {
        kind: "stream",
        chunks: ANSWER_CHUNKS.map((text) => ({ text })),
        delayMs: 250,
        usage: { prompt_tokens: 871, completion_tokens: 14 },
      },
    );

    const loaded = await page.goto(`${t.ledger.url}/`);
    expect(loaded?.status()).toBe(200);
    expect(await loaded?.headerValue("content-security-policy")).toBe(PAGE_CSP);
    await page.locator("body[data-ready=true]").waitFor();
    expect(await page.locator("#server-url").textContent()).toBe(t.ledger.url);

    await page.locator("#directory").fill(t.dir);
    await page.locator("#title").fill("browser e2e");
    await page.locator("#create-session").click();
    await page.locator("#prompt-text:not([disabled])").waitFor();
    const sessionId = (await page.evaluate("location.hash.slice(1)")) as string;
    expect(sessionId).toMatch(/^ses_[0-9A-HJKMNP-TV-Z]{26}$/);
    await expect.poll(() => page.locator(`#sessions [data-session-id="${sessionId}"]`).count()).toBe(1);

    await page.locator("#prompt-text").fill(PROMPT);
    await page.locator("#prompt-file").setInputFiles({ name: "hello.txt", mimeType: "text/plain", buffer: Buffer.from(ATTACHED) });
    await page.locator("#send").click();

    const tool = page.locator(".message.assistant .part.tool[data-tool=read]");
    const reply = page.locator(".message.assistant .part.text[data-done=true]", { hasText: ANSWER });
    try {
      await tool.locator(".badge.completed").waitFor({ timeout: 30_000 });
      await reply.waitFor({ timeout: 30_000 });
      await page.locator("#status[data-status=idle]").waitFor({ timeout: 30_000 });
    } finally {
      await mkdir(path.dirname(SCREENSHOT), { recursive: true });
      await page.screenshot({ path: SCREENSHOT });
    }

    // The reply and the tool call as rendered.
    expect(await reply.textContent()).toBe(ANSWER);
    expect(await tool.getAttribute("data-state")).toBe("completed");
    expect(await tool.locator(".badge").textContent()).toBe("completed");
    expect(await tool.textContent()).toContain("notes.txt");
    expect(await page.locator("#error").isHidden()).toBe(true);

    // The user message: the text, the attached file (a data: URL read by the server as text).
    const user = page.locator(".message.user");
    await expect.poll(() => user.count()).toBe(1);
    expect(await user.locator(".part.text:not(.synthetic)").textContent()).toBe(PROMPT);
    expect(await user.locator(".part.file .filename").textContent()).toBe("hello.txt");
    expect(await user.locator(".part.file .mime").textContent()).toMatch(/^text\/plain/);
    expect(await user.locator(".part.synthetic").allTextContents()).toEqual(
      expect.arrayContaining([expect.stringContaining(ATTACHED.trim())]),
    );
    expect(await page.locator("#prompt-text").inputValue()).toBe("");

    // Rendered live: tool states before `completed`, and the answer growing chunk by chunk.
    const seen = (await page.evaluate("window.__seen")) as { tools: string[]; texts: string[] };
    expect(seen.tools.at(-1)).toBe("completed");
    expect(seen.tools.slice(0, seen.tools.indexOf("completed")).some((s) => s === "pending" || s === "running")).toBe(true);
    const partial = seen.texts.filter((s) => s.length > 0 && s.length < ANSWER.length && ANSWER.startsWith(s));
    expect(partial.length).toBeGreaterThanOrEqual(2);

    // What the ledger stored and what the model was sent.
    const { messages } = await t.client.listMessages({ sessionId });
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant"]);
    const file = messages[0]!.parts.find((p) => p.kind.case === "file")?.kind.value as { url: string; filename: string } | undefined;
    expect(file?.filename).toBe("hello.txt");
    expect(file?.url).toBe(`data:text/plain;base64,${Buffer.from(ATTACHED).toString("base64")}`);
    expect(JSON.stringify(fake.requests[0]?.body.messages)).toContain(ATTACHED.trim());

    // Reopening the session from the list renders the stored transcript the same way.
    await page.reload();
    await page.locator("body[data-ready=true]").waitFor();
    await page.locator(`#sessions [data-session-id="${sessionId}"]`).click();
    await page.locator(".message.assistant .part.text", { hasText: ANSWER }).waitFor();
    expect(await page.locator(".message.assistant .part.tool .badge.completed").count()).toBe(1);

    expect(pageErrors).toEqual([]);
  }, 120_000);

  it("a session that loads slowly neither replaces the one opened after it nor takes the focus from a field being typed in", async (ctx) => {
    if (MISSING) ctx.skip(MISSING);
    // Before the fix, a click on a session whose load finished late (under load) moved the focus
    // to the prompt box while the next test typed a title, so the session was created untitled.
    const slow = (await t.client.createSession({ directory: t.dir, title: "slow to load" })).session!.id;
    const quick = (await t.client.createSession({ directory: t.dir, title: "quick to load" })).session!.id;
    await page.goto(`${t.ledger.url}/`);
    await page.locator("body[data-ready=true]").waitFor();
    await page.locator(`#sessions [data-session-id="${quick}"]`).waitFor();
    // Runs `meanwhile` while the slow session's GetSession is held (the request itself is real),
    // then lets it answer and waits until the page has handled the slow session's load.
    const whileSlow = async (meanwhile: () => Promise<void>) => {
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      await page.route("**/GetSession", async (route) => {
        if (route.request().postDataBuffer()?.toString("latin1").includes(slow)) await held;
        await route.continue();
      });
      try {
        await meanwhile();
        const slowLoaded = page.waitForResponse(
          (r) => r.url().endsWith("/ListMessages") && !!r.request().postDataBuffer()?.toString("latin1").includes(slow),
        );
        release();
        await slowLoaded;
        await page.locator("body:not([data-opening])").waitFor();
        // The page handles the answer after Playwright sees it: give it a moment to (not) render it.
        await page.waitForTimeout(200);
      } finally {
        release();
        await page.unroute("**/GetSession");
      }
    };
    const shown = async () => ({
      head: await page.locator("#session-head strong").textContent(),
      hash: await page.evaluate("location.hash.slice(1)"),
      current: await page.locator(`#sessions [aria-current=true]`).getAttribute("data-session-id"),
    });

    await whileSlow(async () => {
      await page.locator(`#sessions [data-session-id="${slow}"]`).click();
      await page.locator(`#sessions [data-session-id="${quick}"]`).click();
      await page.locator("#session-head", { hasText: "quick to load" }).waitFor();
      await page.locator("#title").fill("typing a title");
    });
    expect(await shown()).toEqual({ head: "quick to load", hash: quick, current: quick });
    expect(await page.evaluate("document.activeElement?.id")).toBe("title");
    expect(await page.locator("#title").inputValue()).toBe("typing a title");

    // Through the address bar: to the slow session, and back to the one shown before it loaded.
    await whileSlow(async () => {
      await page.evaluate(`location.hash = "#${slow}"`);
      await page.evaluate(`location.hash = "#${quick}"`);
    });
    expect(await shown()).toEqual({ head: "quick to load", hash: quick, current: quick });
    await page.locator("#title").fill("");
    expect(pageErrors).toEqual([]);
  }, 60_000);

  it("shows a write's permission request with its diff; Allow once writes the file, Reject leaves it absent", async (ctx) => {
    if (MISSING) ctx.skip(MISSING);
    const dir = path.join(t.dir, "permissions");
    await mkdir(dir);
    const content = "Hello from the page.\n";
    const writeCall = (id: string, file: string): ScriptedReply => ({
      kind: "stream",
      chunks: [{ toolCall: { id, name: "write", arguments: JSON.stringify({ filePath: file, content }) } }],
    });
    fake.push(writeCall("call_w1", "hello.txt"), { kind: "stream", chunks: [{ text: "Created hello.txt." }] });

    const previous = (await page.evaluate("location.hash.slice(1)")) as string;
    await page.locator("#directory").fill(dir);
    await page.locator("#title").fill("permissions e2e");
    await page.locator("#create-session").click();
    // The first test's session is open: wait until the new one is (or say what the page shows instead).
    await page
      .locator("#session-head", { hasText: "permissions e2e" })
      .waitFor()
      .catch(async (error: unknown) => {
        const shown = await page.evaluate(
          "({ error: document.querySelector('#error')?.textContent, status: document.querySelector('#status')?.textContent, head: document.querySelector('#session-head')?.textContent })",
        );
        throw new Error(`the new session did not open: ${JSON.stringify(shown)}; page errors: ${JSON.stringify(pageErrors)}`, {
          cause: error,
        });
      });
    const sessionId = (await page.evaluate("location.hash.slice(1)")) as string;
    expect(sessionId).not.toBe(previous);
    expect(sessionId).toMatch(/^ses_[0-9A-HJKMNP-TV-Z]{26}$/);
    expect(await page.locator("#permissions").isHidden()).toBe(true);

    await page.locator("#prompt-text").fill("create hello.txt");
    await page.locator("#send").click();

    // The request as the page shows it: the tool, its pattern, the diff, three buttons.
    const panel = page.locator("#permissions");
    const request = panel.locator(".permission");
    await request.waitFor({ timeout: 30_000 });
    const [pending] = (await t.client.listPermissions({ sessionId })).permissions;
    expect(pending).toMatchObject({ sessionId, callId: "call_w1", permission: "write", patterns: ["hello.txt"] });
    expect(await request.getAttribute("data-permission-id")).toBe(pending!.id);
    expect(await request.locator(".permission-what").textContent()).toBe("write hello.txt");
    expect(await request.locator(".permission-diff").textContent()).toBe(
      "Index: hello.txt\n===================================================================\n--- hello.txt\n+++ hello.txt\n" +
        "@@ -0,0 +1,1 @@\n+Hello from the page.\n",
    );
    expect(await request.locator("button").allTextContents()).toEqual(["Allow once", "Always", "Reject"]);
    await expect(stat(path.join(dir, "hello.txt"))).rejects.toThrow(/ENOENT/);

    await request.locator("button[data-reply=allow-once]").click();
    await page.locator("#permissions[hidden]").waitFor({ state: "attached", timeout: 30_000 });
    expect(await request.count()).toBe(0);
    const reply = page.locator(".message.assistant .part.text[data-done=true]", { hasText: "Created hello.txt." });
    await reply.waitFor({ timeout: 30_000 });
    await page.locator("#status[data-status=idle]").waitFor({ timeout: 30_000 });
    expect(await readFile(path.join(dir, "hello.txt"), "utf8")).toBe(content);
    expect(await page.locator(".message.assistant .part.tool[data-tool=write]").getAttribute("data-state")).toBe("completed");
    expect(await page.locator(".message.assistant .part.patch").textContent()).toBe("changed: hello.txt");
    expect((await t.client.listPermissions({ sessionId })).permissions).toEqual([]);

    // What was stored: the step with the completed call and a patch part, then the answer.
    const { messages } = await t.client.listMessages({ sessionId });
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant"]);
    const step = messages[1]!.parts;
    expect(step.map((p) => p.kind.case)).toEqual(["stepStart", "tool", "stepFinish", "patch"]);
    const snapshot = step[0]!.kind.case === "stepStart" ? step[0]!.kind.value.snapshot : "";
    expect(snapshot).toMatch(/^[0-9a-f]{40}$/);
    expect(step[1]!.kind.value).toMatchObject({
      callId: "call_w1",
      tool: "write",
      state: {
        status: {
          case: "completed",
          value: { input: { filePath: "hello.txt", content }, output: "Wrote file successfully.", title: "hello.txt" },
        },
      },
    });
    expect(step[3]!.kind.value).toMatchObject({ hash: snapshot, files: ["hello.txt"] });
    expect(messages[2]!.parts.flatMap((p) => (p.kind.case === "text" ? [p.kind.value.text] : []))).toEqual(["Created hello.txt."]);

    // Reject: the call ends in error, the file is not written, the model answers.
    fake.push(writeCall("call_w2", "bye.txt"), { kind: "stream", chunks: [{ text: "Left it alone." }] });
    await page.locator("#prompt-text").fill("create bye.txt");
    await page.locator("#send").click();
    await request.waitFor({ timeout: 30_000 });
    expect(await request.locator(".permission-what").textContent()).toBe("write bye.txt");
    await request.locator("button[data-reply=reject]").click();
    await page.locator("#permissions[hidden]").waitFor({ state: "attached", timeout: 30_000 });
    await page.locator(".message.assistant .part.text[data-done=true]", { hasText: "Left it alone." }).waitFor({ timeout: 30_000 });
    await page.locator("#status[data-status=idle]").waitFor({ timeout: 30_000 });
    await expect(stat(path.join(dir, "bye.txt"))).rejects.toThrow(/ENOENT/);
    const rejected = "The user rejected permission to use this specific tool call. You may try again with different parameters.";
    const tools = page.locator(".message.assistant .part.tool[data-tool=write]");
    expect(await tools.nth(1).getAttribute("data-state")).toBe("error");
    expect(await tools.nth(1).locator(".tool-error").textContent()).toBe(rejected);
    const after = (await t.client.listMessages({ sessionId })).messages;
    expect(after.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant", "user", "assistant", "assistant"]);
    expect(after[4]!.parts.map((p) => p.kind.case)).toEqual(["stepStart", "tool", "stepFinish"]);
    expect(after[4]!.parts[1]!.kind.value).toMatchObject({
      callId: "call_w2",
      tool: "write",
      state: { status: { case: "error", value: { input: { filePath: "bye.txt", content }, error: rejected } } },
    });

    expect(pageErrors).toEqual([]);
  }, 120_000);

  it("follows a run another client started in the open session: its prompt, the request (answered here), the streamed answer and the status", async (ctx) => {
    if (MISSING) ctx.skip(MISSING);
    const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-web-follow-"));
    try {
      const { session } = await t.client.createSession({ directory: dir, title: "followed" });
      const sessionId = session!.id;
      await page.goto(`${t.ledger.url}/#${sessionId}`);
      await page.locator("body[data-ready=true]").waitFor();
      await page.locator("#session-head", { hasText: "followed" }).waitFor();
      await page.locator("#prompt-text").fill("draft the page user is typing");

      // Another client (not the page) prompts; the model proposes a write, then answers.
      fake.push(
        {
          kind: "stream",
          chunks: [{ toolCall: { id: "call_f1", name: "write", arguments: JSON.stringify({ filePath: "f.txt", content: "f\n" }) } }],
        },
        { kind: "stream", chunks: ["Wrote ", "f.txt ", "for you."].map((text) => ({ text })), delayMs: 150 },
      );
      await t.client.promptAsync({ sessionId, parts: [text("create f.txt")] });

      const user = page.locator(".message.user .part.text", { hasText: "create f.txt" });
      await user.waitFor({ timeout: 30_000 });
      // The part may show "pending" first (the call streamed, not yet run): wait for "running",
      // where it waits for the answer to its permission request.
      const tool = page.locator(".message.assistant .part.tool[data-tool=write]");
      await page.locator(".message.assistant .part.tool[data-tool=write][data-state=running]").waitFor({ timeout: 30_000 });
      await page.locator("#status[data-status=busy]").waitFor({ timeout: 30_000 });
      const request = page.locator("#permissions .permission");
      await request.waitFor({ timeout: 30_000 });
      expect(await request.locator(".permission-what").textContent()).toBe("write f.txt");
      await request.locator("button[data-reply=allow-once]").click();

      await page.locator(".message.assistant .part.text[data-done=true]", { hasText: "Wrote f.txt for you." }).waitFor({ timeout: 30_000 });
      await page.locator("#status[data-status=idle]").waitFor({ timeout: 30_000 });
      expect(await tool.getAttribute("data-state")).toBe("completed");
      expect(await page.locator(".message.assistant .part.patch").textContent()).toBe("changed: f.txt");
      expect(await readFile(path.join(dir, "f.txt"), "utf8")).toBe("f\n");
      // What the person was typing is left alone by another client's prompt.
      expect(await page.locator("#prompt-text").inputValue()).toBe("draft the page user is typing");
      // As many messages on the page as stored, in the same order.
      const stored = (await t.client.listMessages({ sessionId })).messages.map((m) => m.message!.kind.value!.id);
      expect(await page.locator("article.message").evaluateAll((nodes) => nodes.map((n) => n.getAttribute("data-message-id")))).toEqual(
        stored,
      );
      expect(pageErrors).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
  it("shows the open session's todo list: live from todo_updated, and from GetTodo when the page opens it", async (ctx) => {
    if (MISSING) ctx.skip(MISSING);
    const { session } = await t.client.createSession({ directory: t.dir, title: "todos" });
    const sessionId = session!.id;
    await page.goto(`${t.ledger.url}/#${sessionId}`);
    await page.locator("body[data-ready=true]").waitFor();
    await page.locator("#session-head", { hasText: "todos" }).waitFor();
    expect(await page.locator("#todos").isHidden()).toBe(true);

    const todos = [
      { id: "1", content: "Read the notes", status: "completed", priority: "high" },
      { id: "2", content: "Answer the question", status: "in_progress", priority: "medium" },
    ];
    fake.push(
      { kind: "stream", chunks: [{ toolCall: { id: "call_t1", name: "todowrite", arguments: JSON.stringify({ todos }) } }] },
      { kind: "stream", chunks: [{ text: "Planned." }] },
    );
    await t.client.promptAsync({ sessionId, parts: [text("plan it")] });
    const items = page.locator("#todos li");
    await page.locator("#todos li[data-todo-id='2']").waitFor({ timeout: 30_000 });
    const shown = () => items.evaluateAll((nodes) => nodes.map((n) => [n.getAttribute("data-status"), n.textContent]));
    const expected = [
      ["completed", "[x] Read the notes high"],
      ["in_progress", "[~] Answer the question medium"],
    ];
    expect(await shown()).toEqual(expected);
    expect(await page.locator("#todos .todos-head").textContent()).toBe("Todo (1/2 done)");

    await page.reload();
    await page.locator("body[data-ready=true]").waitFor();
    await page.locator("#todos li[data-todo-id='2']").waitFor({ timeout: 30_000 });
    expect(await shown()).toEqual(expected);
    expect(pageErrors).toEqual([]);
  }, 120_000);

  it("sends the token given as #token=… (JSON Web Tokens): lists only its holder's sessions; without one it says how to give it", async (ctx) => {
    if (MISSING) ctx.skip(MISSING);
    const secret = "a-shared-secret-of-at-least-32-bytes!!";
    const mint = (sub: string) =>
      new SignJWT({ sub }).setProtectedHeader({ alg: "HS256" }).setExpirationTime("5m").sign(new TextEncoder().encode(secret));
    const web = await loadWebPage(outDir);
    const jwtLedger = await startTestLedger({ auth: { jwt: { secret } } }, { transport: "http", web });
    const tab = await context.newPage();
    try {
      const [alice, bob] = [await mint("alice"), await mint("bob")];
      const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });
      const mine = (await jwtLedger.client.createSession({ directory: jwtLedger.dir, title: "alice's" }, bearer(alice))).session!.id;
      const theirs = (await jwtLedger.client.createSession({ directory: jwtLedger.dir, title: "bob's" }, bearer(bob))).session!.id;

      await tab.goto(`${jwtLedger.ledger.url}/#token=${alice}`);
      await expect.poll(() => tab.locator(`#sessions [data-session-id="${mine}"]`).count()).toBe(1);
      expect(await tab.locator(`#sessions [data-session-id="${theirs}"]`).count()).toBe(0);
      // The token left the address bar at once and stays in this tab's sessionStorage only.
      expect(new URL(tab.url()).hash).toBe("");
      expect(await tab.evaluate("sessionStorage.getItem('ledger-token')")).toBe(alice);

      const anonymous = await context.newPage();
      try {
        await anonymous.goto(`${jwtLedger.ledger.url}/`);
        await expect.poll(() => anonymous.locator("#error").textContent()).toContain("Unauthenticated (TOKEN_MISSING)");
        expect(await anonymous.locator("#error").textContent()).toContain("open the page as /#token=<your token>");
      } finally {
        await anonymous.close();
      }
    } finally {
      await tab.close();
      await jwtLedger.close();
    }
  });
});
