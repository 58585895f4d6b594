import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../support/cli.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";

// --url as a new user types it (a trial, 2026-12-02): without a scheme it failed later as
// "Unknown: Invalid URL"; a wrong scheme, a path or nothing listening failed without naming --url.

let other: http.Server; // answers 404 to everything, like a server that is not the ledger
let otherUrl: string;
beforeAll(async () => {
  other = http.createServer((_req, res) => res.writeHead(404).end("not here"));
  await new Promise<void>((resolve) => other.listen(0, "127.0.0.1", resolve));
  otherUrl = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => other.close(() => resolve())));

const sessions = (url: string) => runCli(["sessions", "--url", url], { cwd: process.cwd(), env: { PATH: process.env.PATH } });

describe("--url", () => {
  it.each([
    ["127.0.0.1:7411", `not a URL; expected http://host:port, e.g. http://127.0.0.1:7411 (the line "ledger serve" prints)`],
    ["ftp://127.0.0.1:7411", "the scheme is ftp; expected http://host:port (or https:// behind a TLS proxy)"],
  ])("%s is a usage error naming --url, before any request", async (url, why) => {
    expect(await sessions(url)).toMatchObject({
      code: 1,
      stdout: "",
      stderr: `error: option '--url <url>' argument '${url}' is invalid. ${why}\n(ledger <command> --help shows the usage)\n`,
    });
  });

  it("nothing listening: the error says to check that ledger serve runs there", async () => {
    const run = await sessions("http://127.0.0.1:9");
    expect(run).toMatchObject({ code: 1, stdout: "" });
    expect(run.stderr).toBe(
      `error: Unavailable: connect ECONNREFUSED 127.0.0.1:9 (--url http://127.0.0.1:9: is "ledger serve" running there?)\n`,
    );
  });

  it("another server, or a path after the address: no ledger service there", async () => {
    for (const url of [otherUrl, `${otherUrl}/prefix`]) {
      const run = await sessions(url);
      expect(run).toMatchObject({ code: 1, stdout: "" });
      expect(run.stderr).toBe(
        `error: Unimplemented: HTTP 404 (--url ${url}: no ledger service there (or one too old for this command); give the server's base URL, as "ledger serve" prints it (listening on http://host:port))\n`,
      );
    }
    // A JSON 404 (a model server) and a 501 (python -m http.server) say the same (a trial,
    // 2026-12-04: "error: Unimplemented: " with nothing after it, and "error: Unknown: HTTP 501").
    const answering = async (status: number, type: string, body: string): Promise<string> => {
      const server = http.createServer((_req, res) => res.writeHead(status, { "content-type": type }).end(body));
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      try {
        const run = await sessions(url);
        expect(run).toMatchObject({ code: 1, stdout: "" });
        expect(run.stderr).toContain(`--url ${url}: no ledger service there (or one too old for this command);`);
        return run.stderr;
      } finally {
        await new Promise<void>((resolve) => server.close(() => resolve()));
      }
    };
    expect(await answering(404, "application/json", '{"error":{"message":"Not found"}}')).toMatch(/^error: Unimplemented: --url /);
    expect(await answering(501, "text/html", "<h1>Unsupported method</h1>")).toMatch(/^error: Unknown: HTTP 501 \(--url/);
  });

  it('ledger web --url with nothing listening: names --url and the reason (fetch said only "fetch failed")', async () => {
    const run = await runCli(["web", "--url", "http://127.0.0.1:59999"], { cwd: process.cwd(), env: { PATH: process.env.PATH } });
    expect(run).toMatchObject({ code: 1, stdout: "" });
    expect(run.stderr).toBe(`error: --url http://127.0.0.1:59999: cannot reach it (ECONNREFUSED); is "ledger serve" running there?\n`);
  });

  it("https:// to a plaintext port: the server speaks plain HTTP", async () => {
    const url = otherUrl.replace("http:", "https:");
    const run = await sessions(url);
    expect(run).toMatchObject({ code: 1, stdout: "" });
    // Only the hint: the TLS library's text ("write EPROTO 802C...:SSL routines:...") tells a user nothing.
    expect(run.stderr).toBe(
      `error: Unavailable: --url ${url}: "ledger serve" speaks plain HTTP; use http://, or https:// only for a TLS proxy in front of it\n`,
    );
  });
});

describe("--url against a running ledger", () => {
  let t: TestLedger;
  beforeAll(async () => {
    t = await startTestLedger();
  });
  afterAll(() => t?.close());
  const env = { PATH: process.env.PATH };

  it('messages of a session without messages says "no messages" (it printed nothing; --json prints no line)', async () => {
    const { session } = await t.client.createSession({ directory: t.dir });
    const run = await runCli(["messages", session!.id, "--url", t.ledger.url], { cwd: t.dir, env });
    expect(run).toEqual({ code: 0, stdout: "no messages\n", stderr: "" });
    const json = await runCli(["messages", session!.id, "--json", "--url", t.ledger.url], { cwd: t.dir, env });
    expect(json).toEqual({ code: 0, stdout: "", stderr: "" });
  });

  it("--url with --db is a usage error (--db was ignored), before any request", async () => {
    for (const args of [["sessions"], ["messages", "ses_01JAAAAAAAAAAAAAAAAAAAAAAA"], ["prompt", "--no-reply", "hi"]]) {
      const run = await runCli([...args, "--url", t.ledger.url, "--db", "elsewhere"], { cwd: t.dir, env });
      expect(run).toMatchObject({
        code: 1,
        stdout: "",
        stderr:
          "error: --url and --db: with --url the server at that address uses its own database; pass one of them\n" +
          "(ledger <command> --help shows the usage)\n",
      });
    }
    expect((await t.client.listSessions({})).sessions).toHaveLength(1);
    // --config too: it was read by nobody.
    for (const args of [["sessions"], ["mcp"]]) {
      const run = await runCli([...args, "--url", t.ledger.url, "--config", "ledger.json"], { cwd: t.dir, env });
      expect(run).toMatchObject({
        code: 1,
        stdout: "",
        stderr:
          "error: --url and --config: with --url the server at that address uses its own configuration; pass one of them\n" +
          "(ledger <command> --help shows the usage)\n",
      });
    }
  });
});
