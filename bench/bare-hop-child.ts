/**
 * A bare relay hop as a child process, for the relay benchmark's split of "commit → visible on
 * another replica": a plain connect-node server (plain `http`, no interceptors, no validation, no
 * database) whose `WatchSession` streams, to every open stream, one event per message received on
 * the bench's round-trip channel: a NATS subscription to `bench.rtt` (`BARE_HOP_URL=nats://...`)
 * or a Postgres `LISTEN bench_rtt` (`BARE_HOP_URL=postgres://...`). The message's last
 * `|`-separated field is the event's `seq`. What a replica's relay → bus → stream path costs with
 * nothing of the ledger in it. Prints `listening on <url>` when subscribed and listening.
 *
 *   BARE_HOP_URL=nats://127.0.0.1:4222 node --import tsx bench/bare-hop-child.ts
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { connect } from "@nats-io/transport-node";
import pg from "pg";
import { SessionService, WatchSessionResponseSchema } from "../gen/ledger/v1/service_pb.js";

const url = process.env.BARE_HOP_URL ?? "";
const streams = new Set<(seq: bigint) => void>();
const deliver = (payload: string) => {
  const seq = BigInt(payload.slice(payload.lastIndexOf("|") + 1));
  for (const push of streams) push(seq);
};

if (url.startsWith("nats:")) {
  const nc = await connect({ servers: [url], name: "bench-bare-hop" });
  nc.subscribe("bench.rtt", { callback: (error, msg) => void (error ? undefined : deliver(msg.string())) });
  await nc.flush();
} else {
  const client = new pg.Client({ connectionString: url, application_name: "bench-bare-hop" });
  await client.connect();
  client.on("notification", (message) => deliver(message.payload ?? ""));
  await client.query("listen bench_rtt");
}

const server = http.createServer(
  connectNodeAdapter({
    routes: (router) =>
      router.service(SessionService, {
        async *watchSession(request, context) {
          const queue: bigint[] = [];
          let wake: (() => void) | undefined;
          const push = (seq: bigint) => {
            queue.push(seq);
            wake?.();
          };
          streams.add(push);
          context.signal.addEventListener("abort", () => wake?.(), { once: true });
          try {
            while (!context.signal.aborted) {
              if (queue.length === 0) await new Promise<void>((resolve) => (wake = resolve));
              wake = undefined;
              for (const seq of queue.splice(0)) {
                yield create(WatchSessionResponseSchema, {
                  event: {
                    sessionId: request.sessionId,
                    seq,
                    kind: { case: "sessionStatus", value: { status: { case: "idle", value: {} } } },
                  },
                });
              }
            }
          } finally {
            streams.delete(push);
          }
        },
      }),
  }),
);
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`);
});
process.on("SIGTERM", () => process.exit(0));
