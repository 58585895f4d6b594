import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { partText, text } from "../support/prompt.js";
import { idOf, listPages } from "../support/stored.js";

// limits.page_bytes: a ListMessages page holds at most that much of its parts' stored JSON (at
// least one message), whatever page_size asks. A probe, 2026-12-02: a 150 MB session answered in
// one page (5 messages) held the event loop for 3.3 s on PGlite, and a grpc-js client refuses a
// response over 4 MiB by default.

const PAGE_BYTES = 10_000;
let t: TestLedger;
let sessionId: string;
/** The session's messages in order: 4 KB, 4 KB, 12 KB (over the budget alone), 10 bytes of text. */
let ids: string[];
beforeAll(async () => {
  t = await startTestLedger({ limits: { page_bytes: PAGE_BYTES } });
  sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
  ids = [];
  // Random text: the page is sized by the stored (compressed) size, which repeated text would shrink.
  for (const size of [4000, 4000, 12_000, 10]) {
    const res = await t.client.prompt({ sessionId, noReply: true, parts: [text(randomBytes(size).toString("base64").slice(0, size))] });
    ids.push(idOf(res.message!));
  }
});
afterAll(() => t?.close());

/** Every page ListMessages answers, as message ids. */
const pages = (newestFirst: boolean, pageSize = 100) => listPages(t.client, { sessionId, pageSize, newestFirst }, idOf);

describe("ListMessages pages by page_bytes", () => {
  it("oldest first: a page ends before the message that would pass it; a message over it alone is a page", async () => {
    const [m1, m2, m3, m4] = ids;
    expect(await pages(false)).toEqual([[m1, m2], [m3], [m4]]);
    const res = await t.client.listMessages({ sessionId, pageSize: 100 });
    expect(res.messages.map((m) => partText(m.parts[0]).length)).toEqual([4000, 4000]);
  });

  it("newest first the same way; page_size still bounds a page", async () => {
    const [m1, m2, m3, m4] = ids;
    expect(await pages(true)).toEqual([[m4], [m3], [m2, m1]]);
    expect(await pages(false, 1)).toEqual([[m1], [m2], [m3], [m4]]);
  });
});
