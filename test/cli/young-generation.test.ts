import { mkdtemp, realpath, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEST_ENGINE } from "../support/db.js";
import { text } from "../support/prompt.js";
import { killReplicas, startReplica, type Replica } from "../support/replica.js";

// bin/ledger.js keeps V8's young generation at its initial size (two 1 MB semi-spaces) unless the
// operator sized it: a replay of large events would otherwise grow it to 16 MB semi-spaces on a
// just-started server (docs/streams-and-replicas.md, "Replay with bounded memory"). A real
// `ledger serve` child, its `/metrics` read after it stored and replayed 10 MB.

const MIB = 1 << 20;

let dir: string;
beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-young-")));
});
afterAll(async () => {
  await killReplicas();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Starts `ledger serve` (embedded, in memory) with `nodeOptions`, stores and replays 10 prompts of 1 MB, and returns V8's new-space size (bytes). */
async function newSpaceAfterWork(nodeOptions: string): Promise<number> {
  const server: Replica = await startReplica({
    name: "young",
    cwd: dir,
    serveArgs: ["--db", ":memory:", "--no-web"],
    env: { NODE_OPTIONS: nodeOptions },
  });
  try {
    const sessionId = (await server.grpc.createSession({ directory: dir })).session!.id;
    for (let i = 0; i < 10; i++) await server.grpc.prompt({ sessionId, noReply: true, parts: [text(String(i).repeat(MIB))] });
    let texts = 0;
    for await (const { event } of server.grpc.watchSession({ sessionId, afterSeq: 0n })) {
      const part = event?.kind.case === "partUpdated" ? event.kind.value.part : undefined;
      if (part?.kind.case === "text" && part.kind.value.text.length === MIB && ++texts === 10) break;
    }
    expect(texts).toBe(10);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    return Number(/^nodejs_heap_space_size_total_bytes\{space="new"\} (\d+)$/m.exec(metrics)?.[1]);
  } finally {
    await server.stop();
  }
}

// The child uses its embedded database whatever the project: run once, in the PGlite project.
describe.skipIf(TEST_ENGINE !== "pglite")("bin/ledger.js and V8's young generation", () => {
  it("stays at two 1 MB semi-spaces through storing and replaying 10 MB", async () => {
    expect(await newSpaceAfterWork("")).toBeLessThanOrEqual(2 * MIB);
  });

  it("is the operator's when NODE_OPTIONS sizes it (--max-semi-space-size=4): it grows", async () => {
    expect(await newSpaceAfterWork("--max-semi-space-size=4")).toBeGreaterThan(2 * MIB);
  });
});
