import { Code, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { beforeAll, describe, expect, it } from "vitest";
import type { SessionEvent } from "../../gen/ledger/v1/event_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { startLedger, type RunningLedger } from "../../src/app.js";
import { buildConfig, configFileSchema } from "../../src/config/config.js";
import { readEventPage } from "../../src/storage/event-store.js";
import { TEST_ENGINE, type TestDatabase } from "../support/db.js";
import { failure } from "../support/errors.js";
import { collectEvents } from "../support/event-stream.js";
import { compatibleProvider } from "../support/mock-models.js";
import type { FakeOpenAI } from "../support/openai-server.js";
import { replicaLifecycle } from "../support/replica-fixture.js";
import { text } from "../support/prompt.js";
import { sleep, waitFor } from "../support/wait.js";

// Compactions watched from another replica: two in-process ledgers on one Postgres database,
// relaying through LISTEN/NOTIFY (the catch-up check off, so B sees what the relay brings).
// Postgres only: PGlite serves one process.

const POSTGRES = TEST_ENGINE === "postgres";

let dir: string;
let database: TestDatabase;
let fake: FakeOpenAI;
const running = replicaLifecycle("ledger-compaction-", POSTGRES, (shared) => void ({ dir, database, fake } = shared));

async function ledger(): Promise<{ ledger: RunningLedger; client: Client<typeof SessionService> }> {
  const config = configFileSchema.parse({
    model: "fake/m",
    provider: { fake: compatibleProvider(fake.url, { m: { limit: { context: 1000, output: 100 } } }, "test") },
    retry: { attempts: 0 },
    events: { catch_up_ms: 0 },
  });
  const started = await startLedger({ config: buildConfig(config, undefined, dir), database: database.target });
  running.push(started);
  return { ledger: started, client: createClient(SessionService, createGrpcTransport({ baseUrl: started.url })) };
}

/** The session's stored events, in seq order. */
async function stored(r: RunningLedger, sessionId: string): Promise<SessionEvent[]> {
  return (await readEventPage(r.database.db, sessionId, 0, { rows: 10_000, bytes: 1 << 30 })).events;
}

/** An event as "kind" plus, for messages and parts, what they are. */
function label(e: SessionEvent): string {
  if (e.kind.case === "messageUpdated") {
    const m = e.kind.value.message?.kind;
    if (m?.case === "assistant")
      return `message:assistant${m.value.summary ? "(summary)" : ""}${m.value.time?.completed ? ":completed" : ""}`;
    return "message:user";
  }
  if (e.kind.case === "partUpdated") return `part:${e.kind.value.part?.kind.case}`;
  if (e.kind.case === "sessionStatus") return `status:${e.kind.value.status.case}`;
  return e.kind.case ?? "";
}

describe.skipIf(!POSTGRES)("compaction seen from another replica", () => {
  let A: Awaited<ReturnType<typeof ledger>>;
  let B: Awaited<ReturnType<typeof ledger>>;

  beforeAll(async () => {
    A = await ledger();
    B = await ledger();
  });

  it("an automatic compaction on A and a Summarize on B reach B's WatchSession in order, gap-free, every stored event", async () => {
    const sessionId = (await A.client.createSession({ directory: dir })).session!.id;
    const watcher = collectEvents((signal) => B.client.watchSession({ sessionId, afterSeq: 0n }, { signal }));
    await watcher.reach(1n);

    fake.push(
      { kind: "stream", chunks: [{ text: "long answer" }], usage: { prompt_tokens: 950, completion_tokens: 5 } },
      { kind: "stream", chunks: [{ text: "auto " }, { text: "summary" }], delayMs: 5 },
      { kind: "stream", chunks: [{ text: "asked " }, { text: "summary" }], delayMs: 5 },
    );
    await A.client.prompt({ sessionId, parts: [text("question")] });
    const summarized = await B.client.summarize({ sessionId });
    expect(summarized.message?.message?.kind).toMatchObject({ case: "assistant", value: { summary: true, finish: "stop" } });

    const table = await stored(A.ledger, sessionId);
    await watcher.reach(table.at(-1)!.seq);
    await sleep(100);
    await watcher.stop();
    expect(table.map((e) => e.seq)).toEqual(table.map((_, i) => BigInt(i + 1)));
    expect(watcher.events.filter((e) => e.kind.case !== "partDelta")).toEqual(table);
    // Each delta extends a part already seen, and comes before the next stored event.
    expect(watcher.events.filter((e) => e.kind.case === "partDelta").length).toBeGreaterThanOrEqual(4);

    const labels = table.map(label).filter((l) => !l.startsWith("part:step"));
    const auto = labels.indexOf("part:compaction");
    const asked = labels.lastIndexOf("part:compaction");
    expect(auto).toBeGreaterThan(0);
    expect(asked).toBeGreaterThan(auto);
    // The automatic compaction: inside the loop's busy period, before its idle.
    expect(labels.slice(auto - 1, auto + 5)).toEqual([
      "message:user",
      "part:compaction",
      "message:assistant(summary)",
      "part:text",
      "part:text",
      "message:assistant(summary):completed",
    ]);
    expect(labels[auto + 5]).toBe("status:idle");
    // Summarize on B: busy, the compaction, the summary, idle.
    expect(labels.slice(asked - 2)).toEqual([
      "status:busy",
      "message:user",
      "part:compaction",
      "message:assistant(summary)",
      "part:text",
      "part:text",
      "message:assistant(summary):completed",
      "status:idle",
    ]);
  }, 60_000);

  it("Summarize on B is refused while A runs the session's loop", async () => {
    const sessionId = (await A.client.createSession({ directory: dir })).session!.id;
    fake.push({ kind: "stream", chunks: [{ text: "hanging " }, { hang: true }] });
    const requests = fake.requests.length;
    const run = collectEvents((signal) => A.client.promptStream({ sessionId, parts: [text("hang")] }, { signal }));
    await waitFor("the model request", () => fake.requests.length > requests);
    expect(await failure(B.client.summarize({ sessionId }))).toMatchObject({ code: Code.FailedPrecondition, reason: "SESSION_BUSY" });
    await A.client.abort({ sessionId });
    await run.done;
  }, 60_000);
});
