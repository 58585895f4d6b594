import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import {
  McpResourceSchema,
  McpResourceTemplateSchema,
  McpServerSchema,
  McpServerStatus,
  McpServerType,
} from "../../gen/ledger/v1/mcp_pb.js";
import { bearerClient } from "../support/bearer-client.js";
import { connectError, expectConnectError } from "../support/errors.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { childPids, everything } from "../support/mcp-servers.js";

// Discovery (docs/api.md "MCP discovery"): ListMcpServers and ListMcpResources over a real
// server and a Connect client, with the published server-everything and a server built with the
// MCP SDK that pages its resources (MCP cursors).

/** A stdio server whose resources/list answers in pages of 2 (cursors "2", "4"), 5 resources and no templates. */
const PAGED_SERVER = `
import { Server } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/index.js"))};
import { StdioServerTransport } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/stdio.js"))};
import { ListResourcesRequestSchema, ListResourceTemplatesRequestSchema } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/types.js"))};

const all = [1, 2, 3, 4, 5].map((n) => ({ uri: "paged://item/" + n, name: "item " + n, size: n * 10 }));
const server = new Server({ name: "paged", version: "1.0.0" }, { capabilities: { resources: {} } });
server.setRequestHandler(ListResourcesRequestSchema, async (req) => {
  const at = Number(req.params?.cursor ?? 0);
  return { resources: all.slice(at, at + 2), ...(at + 2 < all.length ? { nextCursor: String(at + 2) } : {}) };
});
server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: [] }));
await server.connect(new StdioServerTransport());
`;

const DOCS = ["architecture.md", "extension.md", "features.md", "how-it-works.md", "instructions.md", "startup.md", "structure.md"];
const doc = (name: string) =>
  create(McpResourceSchema, {
    uri: `demo://resource/static/document/${name}`,
    name,
    description: `Static document file exposed from /docs: ${name}`,
    mimeType: "text/markdown",
  });
const TEMPLATES = [
  create(McpResourceTemplateSchema, {
    uriTemplate: "demo://resource/dynamic/text/{resourceId}",
    name: "Dynamic Text Resource",
    description: "Plaintext dynamic resource fabricated from the {resourceId} variable, which must be an integer.",
    mimeType: "text/plain",
  }),
  create(McpResourceTemplateSchema, {
    uriTemplate: "demo://resource/dynamic/blob/{resourceId}",
    name: "Dynamic Blob Resource",
    description: "Binary (base64) dynamic resource fabricated from the {resourceId} variable, which must be an integer.",
    mimeType: "application/octet-stream",
  }),
];

let scriptDir: string;
let t: TestLedger;
beforeAll(async () => {
  scriptDir = await mkdtemp(path.join(os.tmpdir(), "ledger-mcp-discovery-"));
  await writeFile(path.join(scriptDir, "paged.mjs"), PAGED_SERVER);
  t = await startTestLedger(
    {
      mcp: {
        everything: everything(),
        off: everything({ enabled: false }),
        broken: { type: "local", command: [path.join(scriptDir, "no-such-server")] },
        paged: { type: "local", command: [process.execPath, path.join(scriptDir, "paged.mjs")] },
      },
    },
    { transport: "http" },
  );
});
afterAll(async () => {
  await t?.close();
  await rm(scriptDir, { recursive: true, force: true });
});

describe("ListMcpServers", () => {
  it("without connect starts nothing: every server in config order, enabled ones idle, no counts", async () => {
    const before = childPids();
    const { servers } = await t.client.listMcpServers({});
    expect(servers).toEqual([
      create(McpServerSchema, { name: "everything", type: McpServerType.LOCAL, status: McpServerStatus.IDLE }),
      create(McpServerSchema, { name: "off", type: McpServerType.LOCAL, status: McpServerStatus.DISABLED }),
      create(McpServerSchema, { name: "broken", type: McpServerType.LOCAL, status: McpServerStatus.IDLE }),
      create(McpServerSchema, { name: "paged", type: McpServerType.LOCAL, status: McpServerStatus.IDLE }),
    ]);
    expect(childPids()).toEqual(before);
  });

  it("with connect starts the enabled servers: connected ones with their counts, a failed one with its error, a disabled one untouched", async () => {
    const { servers } = await t.client.listMcpServers({ connect: true });
    expect(servers.map((s) => ({ ...s, error: s.error.replace(/ENOENT.*/, "ENOENT") }))).toEqual([
      create(McpServerSchema, {
        name: "everything",
        type: McpServerType.LOCAL,
        status: McpServerStatus.CONNECTED,
        toolCount: 13,
        resourceCount: 7,
        resourceTemplateCount: 2,
      }),
      create(McpServerSchema, { name: "off", type: McpServerType.LOCAL, status: McpServerStatus.DISABLED }),
      create(McpServerSchema, {
        name: "broken",
        type: McpServerType.LOCAL,
        status: McpServerStatus.FAILED,
        error: `MCP server "broken" could not start: spawn ${path.join(scriptDir, "no-such-server")} ENOENT`,
      }),
      create(McpServerSchema, {
        name: "paged",
        type: McpServerType.LOCAL,
        status: McpServerStatus.CONNECTED,
        toolCount: 0,
        resourceCount: 5,
        resourceTemplateCount: 0,
      }),
    ]);
    // Once connected, a plain listing gives the counts too (and starts nothing more).
    const again = await t.client.listMcpServers({});
    expect(again.servers[0]).toEqual(servers[0]);
  });
});

describe("ListMcpResources", () => {
  it("lists server-everything's resources, then its resource templates, in its order", async () => {
    const res = await t.client.listMcpResources({ server: "everything" });
    expect(res.resources).toEqual(DOCS.map(doc));
    expect(res.resourceTemplates).toEqual(TEMPLATES);
    expect(res.nextPageToken).toBe("");
  });

  it("pages resources and templates together by page_size, each token going on after the last entry given", async () => {
    const pages = [];
    let pageToken = "";
    do {
      const res = await t.client.listMcpResources({ server: "everything", pageSize: 4, pageToken });
      pages.push({ resources: res.resources.map((r) => r.name), templates: res.resourceTemplates.map((r) => r.name) });
      pageToken = res.nextPageToken;
    } while (pageToken);
    expect(pages).toEqual([
      { resources: DOCS.slice(0, 4), templates: [] },
      { resources: DOCS.slice(4), templates: ["Dynamic Text Resource"] },
      { resources: [], templates: ["Dynamic Blob Resource"] },
    ]);
  });

  it("follows the server's own MCP cursors (resources/list in pages of 2) and keeps each resource's size", async () => {
    const res = await t.client.listMcpResources({ server: "paged" });
    expect(res.resources).toEqual(
      [1, 2, 3, 4, 5].map((n) => create(McpResourceSchema, { uri: `paged://item/${n}`, name: `item ${n}`, size: BigInt(n * 10) })),
    );
    expect(res.resourceTemplates).toEqual([]);
  });

  it("an unknown server is NOT_FOUND naming the configured ones (ErrorInfo MCP_SERVER_NOT_FOUND)", async () => {
    const error = await expectConnectError(
      t.client.listMcpResources({ server: "nope" }),
      Code.NotFound,
      'server: MCP server "nope" is not configured; configured MCP servers: "everything", "off", "broken", "paged"',
    );
    expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({
      reason: "MCP_SERVER_NOT_FOUND",
      metadata: { server: "nope", available: "everything,off,broken,paged" },
    });
    // Names every JavaScript object has are not configured servers either (they were "disabled").
    for (const server of ["__proto__", "toString", "constructor"]) {
      await expectConnectError(
        t.client.listMcpResources({ server }),
        Code.NotFound,
        `server: MCP server ${JSON.stringify(server)} is not configured; configured MCP servers: "everything", "off", "broken", "paged"`,
      );
    }
  });

  it("a disabled server is FAILED_PRECONDITION (MCP_SERVER_DISABLED) and stays unstarted", async () => {
    const error = await expectConnectError(
      t.client.listMcpResources({ server: "off" }),
      Code.FailedPrecondition,
      'server: MCP server "off" is disabled ("enabled": false)',
    );
    expect(error.findDetails(ErrorInfoSchema)[0]?.reason).toBe("MCP_SERVER_DISABLED");
  });

  it("a server that cannot start is UNAVAILABLE (MCP_SERVER_UNAVAILABLE) with its error", async () => {
    const error = await expectConnectError(
      t.client.listMcpResources({ server: "broken" }),
      Code.Unavailable,
      // Started by the test before: within the wait (1 s, 2 s, …) the use fails at once with its error.
      new RegExp(
        `^MCP server "broken" could not start: spawn ${escape(path.join(scriptDir, "no-such-server"))} ENOENT( \\(next attempt in \\d+ ms\\))?$`,
      ),
    );
    expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({ reason: "MCP_SERVER_UNAVAILABLE", metadata: { server: "broken" } });
  });

  it("refuses a token of another server, a forged token and an empty server name as INVALID_ARGUMENT", async () => {
    const { nextPageToken } = await t.client.listMcpResources({ server: "everything", pageSize: 1 });
    await expectConnectError(
      t.client.listMcpResources({ server: "paged", pageToken: nextPageToken }),
      Code.InvalidArgument,
      'page_token: continues the resources of MCP server "everything", not "paged"',
    );
    await expectConnectError(
      t.client.listMcpResources({ server: "everything", pageToken: "not-a-token" }),
      Code.InvalidArgument,
      "page_token: is not a page token issued by this service",
    );
    await expectConnectError(t.client.listMcpResources({ server: "" }), Code.InvalidArgument, "server: must not be empty");
  });
});

describe("MCP discovery and tenants", () => {
  const SECRET = "a-shared-secret-of-at-least-32-bytes!!";
  let tenanted: TestLedger;
  const tokenOf = (org: string, scope = "ledger:read") =>
    new SignJWT({ sub: "alice", org, scope })
      .setProtectedHeader({ alg: "HS256" })
      .setExpirationTime("5m")
      .sign(new TextEncoder().encode(SECRET));
  beforeAll(async () => {
    tenanted = await startTestLedger(
      {
        mcp: { everything: everything() },
        auth: { jwt: { secret: SECRET, tenant_claim: "org" } },
        tenants: { acme: { mcp: true }, globex: {} },
      },
      { transport: "http" },
    );
  });
  afterAll(() => tenanted?.close());

  it("a read token of a tenant with tenants.<name>.mcp lists; one of a tenant without it is PERMISSION_DENIED (MCP_NOT_ALLOWED)", async () => {
    const acme = bearerClient(tenanted.ledger.url, await tokenOf("acme"));
    expect((await acme.listMcpServers({})).servers.map((s) => s.name)).toEqual(["everything"]);
    expect((await acme.listMcpResources({ server: "everything", pageSize: 1 })).resources.map((r) => r.name)).toEqual(["architecture.md"]);
    const globex = bearerClient(tenanted.ledger.url, await tokenOf("globex"));
    for (const call of [globex.listMcpServers({}), globex.listMcpResources({ server: "everything" })]) {
      const error = await expectConnectError(
        call,
        Code.PermissionDenied,
        "MCP servers are not available to tenant globex (tenants.globex.mcp)",
      );
      expect(error.findDetails(ErrorInfoSchema)[0]?.reason).toBe("MCP_NOT_ALLOWED");
    }
  });
});

/** `text` with the characters special in a regular expression escaped. */
function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

describe("a local server that cannot start", () => {
  it("repeated ListMcpServers{connect} start it once per wait (1 s, then 2 s, …), not once per call; uses meanwhile fail at once", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-mcp-backoff-"));
    const starts = path.join(dir, "starts");
    // Each start appends a line, then the process exits before answering initialize.
    const command = ["sh", "-c", `echo start >> '${starts}'; exit 3`];
    const ledger = await startTestLedger({ mcp: { crashing: { type: "local", command } } }, { transport: "http" });
    const startCount = async () => (await readFile(starts, "utf8").catch(() => "")).split("\n").filter(Boolean).length;
    try {
      const first = (await ledger.client.listMcpServers({ connect: true })).servers[0]!;
      const failedAt = Date.now();
      expect(first).toMatchObject({ name: "crashing", status: McpServerStatus.FAILED });
      expect(first.error).toMatch(/^MCP server "crashing" could not start: /);
      expect(await startCount()).toBe(1);
      for (let i = 0; i < 5; i++) {
        const again = (await ledger.client.listMcpServers({ connect: true })).servers[0]!;
        expect(again).toEqual(first);
      }
      // Within the first wait, a use fails at once with the wait's end; on a machine so slow that
      // the second passed (.ci/run under load, 2026-12-02), it may have started it again instead.
      const used = await connectError(ledger.client.listMcpResources({ server: "crashing" }));
      expect(used.code).toBe(Code.Unavailable);
      const waiting = new RegExp(`^${escape(first.error)} \\(next attempt in \\d+ ms\\)$`);
      if (Date.now() - failedAt < 1_000) expect(used.rawMessage).toMatch(waiting);
      else expect(used.rawMessage.startsWith(first.error)).toBe(true);
      // Six calls in the first second started it once (a machine so slow that the second passed may have started it twice).
      expect(await startCount()).toBe(Date.now() - failedAt < 1_000 ? 1 : 2);
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      const before = await startCount();
      await ledger.client.listMcpServers({ connect: true });
      await ledger.client.listMcpServers({ connect: true });
      expect(await startCount()).toBe(before + 1);
    } finally {
      await ledger.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
