import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import http2 from "node:http2";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IMMUTABLE, loadWebPage, PAGE_CSP } from "../../src/server/web-page.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";

// The browser page served by the ledger's own port (issue 17 item 1): headers, caching, 404s,
// refused traversals, and the RPC routes, /metrics and health left as they were. A fake
// web/dist in a temp dir, with a secret file next to it that no path may reach.

const INDEX = "<!doctype html><title>page</title><script type=module src=./assets/app-Ab12Cd34.js></script>\n";
const SCRIPT = "console.log('page');\n";
const TOKEN = "a-token-of-twenty-chars";

let root: string;
let t: TestLedger;
let withToken: TestLedger;
let bare: TestLedger;

beforeAll(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), "ledger-web-page-"));
  const dist = path.join(root, "dist");
  await mkdir(path.join(dist, "assets/sub"), { recursive: true });
  await writeFile(path.join(dist, "index.html"), INDEX);
  await writeFile(path.join(dist, "assets/app-Ab12Cd34.js"), SCRIPT);
  await writeFile(path.join(dist, "assets/app-Ef56.css"), "body{}\n");
  await writeFile(path.join(dist, "assets/sub/x.svg"), "<svg/>");
  await writeFile(path.join(root, "secret.txt"), "secret\n");
  const web = await loadWebPage(dist);
  expect(web).toBeDefined();
  t = await startTestLedger({}, { transport: "http", web });
  withToken = await startTestLedger({ auth: { token: TOKEN } }, { transport: "http", web });
  bare = await startTestLedger({}, { transport: "http" });
});

afterAll(async () => {
  await t?.close();
  await withToken?.close();
  await bare?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One HTTP/1.1 request with `rawPath` sent as is (fetch would normalize `..` and `%2e`). */
function request(
  base: string,
  rawPath: string,
  init: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Answer> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, path: rawPath, method: init.method ?? "GET", headers: init.headers },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body }));
      },
    );
    req.on("error", reject);
    req.end(init.body);
  });
}

describe("the page at /", () => {
  it("serves index.html at / and /index.html: HTML, the CSP, nosniff, not cached (revalidated by ETag)", async () => {
    for (const p of ["/", "/index.html", "/?server=x"]) {
      const res = await request(t.ledger.url, p);
      expect(res.status).toBe(200);
      expect(res.body).toBe(INDEX);
      expect(res.headers).toMatchObject({
        "content-type": "text/html; charset=utf-8",
        "content-security-policy": PAGE_CSP,
        "x-content-type-options": "nosniff",
        "cache-control": "no-cache",
        "content-length": String(INDEX.length),
      });
    }
    expect(PAGE_CSP).toMatch(/^default-src 'self'; /);
    expect(PAGE_CSP).toContain("connect-src 'self'");
    expect(PAGE_CSP).not.toContain("unsafe");
    const first = await request(t.ledger.url, "/");
    const again = await request(t.ledger.url, "/", { headers: { "if-none-match": first.headers.etag! } });
    expect(again.status).toBe(304);
    expect(again.body).toBe("");
    const listed = await request(t.ledger.url, "/", { headers: { "if-none-match": `"other", W/${first.headers.etag!}` } });
    expect(listed.status).toBe(304);
    expect((await request(t.ledger.url, "/", { headers: { "if-none-match": '"other"' } })).status).toBe(200);
  });

  it("serves hashed assets as immutable with their content types; HEAD has no body", async () => {
    const js = await request(t.ledger.url, "/assets/app-Ab12Cd34.js");
    expect(js).toMatchObject({ status: 200, body: SCRIPT });
    expect(js.headers).toMatchObject({ "content-type": "text/javascript; charset=utf-8", "cache-control": IMMUTABLE });
    expect((await request(t.ledger.url, "/assets/app-Ef56.css")).headers["content-type"]).toBe("text/css; charset=utf-8");
    expect((await request(t.ledger.url, "/assets/sub/x.svg")).headers["content-type"]).toBe("image/svg+xml");
    const head = await request(t.ledger.url, "/assets/app-Ab12Cd34.js", { method: "HEAD" });
    expect(head).toMatchObject({ status: 200, body: "" });
    expect(head.headers["content-length"]).toBe(String(SCRIPT.length));
  });

  it("answers 404 for directories, missing files and every traversal; 405 for POST to a file", async () => {
    const refused = [
      "/assets",
      "/assets/",
      "/assets/sub/",
      "/missing.js",
      "/../secret.txt",
      "/../package.json",
      "/assets/../index.html",
      "/%2e%2e/secret.txt",
      "/%2E%2E%2Fsecret.txt",
      "/assets%2fapp-Ab12Cd34.js",
      "/..%2fsecret.txt",
      "/assets/..%5c..%5csecret.txt",
      "/index%2ehtml",
      "//index.html",
    ];
    for (const p of refused) {
      const res = await request(t.ledger.url, p);
      expect([p, res.status]).toEqual([p, 404]);
      expect(res.body).not.toContain("secret");
      expect(res.headers["content-security-policy"]).toBe(PAGE_CSP);
      expect(res.headers["x-content-type-options"]).toBe("nosniff");
    }
    const post = await request(t.ledger.url, "/index.html", { method: "POST", body: "x" });
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe("GET, HEAD");
  });

  it("leaves RPCs (POST and Connect GET), health and /metrics alone, over HTTP/1.1 and h2c", async () => {
    const rpc = await request(t.ledger.url, "/ledger.v1.SessionService/ListSessions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(rpc.status).toBe(200);
    expect(rpc.headers["content-security-policy"]).toBeUndefined();
    // A GET of a procedure is the RPC stack's to answer (no method is side-effect free, so 405), not the page's.
    const get = await request(t.ledger.url, "/ledger.v1.SessionService/ListSessions?encoding=json&message=%7B%7D&connect=v1");
    expect(get.status).toBe(405);
    expect(get.headers["content-security-policy"]).toBeUndefined();
    const health = await request(t.ledger.url, "/grpc.health.v1.Health/Check", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(JSON.parse(health.body)).toEqual({ status: "SERVING" });
    const metrics = await request(t.ledger.url, "/metrics");
    expect(metrics.status).toBe(200);
    expect(metrics.headers["content-type"]).toMatch(/^text\/plain/);

    const session = http2.connect(t.ledger.url);
    try {
      const answer = await new Promise<{ status: number; csp: unknown; body: string }>((resolve, reject) => {
        const stream = session.request({ ":path": "/", ":method": "GET" });
        let body = "";
        let head: http2.IncomingHttpHeaders = {};
        stream.on("response", (h) => (head = h));
        stream.setEncoding("utf8");
        stream.on("data", (chunk: string) => (body += chunk));
        stream.on("end", () => resolve({ status: Number(head[":status"]), csp: head["content-security-policy"], body }));
        stream.on("error", reject);
      });
      expect(answer).toEqual({ status: 200, csp: PAGE_CSP, body: INDEX });
    } finally {
      session.close();
    }
  });

  it("with a token: the page loads without it, its RPCs still need it", async () => {
    expect((await request(withToken.ledger.url, "/")).status).toBe(200);
    const rpc = (auth?: string) =>
      request(withToken.ledger.url, "/ledger.v1.SessionService/ListSessions", {
        method: "POST",
        headers: { "content-type": "application/json", ...(auth ? { authorization: auth } : {}) },
        body: "{}",
      });
    expect((await rpc()).status).toBe(401);
    expect((await rpc(`Bearer ${TOKEN}`)).status).toBe(200);
  });

  it("without a page (--no-web, or no web/dist): / is not found and nothing carries the page's headers", async () => {
    const res = await request(bare.ledger.url, "/");
    expect(res.status).toBe(404);
    expect(res.headers["content-security-policy"]).toBeUndefined();
    expect(await loadWebPage(path.join(root, "no-such-dist"))).toBeUndefined();
  });
});
