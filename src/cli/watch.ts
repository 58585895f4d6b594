import { toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
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
  /**
   * The server is this process's own (no `--url`): nothing can add events while it runs, so the
   * watch ends after the stored ones instead of waiting for live ones that cannot come.
   */
  storedOnly?: boolean;
}

/** A cursor past any log: `WatchSession` answers it with OUT_OF_RANGE carrying the log's `last_seq`. */
const PAST_ANY_LOG = 2n ** 64n - 1n;

/** The seq of the session's last stored event, from the CURSOR_AHEAD error's `last_seq` (the API has no other way to ask). */
async function lastSeqOf(client: Ledger, sessionId: string): Promise<bigint> {
  try {
    for await (const _ of client.watchSession({ sessionId, afterSeq: PAST_ANY_LOG })) break;
  } catch (error) {
    const info = ConnectError.from(error).findDetails(ErrorInfoSchema)[0];
    if (info?.reason === "CURSOR_AHEAD" && info.metadata.last_seq !== undefined) return BigInt(info.metadata.last_seq);
    throw error;
  }
  throw new Error(`WatchSession answered a cursor past any log for session ${sessionId}`);
}

/**
 * Follows a session's events (`WatchSession{after_seq}`): the stored ones after `--after`, then
 * live ones as they happen, printed by `print` as they arrive, one {@link formatEvent} line per
 * event (text deltas are not shown: each part's next snapshot is), or with `--json` one JSON
 * line per event, deltas included. Ends with {@link EXIT_OK} when the session is deleted (the
 * server ends the stream after `sessionDeleted`) or at Ctrl-C (SIGINT through `io.onSignal`);
 * with `storedOnly` (this process's own server), after the last stored event.
 * Throws the `ConnectError` a failed stream ends with (`NOT_FOUND` for an unknown session,
 * `OUT_OF_RANGE` with `CURSOR_EXPIRED` for a cursor retention passed, `UNAVAILABLE` from a
 * draining server, ...), after a line on stderr saying how to go on from the last event
 * printed (`--after N`), when one was printed.
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
  let printed = false;
  try {
    const end = opts.storedOnly ? await lastSeqOf(client, sessionId) : undefined;
    if (end !== undefined && last >= end) {
      if (last > end) throw new ConnectError(`--after ${last} is ahead of the session's log (last seq ${end})`, Code.OutOfRange);
      return EXIT_OK;
    }
    for await (const { event } of client.watchSession({ sessionId, afterSeq: last }, { signal: controller.signal })) {
      if (!event) continue;
      last = event.seq;
      printed = true;
      if (opts.json) print(toJsonString(SessionEventSchema, event));
      else {
        const line = formatEvent(event);
        if (line !== undefined) print(line);
      }
      if (end !== undefined && event.seq >= end) break;
    }
    return EXIT_OK;
  } catch (error) {
    if (stopped && ConnectError.from(error).code === Code.Canceled) return EXIT_OK;
    if (printed) io.stderr.write(`to go on from the last event printed: ledger watch ${sessionId} --after ${last}\n`);
    throw error;
  } finally {
    dispose();
  }
}
