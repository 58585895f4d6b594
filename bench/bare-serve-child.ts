/**
 * A bare Connect server as a child process, for the throughput benchmark's ceiling row: plain
 * `http` + `connectNodeAdapter`, no interceptors, no validation, no database; its `Prompt`
 * answers every request with the same `PromptResponse` (the one a real noReply prompt got, given
 * as base64 binary in `BARE_PROMPT_RESPONSE`). What one Node process with connect-node can serve
 * on this machine, whatever the database does. Prints `listening on <url>` when ready.
 *
 *   BARE_PROMPT_RESPONSE=<base64> node --import tsx bench/bare-serve-child.ts
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { fromBinary } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { PromptResponseSchema, SessionService } from "../gen/ledger/v1/service_pb.js";

const response = fromBinary(PromptResponseSchema, Buffer.from(process.env.BARE_PROMPT_RESPONSE ?? "", "base64"));
const server = http.createServer(
  connectNodeAdapter({ routes: (router) => router.service(SessionService, { prompt: async () => response }) }),
);
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
