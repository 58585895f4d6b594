import { mkdir, mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PAGE_CSP } from "../../src/server/web-page.js";
import { finished, runCli, spawnCli, startCli, waitForOutput, type InProcessCli } from "../support/cli.js";

// `ledger serve` serves the browser page and says where on stderr; `--no-web` turns it off; a
// missing web/dist is a note, not a crash; `ledger web` prints the page's address, of a server it
// starts or of `--url` (issue 17 item 1). In-process (`main(argv, io)`) with a fake web/dist
// named by LEDGER_WEB_DIR, and once as a real process (bin/ledger.js, dist/) with the real web/dist.

const LISTENING = /^session-ledger listening on (http:\/\/127\.0\.0\.1:\d+)\n/;
const INDEX = "<!doctype html><title>ledger page</title>\n";

let dir: string;
let dist: string;

beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-cli-web-")));
  dist = path.join(dir, "dist");
  await mkdir(path.join(dist, "assets"), { recursive: true });
  await writeFile(path.join(dist, "index.html"), INDEX);
  await writeFile(path.join(dist, "assets/app-1234abcd.js"), "1;\n");
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

const place = (webDir = dist) => ({ cwd: dir, env: { PATH: process.env.PATH, LEDGER_WEB_DIR: webDir } });

/** Runs `serve`-like `args` until it prints `pattern`, hands the match to `check`, then SIGTERMs it. */
async function whileRunning(cli: InProcessCli, pattern: RegExp, check: (url: string) => Promise<void>): Promise<void> {
  try {
    const [, url] = await cli.waitForStdout(pattern);
    await check(url!);
  } finally {
    cli.signal("SIGTERM");
  }
  const run = await cli.done;
  expect(run.code, run.stderr).toBe(0);
}

describe("ledger serve and the page", () => {
  it("prints the same listening line, the page's address on stderr, and serves the page; ledger web --url prints it", async () => {
    const serve = startCli(["serve", "--port", "0", "--db", ":memory:"], place());
    await whileRunning(serve, LISTENING, async (url) => {
      expect(serve.stdout()).toBe(`session-ledger listening on ${url}\n`);
      expect(serve.stderr()).toContain(`\nbrowser page: ${url}/\n`);
      expect(serve.stderr()).toContain("\nrelay: none (one process)\n");
      const res = await fetch(`${url}/`);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-security-policy")).toBe(PAGE_CSP);
      expect(await res.text()).toBe(INDEX);

      const web = await runCli(["web", "--url", url], place());
      expect(web).toMatchObject({ code: 0, stdout: `${url}/\n`, stderr: "" });
      const slash = await runCli(["web", "--url", `${url}/`], place());
      expect(slash.stdout).toBe(`${url}/\n`);
    });
  });

  it("--no-web serves no page and prints no page line; ledger web --url then fails saying why", async () => {
    const serve = startCli(["serve", "--port", "0", "--db", ":memory:", "--no-web"], place());
    await whileRunning(serve, LISTENING, async (url) => {
      expect(serve.stderr()).not.toContain("browser page");
      expect((await fetch(`${url}/`)).status).toBe(404);
      const web = await runCli(["web", "--url", url], place());
      expect(web.code).toBe(1);
      expect(web.stdout).toBe("");
      expect(web.stderr).toBe(
        `error: ${url}/ serves no browser page (HTTP 404): that server runs with --no-web or without web/dist (npm run build:web)\n`,
      );
    });
  });

  it("without web/dist: one note on stderr, the RPCs are served, ledger web refuses to start", async () => {
    const missing = path.join(dir, "no-dist");
    const serve = startCli(["serve", "--port", "0", "--db", ":memory:"], place(missing));
    await whileRunning(serve, LISTENING, async (url) => {
      const note = `note: no browser page at /: ${missing}/index.html is missing (build the page with "npm run build:web"); serving the RPCs only\n`;
      expect(serve.stderr().split(note)).toHaveLength(2);
      expect(serve.stderr()).not.toContain("browser page:");
      expect((await fetch(`${url}/`)).status).toBe(404);
      const rpc = await fetch(`${url}/ledger.v1.SessionService/ListSessions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
      });
      expect(rpc.status).toBe(200);
    });
    const web = await runCli(["web", "--port", "0", "--db", ":memory:"], place(missing));
    expect(web.code).toBe(1);
    expect(web.stderr).toContain(`error: no browser page to serve: ${missing}/index.html is missing`);
  });

  it("ledger web starts a server and prints only the page's address on stdout", async () => {
    const web = startCli(["web", "--port", "0", "--db", ":memory:"], place());
    await whileRunning(web, /^(http:\/\/127\.0\.0\.1:\d+)\/\n/, async (url) => {
      expect(web.stdout()).toBe(`${url}/\n`);
      expect(web.stderr()).toContain(`browser page: ${url}/ (open it in a browser; Ctrl-C stops the server)\n`);
      expect(await (await fetch(`${url}/`)).text()).toBe(INDEX);
    });
  });

  it("bin/ledger.js serve (dist/) serves the built web/dist with its hashed assets", async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, LEDGER_LOG_LEVEL: "warn" };
    for (const name of ["NODE_OPTIONS", "LEDGER_CONFIG", "DATABASE_URL", "LEDGER_WEB_DIR"]) delete env[name];
    const child = spawnCli(["serve", "--port", "0", "--db", ":memory:"], { cwd: dir, env });
    const exited = finished(child);
    try {
      const [, url] = await waitForOutput(child, LISTENING, exited);
      const page = await fetch(`${url}/`);
      expect(page.headers.get("cache-control")).toBe("no-cache");
      const html = await page.text();
      const asset = /src="\.\/(assets\/[^"]+\.js)"/.exec(html)?.[1];
      expect(asset, html).toBeDefined();
      const js = await fetch(`${url}/${asset}`);
      expect(js.status).toBe(200);
      expect(js.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
      expect(js.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    } finally {
      child.kill("SIGTERM");
    }
    const run = await exited;
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout.split("\n").filter(Boolean)).toHaveLength(1);
    expect(run.stderr).toMatch(/^browser page: http:\/\/127\.0\.0\.1:\d+\/$/m);
  }, 60_000);
});
