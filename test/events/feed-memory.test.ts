import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { LARGE_WRITE_HOLD_MS } from "../../src/events/feed.js";
import { createTestDatabase, TEST_ENGINE, type TestDatabase } from "../support/db.js";
import { watchOverH2c, type RawWatch } from "../support/h2c.js";
import { text } from "../support/prompt.js";
import { killReplicas, startReplica, type Replica } from "../support/replica.js";
import { sleep, waitFor } from "../support/wait.js";

// Issue 11, item 3: replay with bounded memory. A real `ledger serve` child with a 384 MB heap
// (Postgres or its embedded PGlite, by vitest project) holds 80 prompts with a 1,000,000-char
// text part each (about 80 MB of log); WatchSession{after_seq: 0} streams that read nothing or
// read everything must not take it down, must not hold the backlog, and every reader gets every
// event in order, on the server that stored the log and on one just restarted (its clients all
// reconnecting). Before the fix, 8 such streams took the server to OOM.

const PROMPTS = 80;
const TEXT_CHARS = 1_000_000;
const HEAP_MB = 384;
/**
 * The issue's bound on RSS growth (peak during a scenario minus the settled RSS before it), MB,
 * for every case. Measured 2026-12-04 with large events serialized once per process and written
 * to every binary stream without a copy (src/server/shared-frames.ts; `FEED_MEMORY_REPORT=1`, in
 * this file's order on one server, both engines at once, four runs): Postgres 8 stalled +6 to
 * +11, 32 stalled +7 to +12, 8 reading +29 to +50, 32 with 8 reading +27 to +42; PGlite +2, +9
 * to +10, +21 to +32, +12 to +39. Before (2026-12-02): 32 stalled up to +61, 32 with 8 reading up
 * to +127, which is why those cases had 64 MB more allowed. Measured later the same day, with
 * each large event read once per process and V8's young generation kept small (bin/ledger.js):
 * Postgres +4, +2, +18, +15 MB; PGlite +2, +0, +21, +16 MB; on a server just started (every case
 * with `FEED_MEMORY_FRESH=1`) Postgres +10, +13, +49, +57 MB and PGlite +7, +8, +30, +31 MB, where
 * the 8-reading case had been +72 to +87 MB (Postgres) and +58 to +82 MB (PGlite).
 */
const GROWTH_MB = 64;

/**
 * Readers among the 32 watchers of the last scenario; the others read nothing. 32 readers (the
 * issue's all-reading case) replay 2.5 GB and take about 70 s more per engine here:
 * `FEED_MEMORY_READERS=32` (or `npm run soak`).
 */
const READERS_OF_32 = Number(process.env.FEED_MEMORY_READERS ?? 8);
/** Hang bounds (ms), not speed bounds. */
const START_MS = 60_000;
const STORE_MS = 240_000;
const READ_MS = 240_000;
const CANCEL_MS = 30_000;
/** Bytes a non-reading watch has once its first large event started (the window is 64 KiB). */
const WINDOW_PART = 32 * 1024;

let dir: string | undefined;
let database: TestDatabase | undefined;
let server: Replica;
/** Starts a `ledger serve` on the test's database; called again before a case on a server just started. */
let startServer: () => Promise<Replica>;
let sessionId: string;
let lastSeq: bigint;

beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-feed-memory-")));
  const engine =
    TEST_ENGINE === "postgres"
      ? { databaseUrl: (database = await createTestDatabase("postgres")).url }
      : { serveArgs: ["--db", path.join(dir, "db")] };
  startServer = () =>
    startReplica({
      name: "replayer",
      cwd: dir!,
      timeoutMs: START_MS,
      nodeArgs: [`--max-old-space-size=${HEAP_MB}`],
      env: { LEDGER_LOG_LEVEL: "info" },
      ...engine,
    });
  server = await startServer();
  sessionId = (await server.grpc.createSession({ directory: dir })).session!.id;
  // Random text, so TOAST compression cannot shrink what the server stores and reads back;
  // a few prompts in flight at once (they still commit one after the other).
  let sent = 0;
  const sender = async () => {
    while (sent < PROMPTS) {
      sent++;
      await server.grpc.prompt({ sessionId, noReply: true, parts: [text(randomBytes((TEXT_CHARS * 3) / 4).toString("base64"))] });
    }
  };
  await Promise.all([sender(), sender(), sender(), sender()]);
  lastSeq = await logEnd(sessionId);
}, START_MS + STORE_MS);

afterAll(async () => {
  await killReplicas();
  await database?.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
}, 60_000);

describe(`WatchSession{after_seq: 0} on ${PROMPTS} stored prompts of ${TEXT_CHARS} chars, server heap ${HEAP_MB} MB`, () => {
  for (const watchers of [8, 32]) {
    it(
      `${watchers} watchers that read nothing: the server holds one message per stream, not the backlog`,
      async () => {
        const result = await scenario(watchers, 0);
        expect({ alive: result.alive, canceled: result.canceled }).toEqual({ alive: true, canceled: watchers });
        expect(result.growthMb).toBeLessThanOrEqual(bound());
      },
      READ_MS,
    );
  }

  for (const [watchers, readers] of [
    [8, 8],
    [32, READERS_OF_32],
  ] as const) {
    const who =
      readers === watchers
        ? `${watchers} watchers that read everything`
        : `${watchers} watchers, ${readers} reading everything and ${watchers - readers} nothing`;
    it(
      `${who}: the server survives and each reader gets every event in order`,
      async () => {
        const result = await scenario(watchers, readers);
        expect({ alive: result.alive, canceled: result.canceled }).toEqual({ alive: true, canceled: watchers });
        for (const watch of result.readers) {
          expect(watch.seqs).toEqual(range(1, Number(lastSeq)));
          expect(watch.fullTexts).toBe(PROMPTS);
        }
        expect(result.growthMb).toBeLessThanOrEqual(bound());
      },
      READ_MS,
    );
  }

  // The clients of a replica that restarted all reconnect and replay: the server has never
  // replayed, so its heap has not grown to a replay's working set yet (docs/streams-and-replicas.md).
  it(
    "8 watchers that read everything, on a server just restarted: the server survives and each reader gets every event in order",
    async () => {
      const result = await scenario(8, 8, true);
      expect({ alive: result.alive, canceled: result.canceled }).toEqual({ alive: true, canceled: 8 });
      for (const watch of result.readers) {
        expect(watch.seqs).toEqual(range(1, Number(lastSeq)));
        expect(watch.fullTexts).toBe(PROMPTS);
      }
      expect(result.growthMb).toBeLessThanOrEqual(bound());
    },
    READ_MS,
  );
});

// A probe, 2026-12-02: ForkSession read the whole session and held every copy and its event until
// the commit (150 MB of parts: 15.7 s, RSS 1.4 GB on PGlite). It copies a page at a time now.
describe(`ForkSession of the same ${PROMPTS} prompts, server heap ${HEAP_MB} MB`, () => {
  it(
    "copies a page of messages at a time: the server survives within the growth bound, and the fork holds every message",
    async () => {
      if (server.hasExited()) throw new Error("the server is gone: see the first failure");
      const before = await settledRss();
      resetPeak(server.pid);
      const started = Date.now();
      const fork = (await alive(server.grpc.forkSession({ sessionId }))).session!;
      const peak = memory(server.pid).peakMb;
      const growthMb = Math.round((peak - before) * 10) / 10;
      report(
        `${TEST_ENGINE}: ForkSession in ${Date.now() - started} ms: RSS ${before.toFixed(0)} MB before, peak ${peak.toFixed(0)} MB (+${growthMb} MB)`,
      );
      expect(await answers()).toBe(true);
      // Its exact shape, page by page, is test/ledger/sessions.test.ts's; here: all of it, and the
      // log of its copies (the session's, 1 + 80 × (message + part) + session_updated) without a gap.
      expect((await server.grpc.getSession({ sessionId: fork.id })).session!.messageCount).toBe(PROMPTS);
      expect(await logEnd(fork.id)).toBe(BigInt(1 + PROMPTS * 2 + 1));
      expect(growthMb).toBeLessThanOrEqual(bound());
    },
    READ_MS,
  );
});

/** The RSS growth a case may reach, MB: GROWTH_MB, on the server that stored the log and on one started for the case alike. */
function bound(): number {
  return GROWTH_MB;
}

interface Outcome {
  alive: boolean;
  /** Peak RSS during the scenario minus RSS before it, MB. */
  growthMb: number;
  readers: RawWatch[];
  /** WatchSession calls the server logged as ended `canceled` once the clients went away. */
  canceled: number;
}

/**
 * Opens `watchers` WatchSession{after_seq: 0} streams at once, each on its own connection, the
 * first `readers` of them reading to the last seq, the others reading nothing, and measures the
 * server's peak RSS against its RSS just before. Once the readers are done and the others get
 * nothing more, every client cancels, and the server must end each call. `fresh` (default:
 * `FEED_MEMORY_FRESH=1`, which runs every case so) restarts the server first.
 */
async function scenario(watchers: number, readers: number, fresh = process.env.FEED_MEMORY_FRESH !== undefined): Promise<Outcome> {
  if (server.hasExited()) throw new Error("the server is gone: see the first failure");
  if (fresh) {
    await server.stop();
    server = await startServer();
  }
  const before = await settledRss();
  const canceledBefore = canceledCalls();
  resetPeak(server.pid);
  const v8 = process.env.FEED_MEMORY_REPORT ? sampleV8(server.url) : undefined;
  const watches = Array.from({ length: watchers }, (_, i) =>
    watchOverH2c(server.url, { sessionId, afterSeq: 0n, read: i < readers, untilSeq: lastSeq, textChars: TEXT_CHARS }),
  );
  try {
    await alive(Promise.all(watches.slice(0, readers).map((w) => w.reached)));
    await alive(stalled(watches.slice(readers)));
    const peak = memory(server.pid).peakMb;
    const growthMb = Math.round((peak - before) * 10) / 10;
    report(
      `${TEST_ENGINE}: ${watchers} watchers, ${readers} reading: RSS ${before.toFixed(0)} MB before, peak ${peak.toFixed(0)} MB (+${growthMb} MB)${(await v8?.stop()) ?? ""}${fresh ? " (server just started)" : ""}`,
    );
    for (const w of watches) w.close();
    await alive(
      waitFor(`the server to end the ${watchers} cancelled calls`, () => canceledCalls() - canceledBefore >= watchers, CANCEL_MS),
    );
    return {
      alive: !server.hasExited() && (await answers()),
      growthMb,
      readers: watches.slice(0, readers),
      canceled: canceledCalls() - canceledBefore,
    };
  } finally {
    for (const w of watches) w.close();
    await v8?.stop();
  }
}

/**
 * Waits until every non-reading watch stopped receiving: the server sent what flow control
 * allows. A stream waits for a write slot before its first large event, and a stalled stream
 * gives its slot up after LARGE_WRITE_HOLD_MS: each must have the start of a large event (half
 * of the 64 KiB HTTP/2 window at least; the small events before it are far less) and nothing may
 * arrive for longer than that.
 */
async function stalled(watches: RawWatch[]): Promise<void> {
  if (watches.length === 0) return;
  let last = "";
  let since = Date.now();
  await waitFor(
    "the non-reading watchers to stop receiving",
    async () => {
      await sleep(100);
      const now = watches.map((w) => w.buffered()).join(",");
      if (now !== last || !watches.every((w) => w.buffered() >= WINDOW_PART)) since = Date.now();
      last = now;
      return Date.now() - since >= LARGE_WRITE_HOLD_MS + 1000;
    },
    READ_MS,
  );
}

/** `work`, unless the server exits first: then fails with the end of its stderr (e.g. out of heap). */
async function alive<T>(work: Promise<T>): Promise<T> {
  const died = server.exited.then((exit) => {
    const why = /^.*(FATAL|out of memory).*$/im.exec(server.stderr())?.[0] ?? server.stderr().slice(-600);
    throw new Error(`the server exited (${JSON.stringify(exit)}): ${why}`);
  });
  return Promise.race([work, died]);
}

/** The server still answers a call and has not run out of heap. */
async function answers(): Promise<boolean> {
  const { session } = await server.grpc.getSession({ sessionId });
  return session?.id === sessionId && !/heap out of memory/i.test(server.stderr());
}

/** The session's last seq, from WatchSession's OUT_OF_RANGE answer to a cursor far ahead. */
async function logEnd(id: string): Promise<bigint> {
  try {
    for await (const _ of server.grpc.watchSession({ sessionId: id, afterSeq: 1n << 62n })) break;
  } catch (error) {
    const lastSeq = ConnectError.from(error).findDetails(ErrorInfoSchema)[0]?.metadata.last_seq;
    if (lastSeq) return BigInt(lastSeq);
    throw error;
  }
  throw new Error("WatchSession accepted a cursor far ahead of the log");
}

/** WatchSession calls the server logged as ended `canceled` so far. */
function canceledCalls(): number {
  return (
    server.stderr().match(/"procedure":"\/ledger\.v1\.SessionService\/WatchSession","protocol":"grpc","code":"canceled"/g)?.length ?? 0
  );
}

/**
 * Samples the server's `/metrics` every 100 ms until `stop()` (which may be called again), which
 * gives the peaks of V8's heap (`nodejs_heap_size_total_bytes`) and of its external memory
 * (`nodejs_external_memory_bytes`: `ArrayBuffer`s, i.e. serialized messages and frames) against
 * their first sample, MB.
 */
function sampleV8(url: string): { stop(): Promise<string> } {
  const names = ["nodejs_heap_size_total_bytes", "nodejs_external_memory_bytes"];
  const first = new Map<string, number>();
  const peak = new Map<string, number>();
  let sampling = true;
  const done = (async () => {
    while (sampling) {
      // A server gone (out of heap, stopped) or slow to answer gives no sample, never an error.
      const text = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(2000) })
        .then((res) => res.text())
        .catch(() => "");
      for (const name of names) {
        const mb = Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? NaN) / (1 << 20);
        if (Number.isNaN(mb)) continue;
        if (!first.has(name)) first.set(name, mb);
        peak.set(name, Math.max(peak.get(name) ?? mb, mb));
      }
      await sleep(100);
    }
  })();
  const growth = (name: string) => ((peak.get(name) ?? NaN) - (first.get(name) ?? NaN)).toFixed(0);
  return {
    async stop() {
      sampling = false;
      await done;
      return `; V8 heap +${growth(names[0]!)} MB, external peak +${growth(names[1]!)} MB`;
    },
  };
}

/** The child's RSS once it has not moved by more than 1 MB for half a second, MB. */
async function settledRss(): Promise<number> {
  let last = memory(server.pid).rssMb;
  for (let i = 0; i < 20; i++) {
    await sleep(500);
    const now = memory(server.pid).rssMb;
    if (Math.abs(now - last) <= 1) return now;
    last = now;
  }
  return last;
}

/** Resident set size of `pid` now and its peak since the last `resetPeak`, MB (Linux /proc). */
function memory(pid: number): { rssMb: number; peakMb: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(status)?.[1] ?? NaN);
  return { rssMb: kb("VmRSS") / 1024, peakMb: kb("VmHWM") / 1024 };
}

/** Resets the peak RSS (VmHWM) of `pid` to its current RSS. */
function resetPeak(pid: number): void {
  writeFileSync(`/proc/${pid}/clear_refs`, "5");
}

function report(line: string): void {
  if (process.env.FEED_MEMORY_REPORT) process.stdout.write(`${line}\n`);
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}
