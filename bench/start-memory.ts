/**
 * Start-up time and memory of a `ledger serve` child (issue 13 items 3-5):
 *
 * - cold start: process spawn until the first noReply prompt is answered (CreateSession +
 *   Prompt), on a fresh embedded database (`--db :memory:`) and on Postgres (already migrated);
 * - idle RSS on Postgres, on a new embedded database and on a reopened one;
 * - RSS growth per idle HTTP/2 connection and per idle `WatchSession` stream;
 * - RSS after 1,000 and after 10,000 noReply prompts (a leak shows as growth).
 *
 * "ours" is `node bin/ledger.js` (compiled `dist/`, lazily loaded modules, the PGlite template);
 * the baseline is the same server run the pre-issue-13 way in the same run: the TypeScript
 * sources through tsx, and initdb for every new embedded database (see serve-child.ts).
 */
import path from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { SessionService } from "../gen/ledger/v1/service_pb.js";
import {
  atMost,
  connectClient,
  createBenchDatabase,
  elapsedMs,
  log,
  median,
  now,
  row,
  scaled,
  sleep,
  tempDir,
  type Row,
} from "./common.js";
import { rssMiB, startServe, type ServeChild, type ServeMode } from "./serve-child.js";

/** Idle RSS bounds of issue 13 (MiB). */
const IDLE_RSS_POSTGRES_MIB = 120;
const IDLE_RSS_EMBEDDED_MIB = 300;
/** How long a server sits idle before its RSS is read (ms). */
const SETTLE_MS = 2_000;

type Ledger = Client<typeof SessionService>;

/** One noReply prompt in a new session; resolves once answered. */
async function firstPrompt(client: Ledger, dir: string): Promise<void> {
  const session = (await client.createSession({ directory: dir })).session!.id;
  await client.prompt({ sessionId: session, noReply: true, parts: [{ kind: { case: "text", value: { text: "hello" } } }] });
}

/** Spawn → first noReply prompt answered (ms), and spawn → listening line (ms). */
async function coldStart(
  mode: ServeMode,
  dir: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ answerMs: number; listenMs: number }> {
  const serve = await startServe(mode, dir, args, env);
  try {
    await firstPrompt(connectClient(serve.url), dir);
    return { answerMs: elapsedMs(serve.spawnedAt), listenMs: serve.listenMs };
  } finally {
    await serve.stop();
  }
}

/** Idle RSS (MiB) of a server that answered one prompt and then sat idle SETTLE_MS. */
async function idleRss(serve: ServeChild, dir: string): Promise<number> {
  await firstPrompt(connectClient(serve.url), dir);
  await sleep(SETTLE_MS);
  return rssMiB(serve.pid);
}

/** A row with an absolute bound on `ours` (the ratio against the baseline is informational). */
function bounded(name: string, ours: number, baseline: number, unit: string, bound: number, note: string): Row {
  return { ...row(name, ours, baseline, unit, undefined, note), goal: `≤ ${bound} ${unit}`, pass: ours <= bound };
}

export async function startMemory(): Promise<Row[]> {
  const database = await createBenchDatabase("start");
  const work = await tempDir("start");
  const rows: Row[] = [];
  const pgEnv = { DATABASE_URL: database.url };
  try {
    // The PGlite template lives in a cache of this run: the first start builds it (measured
    // once, informational), the others start from it.
    const cacheHome = process.env.XDG_CACHE_HOME;
    process.env.XDG_CACHE_HOME = path.join(work.dir, "cache");
    const firstEver = await coldStart("built", work.dir, ["--db", ":memory:"], {});
    // Migrate the Postgres database once, so both modes start on a ready schema.
    await coldStart("built", work.dir, [], pgEnv);

    const runs = scaled(5, 3);
    const samples = {
      embedded: { built: [] as number[], sources: [] as number[], builtListen: [] as number[], sourcesListen: [] as number[] },
      postgres: { built: [] as number[], sources: [] as number[], builtListen: [] as number[], sourcesListen: [] as number[] },
    };
    log(`cold start: ${runs} runs per mode and database`);
    for (let i = 0; i < runs; i++) {
      for (const mode of i % 2 === 0 ? (["built", "sources"] as const) : (["sources", "built"] as const)) {
        const embedded = await coldStart(mode, work.dir, ["--db", ":memory:"], {});
        samples.embedded[mode].push(embedded.answerMs);
        samples.embedded[`${mode}Listen`].push(embedded.listenMs);
        const postgres = await coldStart(mode, work.dir, [], pgEnv);
        samples.postgres[mode].push(postgres.answerMs);
        samples.postgres[`${mode}Listen`].push(postgres.listenMs);
      }
    }
    const coldNote = (what: string, s: (typeof samples)["embedded"]) =>
      `median of ${runs} runs; spawn of \`ledger serve --port 0\` ${what} until CreateSession + a noReply Prompt are answered; ` +
      `ours: \`node bin/ledger.js\` (dist/); baseline: \`node --import tsx src/cli/main.ts\` with LEDGER_PGLITE_TEMPLATE=off ` +
      `(sources compiled on load, initdb for every new embedded database); until the listening line: ` +
      `ours ${(median(s.builtListen) / 1000).toFixed(2)} s, baseline ${(median(s.sourcesListen) / 1000).toFixed(2)} s`;
    rows.push(
      row(
        "cold start to first noReply prompt answered, fresh embedded database",
        median(samples.embedded.built) / 1000,
        median(samples.embedded.sources) / 1000,
        "s",
        atMost(0.4),
        coldNote("--db :memory:", samples.embedded),
      ),
      row(
        "cold start to first noReply prompt answered, Postgres",
        median(samples.postgres.built) / 1000,
        median(samples.postgres.sources) / 1000,
        "s",
        atMost(0.4),
        coldNote("with DATABASE_URL (migrated database)", samples.postgres),
      ),
      row(
        "cold start to first noReply prompt answered, first embedded start on a machine (builds the template)",
        firstEver.answerMs / 1000,
        median(samples.embedded.sources) / 1000,
        "s",
        undefined,
        "one run of `node bin/ledger.js serve --db :memory:` with an empty cache: initdb and the migrations in a temporary folder, the template written and renamed into place, then the database started from it; baseline as above",
      ),
    );

    // Idle RSS, both modes.
    const idle = {
      postgres: {} as Record<ServeMode, number>,
      fresh: {} as Record<ServeMode, number>,
      reopened: {} as Record<ServeMode, number>,
    };
    for (const mode of ["built", "sources"] as const) {
      const pgServe = await startServe(mode, work.dir, [], pgEnv);
      idle.postgres[mode] = await idleRss(pgServe, work.dir).finally(() => pgServe.stop());
      const dbDir = path.join(work.dir, `db-${mode}`);
      const fresh = await startServe(mode, work.dir, ["--db", dbDir]);
      idle.fresh[mode] = await idleRss(fresh, work.dir).finally(() => fresh.stop());
      const reopened = await startServe(mode, work.dir, ["--db", dbDir]);
      idle.reopened[mode] = await idleRss(reopened, work.dir).finally(() => reopened.stop());
    }
    log(`idle RSS (MiB): ${JSON.stringify(idle)}`);
    const idleNote = `RSS (/proc VmRSS) of \`ledger serve\` after one noReply prompt and ${SETTLE_MS / 1000} s idle; ours: bin/ledger.js (dist/); baseline: the sources through tsx, template off`;
    rows.push(
      bounded("idle RSS, Postgres", idle.postgres.built, idle.postgres.sources, "MiB", IDLE_RSS_POSTGRES_MIB, idleNote),
      bounded(
        "idle RSS, new embedded database (--db new directory)",
        idle.fresh.built,
        idle.fresh.sources,
        "MiB",
        IDLE_RSS_EMBEDDED_MIB,
        idleNote,
      ),
      row("idle RSS, reopened embedded database", idle.reopened.built, idle.reopened.sources, "MiB", undefined, idleNote),
    );

    rows.push(...(await growth(work.dir, pgEnv)));
    if (cacheHome === undefined) delete process.env.XDG_CACHE_HOME;
    else process.env.XDG_CACHE_HOME = cacheHome;
  } finally {
    await work.remove();
    await database.drop();
  }
  return rows;
}

/** RSS growth per idle connection and per idle WatchSession, and after 1,000 vs 10,000 prompts (Postgres, ours). */
async function growth(dir: string, pgEnv: NodeJS.ProcessEnv): Promise<Row[]> {
  const serve = await startServe("built", dir, [], pgEnv);
  const managers: Http2SessionManager[] = [];
  const watches = new AbortController();
  try {
    const client = connectClient(serve.url);
    await firstPrompt(client, dir);
    await sleep(SETTLE_MS);
    const before = await rssMiB(serve.pid);

    // Idle connections: each its own HTTP/2 session that made one call and stays open.
    const connections = 200;
    for (let i = 0; i < connections; i++) {
      const manager = new Http2SessionManager(serve.url);
      managers.push(manager);
      const own = createClient(
        SessionService,
        createConnectTransport({ baseUrl: serve.url, httpVersion: "2", useBinaryFormat: true, sessionManager: manager }),
      );
      await own.listSessions({ pageSize: 1 });
    }
    await sleep(SETTLE_MS);
    const withConnections = await rssMiB(serve.pid);

    // Idle WatchSession streams: all on one more HTTP/2 connection, each on its own session.
    const watchCount = 200;
    const h2 = createClient(SessionService, createConnectTransport({ baseUrl: serve.url, httpVersion: "2", useBinaryFormat: true }));
    const ids: string[] = [];
    for (let i = 0; i < watchCount; i++) ids.push((await client.createSession({ directory: dir })).session!.id);
    const afterSessions = (await sleep(SETTLE_MS), await rssMiB(serve.pid));
    let opened = 0;
    const streams = ids.map(async (sessionId) => {
      try {
        for await (const _ of h2.watchSession({ sessionId }, { signal: watches.signal })) {
          opened++;
        }
      } catch {
        // aborted at the end
      }
    });
    const deadline = Date.now() + 30_000;
    while (opened < watchCount && Date.now() < deadline) await sleep(50);
    await sleep(SETTLE_MS);
    const withWatches = await rssMiB(serve.pid);
    watches.abort();
    await Promise.allSettled(streams);

    // 1,000 then 10,000 noReply prompts, 8 at a time over 8 sessions.
    const prompts = async (count: number) => {
      const targets = await Promise.all(
        Array.from({ length: 8 }, async () => (await client.createSession({ directory: dir })).session!.id),
      );
      let next = 0;
      await Promise.all(
        targets.map(async (sessionId) => {
          while (next < count) {
            next++;
            await client.prompt({
              sessionId,
              noReply: true,
              parts: [{ kind: { case: "text", value: { text: "a prompt of some length ".repeat(8) } } }],
            });
          }
        }),
      );
    };
    const first = scaled(1_000, 100);
    const total = scaled(10_000, 1_000);
    const started = now();
    await prompts(first);
    await sleep(SETTLE_MS);
    const after1k = await rssMiB(serve.pid);
    await prompts(total - first);
    await sleep(SETTLE_MS);
    const after10k = await rssMiB(serve.pid);
    log(
      `growth: before ${before.toFixed(1)}, +${connections} conns ${withConnections.toFixed(1)}, +${watchCount} sessions ${afterSessions.toFixed(1)}, +watches ${withWatches.toFixed(1)}, after ${first} prompts ${after1k.toFixed(1)}, after ${total} ${after10k.toFixed(1)} MiB (${(elapsedMs(started) / 1000).toFixed(0)} s)`,
    );
    const growthNote = `\`ledger serve\` (bin/ledger.js) on Postgres; RSS after ${SETTLE_MS / 1000} s idle; baseline: the RSS before (idle after one prompt), so ours − baseline is the growth`;
    return [
      row(
        `RSS per idle HTTP/2 connection (${connections} connections, one call each)`,
        ((withConnections - before) * 1024) / connections,
        1,
        "KiB",
        undefined,
        `${growthNote}; ${before.toFixed(1)} → ${withConnections.toFixed(1)} MiB with ${connections} connections (ratio = KiB per connection)`,
      ),
      row(
        `RSS per idle WatchSession (${watchCount} streams on one connection)`,
        ((withWatches - afterSessions) * 1024) / watchCount,
        1,
        "KiB",
        undefined,
        `${growthNote}; ${afterSessions.toFixed(1)} → ${withWatches.toFixed(1)} MiB with ${watchCount} streams open (ratio = KiB per stream)`,
      ),
      row(
        `RSS after ${total} vs after ${first} noReply prompts`,
        after10k,
        after1k,
        "MiB",
        atMost(1.1),
        `noReply prompts of 200 B, 8 concurrent clients, each on its own session, over one HTTP/1.1 keep-alive transport`,
      ),
    ];
  } finally {
    watches.abort();
    for (const m of managers) m.abort();
    await serve.stop();
  }
}
