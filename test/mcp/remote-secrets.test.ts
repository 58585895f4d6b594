import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { buildConfig, configFileSchema } from "../../src/config/config.js";
import { startMcp, type McpReader } from "../../src/mcp/client.js";
import { logger } from "../../src/observe/log.js";
import { freePort, recordingProxy, startEverythingHttp, type EverythingHttp, type RecordingProxy } from "../support/mcp-http.js";
import { captureStderr } from "../support/stderr.js";

// A remote server's `headers` (a bearer token, an API key) and its URL's query are secrets: they
// go on its requests and nowhere else — not in errors, statuses, ListMcpServers, nor log records
// (stderr captured at the debug level), whatever the server does.

const SECRETS = ["s3cr3t-t0ken", "k3y-v4lue", "qu3ry-s3cret"];
const headers = { Authorization: "Bearer s3cr3t-t0ken", "X-Api-Key": "k3y-v4lue" };
const ARCHITECTURE = "demo://resource/static/document/architecture.md";

const stderr = captureStderr();
let server: EverythingHttp;
let proxy: RecordingProxy;
let level: typeof logger.level;
beforeAll(async () => {
  server = await startEverythingHttp("streamableHttp");
  proxy = await recordingProxy(new URL(server.url).origin);
  level = logger.level;
  logger.setLevel("debug");
});
afterAll(async () => {
  logger.setLevel(level);
  await proxy?.close();
  await server?.stop();
});
const opened: McpReader[] = [];
afterEach(async () => {
  proxy.answer = undefined;
  await Promise.all(opened.splice(0).map((m) => m.close()));
});

/** The messages of `error` and of its causes, in order. */
function messages(error: unknown): string[] {
  const out: string[] = [];
  for (let e = error; e instanceof Error; e = e.cause) out.push(e.message);
  return out;
}

describe("a remote server's headers and URL query", () => {
  it("never appear in errors, statuses, ListMcpServers or log records (down, 401, 500, a broken session, shut down)", async () => {
    const down = `http://127.0.0.1:${await freePort()}/mcp?key=qu3ry-s3cret`;
    const via = `${proxy.url}/mcp?key=qu3ry-s3cret`;
    const mcp = await startMcp(
      buildConfig(
        configFileSchema.parse({
          mcp: {
            down: { type: "remote", url: down, headers },
            locked: { type: "remote", url: via, headers },
            broken: { type: "remote", url: via, headers },
            good: { type: "remote", url: via, headers },
          },
        }),
        undefined,
        process.cwd(),
      ),
    );
    opened.push(mcp);
    const seen: string[] = [];
    const attempt = async (use: Promise<unknown>) => seen.push(...(await use.then(() => [], messages)));
    // The good one connects, with the headers on its requests.
    await attempt(mcp.read("good", ARCHITECTURE));
    expect(proxy.requests.at(-1)?.headers.authorization).toBe(headers.Authorization);
    // The others fail: a closed port, a 401, a 500 on every request.
    await attempt(mcp.read("down", ARCHITECTURE));
    await attempt(mcp.callTool("down", "echo", { message: "x" }));
    proxy.answer = (r) => (r.path.includes("qu3ry") && !r.headers["mcp-session-id"] ? 401 : undefined);
    await attempt(mcp.read("locked", ARCHITECTURE));
    proxy.answer = () => 500;
    await attempt(mcp.read("broken", ARCHITECTURE));
    // The good one's session breaks (500 on its requests), then MCP shuts down.
    await attempt(mcp.read("good", ARCHITECTURE));
    proxy.answer = undefined;
    const status = mcp.status();
    expect(Object.fromEntries(Object.entries(status).map(([name, s]) => [name, s.status]))).toEqual({
      down: "failed",
      locked: "needs_auth",
      broken: "failed",
      good: "idle",
    });
    const servers = await mcp.servers();
    await mcp.close();
    await attempt(mcp.read("good", ARCHITECTURE));
    expect(seen.length).toBeGreaterThanOrEqual(6);
    const logged = stderr.written().join("");
    const everything = [...seen, JSON.stringify(status), JSON.stringify(servers), logged].join("\n");
    for (const secret of SECRETS) expect(everything).not.toContain(secret);
  });
});
