import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Code, ConnectError } from "@connectrpc/connect";
import { SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { buildConfig, ConfigError, configFileSchema } from "../../src/config/config.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { file, text } from "../support/prompt.js";

// Per-tenant file roots (docs/security.md): a tenant's sessions live inside its roots, and their
// file drafts read inside the session directory and those roots only, not the global `roots`.

const SECRET = "a-shared-secret-of-at-least-32-bytes!!";
const STATIC = "static-token-for-the-operator-0123";

let base: string;
let t: TestLedger;
const dirs = { acme: "", globex: "", shared: "" };

const jwt = (sub: string, org: string) =>
  new SignJWT({ sub, org }).setProtectedHeader({ alg: "HS256" }).setExpirationTime("5m").sign(new TextEncoder().encode(SECRET));
const as = async (sub: string, org: string) => ({ headers: { authorization: `Bearer ${await jwt(sub, org)}` } });

beforeAll(async () => {
  base = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-tenants-")));
  for (const name of Object.keys(dirs) as (keyof typeof dirs)[]) {
    dirs[name] = path.join(base, name);
    await mkdir(path.join(dirs[name], "project"), { recursive: true });
    await writeFile(path.join(dirs[name], "notes.txt"), `${name}'s notes\n`);
  }
  t = await startTestLedger(
    {
      roots: [dirs.shared],
      auth: { token: STATIC, jwt: { secret: SECRET, tenant_claim: "org" } },
      tenants: { acme: { roots: [dirs.acme] }, globex: { roots: [dirs.globex] } },
    },
    { transport: "http" },
  );
});
afterAll(async () => {
  await t?.close();
  if (base) await rm(base, { recursive: true, force: true });
});

async function refusal(call: Promise<unknown>): Promise<{ code: Code; message: string; reason?: string }> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => ConnectError.from(e),
  );
  expect(error, "the call should fail").toBeDefined();
  return { code: error!.code, message: error!.rawMessage, reason: error!.findDetails(ErrorInfoSchema)[0]?.reason };
}

describe("per-tenant file roots", () => {
  it("CreateSession: a tenant's directory must lie in its roots; a tenant without roots may create none; the static token is not limited", async () => {
    const acme = await as("alice", "acme");
    const ok = await t.client.createSession({ directory: path.join(dirs.acme, "project") }, acme);
    expect(ok.session?.directory).toBe(path.join(dirs.acme, "project"));
    for (const elsewhere of [dirs.globex, dirs.shared, t.dir]) {
      expect(await refusal(t.client.createSession({ directory: elsewhere }, acme))).toEqual({
        code: Code.PermissionDenied,
        message: `directory: ${elsewhere} is outside the roots of tenant acme (tenants.acme.roots)`,
        reason: "PATH_NOT_ALLOWED",
      });
    }
    expect(await refusal(t.client.createSession({ directory: dirs.acme }, await as("ivan", "initech")))).toEqual({
      code: Code.PermissionDenied,
      message: `directory: ${dirs.acme} cannot be used: tenant initech has no roots configured (tenants.initech.roots)`,
      reason: "PATH_NOT_ALLOWED",
    });
    const operator = { headers: { authorization: `Bearer ${STATIC}` } };
    expect((await t.client.createSession({ directory: t.dir }, operator)).session?.directory).toBe(t.dir);
  });

  it("file drafts of a tenant's session read inside its roots, not the global roots nor another tenant's", async () => {
    const acme = await as("alice", "acme");
    const sessionId = (await t.client.createSession({ directory: path.join(dirs.acme, "project") }, acme)).session!.id;
    const url = (name: keyof typeof dirs) => pathToFileURL(path.join(dirs[name], "notes.txt")).href;
    const stored = await t.client.prompt({ sessionId, noReply: true, parts: [text("read"), file(url("acme"))] }, acme);
    const parts = stored.message!.parts;
    expect(parts.map((p) => [p.kind.case, p.kind.case === "text" && p.kind.value.synthetic])).toEqual([
      ["text", false],
      ["text", true],
      ["text", true],
      ["file", false],
    ]);
    expect(parts.some((p) => p.kind.case === "text" && p.kind.value.text.includes("acme's notes"))).toBe(true);
    for (const other of ["shared", "globex"] as const) {
      const denied = await refusal(t.client.prompt({ sessionId, noReply: true, parts: [text("read"), file(url(other))] }, acme));
      expect(denied).toEqual({
        code: Code.PermissionDenied,
        message: `parts[1].file.url: ${path.join(dirs[other], "notes.txt")} is outside the session directory and the configured roots`,
        reason: "PATH_NOT_ALLOWED",
      });
    }
    // Nothing was stored for the refused prompts.
    expect((await t.client.listMessages({ sessionId }, acme)).messages).toHaveLength(1);
  });

  it("refuses a directory outside the tenant's roots the same way whether it exists or not, before touching the filesystem", async () => {
    const acme = await as("alice", "acme");
    for (const elsewhere of [path.join(dirs.globex, "project"), path.join(dirs.globex, "no-such-dir")]) {
      expect(await refusal(t.client.createSession({ directory: elsewhere }, acme))).toEqual({
        code: Code.PermissionDenied,
        message: `directory: ${elsewhere} is outside the roots of tenant acme (tenants.acme.roots)`,
        reason: "PATH_NOT_ALLOWED",
      });
    }
  });

  it("a child session lives in its parent's tenant roots, whoever creates it (the static token included)", async () => {
    const parent = (await t.client.createSession({ directory: path.join(dirs.acme, "project") }, await as("alice", "acme"))).session!.id;
    const operator = { headers: { authorization: `Bearer ${STATIC}` } };
    expect(await refusal(t.client.createSession({ directory: dirs.shared, parentId: parent }, operator))).toEqual({
      code: Code.PermissionDenied,
      message: `directory: ${dirs.shared} is outside the roots of tenant acme (tenants.acme.roots)`,
      reason: "PATH_NOT_ALLOWED",
    });
  });

  // A trial, 2026-12-03: a session directory swapped for a link reached files outside it.
  it("a tenant's session whose directory was replaced by a link out of its roots gets no prompt (PERMISSION_DENIED on session_id)", async () => {
    const acme = await as("alice", "acme");
    const project = path.join(dirs.acme, "swapped");
    await mkdir(project);
    const sessionId = (await t.client.createSession({ directory: project }, acme)).session!.id;
    await rm(project, { recursive: true });
    await symlink(dirs.globex, project);
    expect(
      await refusal(
        t.client.prompt({ sessionId, noReply: true, parts: [file(pathToFileURL(path.join(project, "notes.txt")).href)] }, acme),
      ),
    ).toEqual({
      code: Code.PermissionDenied,
      message: `session_id: ${project} (the directory of session ${sessionId}) is outside the roots of tenant acme (tenants.acme.roots): create a session inside them`,
      reason: "PATH_NOT_ALLOWED",
    });
    expect((await t.client.listMessages({ sessionId }, acme)).messages).toEqual([]);
  });

  it("refuses shell commands in a tenant's session unless tenants.<name>.commands is true", async () => {
    const acme = await as("alice", "acme");
    const sessionId = (await t.client.createSession({ directory: path.join(dirs.acme, "project") }, acme)).session!.id;
    expect(await refusal(t.client.shell({ sessionId, agent: "build", command: "echo hi" }, acme))).toEqual({
      code: Code.PermissionDenied,
      message: "shell commands are not allowed for sessions of tenant acme (tenants.acme.commands)",
      reason: "COMMANDS_NOT_ALLOWED",
    });
    expect((await t.client.listMessages({ sessionId }, acme)).messages).toEqual([]);
  });

  it("tenants need a tenant claim", () => {
    expect(() =>
      buildConfig(
        configFileSchema.parse({ auth: { jwt: { secret: SECRET } }, tenants: { acme: { roots: ["/srv/acme"] } } }),
        undefined,
        base,
      ),
    ).toThrow(new ConfigError("tenants: needs auth.jwt.tenant_claim (the token claim that names a caller's tenant)"));
  });
});
