/**
 * `data:` URLs of images, as clients send them (found while timing the tests, 2026-12-02): the WHATWG URL
 * parser under `data-urls` takes about 2.5 s of CPU per MiB of URL, during which the event loop
 * serves nobody; `parseDataUrl` gives the library's result without running it over the body.
 *
 * 1. `parseDataUrl` on a 4 MiB image's base64 URL vs the bare decode of the same text
 *    (`Buffer.from(body, "base64")`). The note has the library's whole-URL parse of a 1 MiB
 *    image's URL (what it cost before), measured once.
 * 2. A noReply `Prompt` with one image as a `data:` URL vs the same image as a `file:` URL (read
 *    from the session directory), median of the runs: both normalize the same bytes.
 */
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { randomBytes } from "node:crypto";
import parseDataURL from "data-urls";
import sharp from "sharp";
import { parseDataUrl, toDataUrl } from "../src/parts/data-url.js";
import { atMost, connectClient, createBenchDatabase, elapsedMs, log, now, percentile, row, scaled, tempDir, type Row } from "./common.js";
import { startBenchLedger } from "./ledger.js";

const MiB = 1024 * 1024;

/** The two rows above (ms), each against its baseline; the ledger runs on a `ledger_bench_dataurl_*` Postgres database. */
export async function dataUrl(): Promise<Row[]> {
  const rows: Row[] = [];
  const runs = scaled(20, 5);

  const bytes = randomBytes(4 * MiB);
  const url = toDataUrl("image/png", bytes);
  const body = url.slice(url.indexOf(",") + 1);
  // Each in its own block (a warm-up run first), so the garbage of one is not collected in the other's runs.
  const time = (fn: () => unknown): number[] => {
    fn();
    return Array.from({ length: runs }, () => {
      const t = now();
      fn();
      return elapsedMs(t);
    });
  };
  const ours = time(() => parseDataUrl("url", url));
  const bare = time(() => Buffer.from(body, "base64"));
  const small = toDataUrl("image/png", bytes.subarray(0, MiB));
  const t = now();
  parseDataURL(small);
  const library = elapsedMs(t);
  rows.push(
    row(
      "data: URL, 4 MiB image: parseDataUrl vs a bare base64 decode, p50",
      percentile(ours, 50),
      percentile(bare, 50),
      "ms",
      atMost(5),
      `the library parsing a 1 MiB image's URL whole: ${library.toFixed(0)} ms (${runs} runs)`,
    ),
  );

  const database = await createBenchDatabase("dataurl");
  const work = await tempDir("dataurl");
  const ledger = await startBenchLedger({ kind: "postgres", url: database.url }, work.dir);
  const client = connectClient(ledger.url);
  try {
    log("data: URL: a noisy 1600×1200 JPEG, sent as data: and as file:");
    const jpeg = await sharp(randomBytes(1600 * 1200 * 3), { raw: { width: 1600, height: 1200, channels: 3 } })
      .jpeg({ quality: 95 })
      .toBuffer();
    await writeFile(path.join(work.dir, "photo.jpg"), jpeg);
    const sessionId = (await client.createSession({ directory: work.dir })).session!.id;
    const drafts = {
      data: toDataUrl("image/jpeg", jpeg),
      file: pathToFileURL(path.join(work.dir, "photo.jpg")).href,
    };
    const times: Record<keyof typeof drafts, number[]> = { data: [], file: [] };
    const promptRuns = scaled(10, 3);
    for (let i = 0; i < promptRuns + 1; i++) {
      for (const kind of ["data", "file"] as const) {
        const t0 = now();
        await client.prompt({
          sessionId,
          noReply: true,
          parts: [{ kind: { case: "file", value: { url: drafts[kind], mime: "image/jpeg", filename: "photo.jpg" } } }],
        });
        if (i > 0) times[kind].push(elapsedMs(t0));
      }
    }
    rows.push(
      row(
        `noReply Prompt with a ${(jpeg.byteLength / MiB).toFixed(1)} MiB JPEG: data: URL vs file: URL, p50`,
        percentile(times.data, 50),
        percentile(times.file, 50),
        "ms",
        atMost(1.5),
        `${promptRuns} prompts each after one unmeasured; the same bytes normalized either way`,
      ),
    );
  } finally {
    await ledger.close(1000);
    await database.drop();
    await work.remove();
  }
  return rows;
}
