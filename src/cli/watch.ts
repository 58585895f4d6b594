import { toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionEventSchema } from "../../gen/ledger/v1/event_pb.js";
import type { Ledger } from "./client.js";
import type { CliIo } from "./io.js";
import { formatEvent } from "./print.js";
import { EXIT_OK } from "./render.js";

/** `ledger watch` options. */
export interface WatchOptions {
  /** `--after SEQ`: replay the events after this seq (default 0: the whole log). */
  after?: bigint;
  /** `--json`: one event per line in the proto JSON form. */
  json?: boolean;
}

/**
 * Follows a session's events (`WatchSession{after_seq}`): the stored ones after `--after`, then
 * live ones as they happen, printed by `print` as they arrive, one {@link formatEvent} line per
 * event (text deltas are not shown: each part's next snapshot is), or with `--json` one JSON
 * line per event, deltas included. Ends with {@link EXIT_OK} when the session is deleted (the
 * server ends the stream after `sessionDeleted`) or at Ctrl-C (SIGINT through `io.onSignal`).
 * Throws the `ConnectError` a failed stream ends with (`NOT_FOUND` for an unknown session,
 * `OUT_OF_RANGE` with `CURSOR_EXPIRED` for a cursor retention passed, `UNAVAILABLE` from a
 * draining server, ...), after a line on stderr saying how to go on from the last event
 * printed (`--after N`).
 */
export async function runWatch(
  client: Ledger,
  sessionId: string,
  opts: WatchOptions,
  io: Pick<CliIo, "stderr" | "onSignal">,
  print: (line: string) => void,
): Promise<number> {
  const controller = new AbortController();
  let stopped = false;
  const dispose = io.onSignal("SIGINT", () => {
    stopped = true;
    controller.abort();
  });
  let last = opts.after ?? 0n;
  try {
    for await (const { event } of client.watchSession({ sessionId, afterSeq: last }, { signal: controller.signal })) {
      if (!event) continue;
      last = event.seq;
      if (opts.json) print(toJsonString(SessionEventSchema, event));
      else {
        const line = formatEvent(event);
        if (line !== undefined) print(line);
      }
    }
    return EXIT_OK;
  } catch (error) {
    if (stopped && ConnectError.from(error).code === Code.Canceled) return EXIT_OK;
    if (last > 0n) io.stderr.write(`to go on from the last event printed: ledger watch ${sessionId} --after ${last}\n`);
    throw error;
  } finally {
    dispose();
  }
}
