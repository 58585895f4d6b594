import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import { failure } from "../support/errors.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { partText, text } from "../support/prompt.js";
import { listPages } from "../support/stored.js";

// ListMessages paging in both orders through the real server: oldest first (the default) and
// newest first (`newest_first`, "the latest N" in one call), with the revert point honoured.

let t: TestLedger;
beforeAll(async () => {
  t = await startTestLedger();
});
afterAll(() => t?.close());

const firstText = (m: MessageWithParts) => partText(m.parts[0]);

/** A session with seven stored prompts "m1" … "m7". */
async function sevenMessages(): Promise<{ sessionId: string; sent: MessageWithParts[] }> {
  const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  const sent: MessageWithParts[] = [];
  for (let i = 1; i <= 7; i++) sent.push((await t.client.prompt({ sessionId, noReply: true, parts: [text(`m${i}`)] })).message!);
  return { sessionId, sent };
}

/** Every page of a listing as the first text of each message, page by page. */
const pages = (sessionId: string, request: { pageSize: number; newestFirst?: boolean; includeReverted?: boolean }) =>
  listPages(t.client, { sessionId, ...request }, firstText);

describe("ListMessages order", () => {
  it("pages oldest first by default", async () => {
    const { sessionId } = await sevenMessages();
    expect(await pages(sessionId, { pageSize: 3 })).toEqual([["m1", "m2", "m3"], ["m4", "m5", "m6"], ["m7"]]);
  });

  it("with newest_first reads the latest N in one call and pages on to older ones", async () => {
    const { sessionId, sent } = await sevenMessages();
    const latest = await t.client.listMessages({ sessionId, pageSize: 2, newestFirst: true });
    expect(latest.messages).toEqual([sent[6], sent[5]]);
    expect(latest.nextPageToken).not.toBe("");
    expect(await pages(sessionId, { pageSize: 3, newestFirst: true })).toEqual([["m7", "m6", "m5"], ["m4", "m3", "m2"], ["m1"]]);
    expect(await pages(sessionId, { pageSize: 7, newestFirst: true })).toEqual([["m7", "m6", "m5", "m4", "m3", "m2", "m1"]]);
  });

  it("refuses a page token of the other order with INVALID_ARGUMENT naming page_token", async () => {
    const { sessionId } = await sevenMessages();
    const oldest = await t.client.listMessages({ sessionId, pageSize: 2 });
    const newest = await t.client.listMessages({ sessionId, pageSize: 2, newestFirst: true });
    expect(
      await failure(t.client.listMessages({ sessionId, pageSize: 2, newestFirst: true, pageToken: oldest.nextPageToken })),
    ).toMatchObject({
      code: Code.InvalidArgument,
      field: "page_token",
    });
    expect(await failure(t.client.listMessages({ sessionId, pageSize: 2, pageToken: newest.nextPageToken }))).toMatchObject({
      code: Code.InvalidArgument,
      field: "page_token",
    });
    const message = await t.client
      .listMessages({ sessionId, pageSize: 2, pageToken: newest.nextPageToken })
      .catch((error: Error) => error.message);
    expect(message).toContain("page_token: continues a listing with newest_first = true; send the same newest_first");
    const forged = await t.client.listMessages({ sessionId, pageToken: "bm90LWEtdG9rZW4" }).catch((error: Error) => error.message);
    expect(forged).toContain("page_token: is not a page token issued by this service");
  });

  it("refuses a page token of another session (positions are per session: it would skip this one's first messages)", async () => {
    const [a, b] = [await sevenMessages(), await sevenMessages()];
    for (const newestFirst of [false, true]) {
      const { nextPageToken } = await t.client.listMessages({ sessionId: a.sessionId, pageSize: 2, newestFirst });
      const error = await t.client.listMessages({ sessionId: b.sessionId, pageSize: 2, newestFirst, pageToken: nextPageToken }).then(
        () => "listed",
        (e: Error) => e.message,
      );
      expect(error).toBe(
        "[invalid_argument] page_token: continues the listing of another session; send it with the session_id of the call that returned it, or no page_token to start over",
      );
    }
    // Its own token still pages on.
    expect(await pages(b.sessionId, { pageSize: 3 })).toEqual([["m1", "m2", "m3"], ["m4", "m5", "m6"], ["m7"]]);
  });

  it("with newest_first starts below a revert point unless include_reverted", async () => {
    const { sessionId, sent } = await sevenMessages();
    await t.client.revert({ sessionId, messageId: sent[4]!.message!.kind.value!.id });
    expect(await pages(sessionId, { pageSize: 3, newestFirst: true })).toEqual([["m4", "m3", "m2"], ["m1"]]);
    expect(await pages(sessionId, { pageSize: 4, newestFirst: true, includeReverted: true })).toEqual([
      ["m7", "m6", "m5", "m4"],
      ["m3", "m2", "m1"],
    ]);
  });
});
