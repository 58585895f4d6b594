import { mkdtemp, realpath, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import { runCli, startCli } from "../support/cli.js";
import { drainDetails } from "../support/drain.js";
import { collectEvents } from "../support/event-stream.js";
import { waitFor } from "../support/wait.js";

// `ledger serve --grace-ms`: what SIGTERM says on stderr and that an open stream does not hold
// the shutdown (docs/operations.md, "Running behind a load balancer"). In-process (`main(argv, io)`);
// test/replica/drain.test.ts sends SIGTERM to a real process.

const LISTENING = /^session-ledger listening on (http:\/\/127\.0\.0\.1:\d+)\n/;

let dir: string;
beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), "ledger-serve-drain-")));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

const place = () => ({ cwd: dir, env: { PATH: process.env.PATH } });

describe("ledger serve --grace-ms", () => {
  it("SIGTERM: says it drains and for how long, ends an open WatchSession with its cursor, exits 0 well within the grace period", async () => {
    const serve = startCli(["serve", "--port", "0", "--db", ":memory:", "--no-web", "--grace-ms", "20000"], place());
    let stopped = false;
    try {
      const [, url] = await serve.waitForStdout(LISTENING);
      const client = createClient(SessionService, createGrpcTransport({ baseUrl: url! }));
      const sessionId = (await client.createSession({ directory: dir })).session!.id;
      const watcher = collectEvents((signal) => client.watchSession({ sessionId, afterSeq: 0n }, { signal }));
      await watcher.reach(1n);
      serve.signal("SIGTERM");
      stopped = true;
      // `serve` returned from main once it listened; what follows SIGTERM is on stderr (then io.exit(0)).
      const drained = await waitFor(
        "the drain to finish",
        () => /\nSIGTERM: drained in (\d+) ms; database closed\n/.exec(serve.stderr()) ?? undefined,
      );
      const stderr = serve.stderr();
      expect(stderr).toContain(
        "\nSIGTERM: draining: health answers NOT_SERVING, new requests get UNAVAILABLE, open streams end with UNAVAILABLE and their cursor (reconnect to another replica); finishing in-flight requests and agent loops for up to 20000 ms\n",
      );
      expect(stderr).not.toContain("error:");
      // A hang bound: the open stream does not hold the shutdown for the 20 s.
      expect(Number(drained[1])).toBeLessThan(10_000);
      await watcher.done;
      expect(drainDetails(watcher.failure())).toEqual({
        reason: "DRAINING",
        metadata: { session_id: sessionId, after_seq: "1" },
        retryMs: 250,
      });
    } finally {
      if (!stopped) serve.signal("SIGTERM");
      await serve.done;
      await waitFor("the server to close", () => serve.stderr().includes("database closed"));
    }
  });

  it("a second signal during the drain exits at once with 1, saying so", async () => {
    const exits: number[] = [];
    const serve = startCli(["serve", "--port", "0", "--db", ":memory:", "--no-web", "--grace-ms", "20000"], place(), {
      onExit: (code) => exits.push(code),
    });
    await serve.waitForStdout(LISTENING);
    serve.signal("SIGTERM");
    serve.signal("SIGTERM");
    expect(exits).toEqual([1]);
    expect(serve.stderr()).toContain(
      "\nSIGTERM again: exiting now without waiting for the drain (in-flight requests and loops are cut off)\n",
    );
    // In this process the drain goes on: let it finish before the next test.
    await waitFor("the server to close", () => serve.stderr().includes("database closed"));
    await serve.done;
  });

  it("refuses a --grace-ms that is not a whole number of milliseconds", async () => {
    const run = await runCli(["serve", "--port", "0", "--db", ":memory:", "--grace-ms", "1.5s"], place());
    expect(run.code).toBe(1);
    expect(run.stderr).toContain("--grace-ms: 1.5s is not a whole number of milliseconds (0 or more)");
  });
});
