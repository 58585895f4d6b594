import { mkdir, mkdtemp, readFile, realpath, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PermissionReply } from "../../gen/ledger/v1/permission_pb.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { watchUntil } from "../support/event-stream.js";
import { startFakeOpenAI, type FakeOpenAI } from "../support/openai-server.js";
import { text } from "../support/prompt.js";
import { killReplicas, startReplica, type Replica } from "../support/replica.js";
import { waitFor } from "../support/wait.js";
import { compatibleProvider } from "../support/mock-models.js";

// Permission asks across replicas (issue 15): the loop runs on A, the reply arrives at B; and a
// replica killed while a call waits leaves no request pending once a replica recovers it.
// Postgres only: PGlite is one process by construction.

const POSTGRES = process.env.LEDGER_TEST_DB === "postgres";
const START_MS = 60_000;

let dir: string | undefined;
let database: TestDatabase | undefined;
let fake: FakeOpenAI | undefined;
let A: Replica;
let B: Replica;

beforeAll(
  async () => {
    if (!POSTGRES) return;
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-permissions-")));
    fake = await startFakeOpenAI();
    const config = {
      model: "local/qwen",
      provider: { local: compatibleProvider(fake.url, { qwen: {} }, "test") },
      retry: { attempts: 0 },
      agent: { build: { permission: { write: "ask" } } },
    };
    await writeFile(path.join(dir, "ledger.json"), JSON.stringify(config));
    database = await createTestDatabase("postgres");
    A = await startReplica({ name: "A", cwd: dir, databaseUrl: database.url!, timeoutMs: START_MS });
    B = await startReplica({ name: "B", cwd: dir, databaseUrl: database.url!, timeoutMs: START_MS });
  },
  2 * START_MS + 30_000,
);

afterAll(async () => {
  await killReplicas();
  await fake?.close();
  await database?.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const writeCall = (id: string, file: string) => ({
  kind: "stream" as const,
  chunks: [{ toolCall: { id, name: "write", arguments: JSON.stringify({ filePath: file, content: "from A\n" }) } }],
});

describe.runIf(POSTGRES)("permission replies across replicas", () => {
  it("the loop runs on A, B answers: the call runs on A", async () => {
    const project = path.join(dir!, "cross");
    await mkdir(project);
    const { session } = await A.connect.createSession({ directory: project });
    fake!.push(writeCall("call_x1", "out.txt"), { kind: "stream", chunks: [{ text: "Written on A." }] });
    await A.connect.promptAsync({ sessionId: session!.id, parts: [text("write out.txt")] });

    const asked = (await watchUntil(B.grpc, session!.id, (e) => e.kind.case === "permissionAsked")).at(-1)!;
    const request = asked.kind.case === "permissionAsked" ? asked.kind.value.permission! : undefined;
    expect(request).toMatchObject({ permission: "write", patterns: ["out.txt"], callId: "call_x1" });
    expect((await B.connect.listPermissions({ sessionId: session!.id })).permissions.map((p) => p.id)).toEqual([request!.id]);
    expect(A.stderr()).not.toContain("agent loop failed");

    await B.grpc.replyPermission({ sessionId: session!.id, permissionId: request!.id, reply: PermissionReply.ONCE });
    await waitFor("the answer", async () => (await A.connect.getStatus({})).statuses[session!.id] === undefined);
    expect(await readFile(path.join(project, "out.txt"), "utf8")).toBe("from A\n");
    const { messages } = await B.connect.listMessages({ sessionId: session!.id });
    expect(messages.map((m) => m.message?.kind.case)).toEqual(["user", "assistant", "assistant"]);
    expect(messages[1]!.parts.map((p) => p.kind.case)).toEqual(["stepStart", "tool", "stepFinish", "patch"]);
    await expect(
      B.grpc.replyPermission({ sessionId: session!.id, permissionId: request!.id, reply: PermissionReply.ONCE }),
    ).rejects.toMatchObject({
      code: 9,
    });
  });

  it("a replica killed while a call waits: the next replica to start rejects the request", async () => {
    const project = path.join(dir!, "killed");
    await mkdir(project);
    const { session } = await A.connect.createSession({ directory: project });
    fake!.push(writeCall("call_x2", "never.txt"));
    await A.connect.promptAsync({ sessionId: session!.id, parts: [text("write never.txt")] });
    const asked = (await watchUntil(B.grpc, session!.id, (e) => e.kind.case === "permissionAsked")).at(-1)!;
    const id = asked.kind.case === "permissionAsked" ? asked.kind.value.permission!.id : "";
    await A.kill9();

    const C = await startReplica({ name: "C", cwd: dir!, databaseUrl: database!.url!, timeoutMs: START_MS });
    expect((await C.connect.listPermissions({ sessionId: session!.id })).permissions).toEqual([]);
    const events = await watchUntil(C.grpc, session!.id, (e) => e.kind.case === "permissionReplied");
    expect(events.at(-1)!.kind.value).toMatchObject({
      permissionId: id,
      reply: PermissionReply.REJECT,
      message: "the process running this call stopped",
    });
    await expect(stat(path.join(project, "never.txt"))).rejects.toThrow(/ENOENT/);
    await expect(C.grpc.replyPermission({ sessionId: session!.id, permissionId: id, reply: PermissionReply.ONCE })).rejects.toMatchObject({
      code: 9,
    });
  });
});
