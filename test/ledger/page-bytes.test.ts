import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import type * as grpc from "@grpc/grpc-js";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { grpcLedgerClient } from "../support/grpc-js.js";
import { startFakeModelLedger, startTestLedger, type TestLedger } from "../support/ledger.js";
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
  // Random text here; repetitive text, which the database compresses, has a test of its own below.
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

describe("ListMessages pages by the JSON a client receives, not the compressed stored size", () => {
  it("6 messages of 1,000,000 repeated characters (about 12 KB each once stored): pages of 4, then 2 (also for rows stored before data_bytes), which a grpc-js client with its default 4 MiB limit reads", async () => {
    const big = await startTestLedger();
    const client = grpcLedgerClient(big.ledger.url);
    try {
      const session = (await big.client.createSession({ directory: big.dir })).session!.id;
      const sent: string[] = [];
      for (const letter of "abcdef") {
        const res = await big.client.prompt({ sessionId: session, noReply: true, parts: [text(letter.repeat(1_000_000))] });
        sent.push(idOf(res.message!));
      }
      // Before: one page of all 6 (6 MB of JSON counted as the ~70 KB the database stores), which
      // grpc-js refuses: RESOURCE_EXHAUSTED "Received message larger than max".
      const read = async () => {
        const pages: string[][] = [];
        let pageToken = "";
        do {
          const res = await new Promise<{
            messages: Array<{ message: { user?: { id: string } }; parts: unknown[] }>;
            nextPageToken: string;
          }>((resolve, reject) =>
            client.listMessages!({ sessionId: session, pageSize: 100, pageToken }, (error: grpc.ServiceError | null, response: unknown) =>
              error ? reject(error) : resolve(response as never),
            ),
          );
          pages.push(res.messages.map((m) => m.message.user!.id));
          pageToken = res.nextPageToken;
        } while (pageToken);
        return pages;
      };
      expect(await read()).toEqual([sent.slice(0, 4), sent.slice(4)]);
      // Rows stored before data_bytes existed (null) are measured from their data: the same pages.
      await sql`update part set data_bytes = null where session_id = ${session}`.execute(big.ledger.deps.db);
      await sql`update message set data_bytes = null where session_id = ${session}`.execute(big.ledger.deps.db);
      expect(await read()).toEqual([sent.slice(0, 4), sent.slice(4)]);
    } finally {
      client.close();
      await big.close();
    }
  });
});

// A review, 2026-12-03: rows without data_bytes are measured as their JSON text, so pages came out
// the same and no test noticed a write path that left it out.
describe("data_bytes", () => {
  it("is set on every message, part and event a model turn with a tool call, Shell, UpdatePart and a fork write", async () => {
    const f = await startFakeModelLedger();
    try {
      await writeFile(`${f.dir}/notes.txt`, "a note\n");
      const id = (await f.client.createSession({ directory: f.dir })).session!.id;
      f.fake.push(
        { kind: "stream", chunks: [{ toolCall: { id: "call_1", name: "read", arguments: JSON.stringify({ filePath: "notes.txt" }) } }] },
        { kind: "stream", chunks: [{ text: "read it" }] },
      );
      const answered = await f.client.prompt({ sessionId: id, parts: [text("read notes.txt")] });
      expect(answered.message!.parts.map((p) => p.kind.case)).toContain("text");
      await f.client.shell({ sessionId: id, agent: "build", command: "echo hi" });
      const first = (await f.client.listMessages({ sessionId: id })).messages[0]!;
      const part = first.parts[0]!;
      if (part.kind.case === "text") part.kind.value.text = "read notes.txt, please";
      await f.client.updatePart({ sessionId: id, messageId: idOf(first), part });
      const fork = (await f.client.forkSession({ sessionId: id })).session!.id;
      const db = f.ledger.deps.db;
      const missing = async (table: string) =>
        (
          await sql<{ n: string; all: string }>`SELECT count(*) FILTER (WHERE data_bytes IS NULL OR data_bytes <= 0) AS n, count(*) AS all
            FROM ${sql.table(table)} WHERE session_id IN (${id}, ${fork})`.execute(db)
        ).rows[0]!;
      const counts = { message: await missing("message"), part: await missing("part"), session_event: await missing("session_event") };
      for (const [table, { n, all }] of Object.entries(counts)) {
        expect([table, Number(n)]).toEqual([table, 0]);
        expect(Number(all), table).toBeGreaterThan(4);
      }
    } finally {
      await f.close();
    }
  });
});
