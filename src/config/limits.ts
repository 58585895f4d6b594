/**
 * Size and count limits. The request limits are enforced before anything is persisted: over one
 * the request fails with `RESOURCE_EXHAUSTED` naming the limit and the value (docs/design.md §2).
 * The stream and connection limits (`watch_buffer_*`, `lock_connections`) bound what the server
 * holds for a client or a loop; passing one also answers `RESOURCE_EXHAUSTED` naming it
 * (docs/operations.md "The limits and how to size them").
 * Configure them under `limits` in ledger.json (snake_case keys, same names).
 */
export interface Limits {
  /** Largest request message, in bytes after decompression (connect `readMaxBytes`). Default 32 MiB. */
  request_bytes: number;
  /** Largest text draft, in bytes of UTF-8. Default 1 MiB. */
  text_part_bytes: number;
  /**
   * Most JSON one request carries in `google.protobuf.Struct`/`Value` fields (part metadata, tool
   * input and metadata in `UpdatePart`, never less there than the stored part's own; the output
   * format's JSON schema), all together, in bytes of compact JSON (strings by their UTF-8 bytes).
   * Such values cost far more CPU per byte than a text (1,000,000 list items of 2 bytes held the
   * event loop for 5 s), so this is much lower than `request_bytes`. Default 256 KiB.
   */
  metadata_bytes: number;
  /** Largest decoded `data:` URL body, in bytes. Default 20 MiB. */
  data_url_bytes: number;
  /** Largest file inlined as an attachment (image/PDF read from `file:`), in bytes. Default 20 MiB. */
  attachment_bytes: number;
  /** Most drafts in one prompt. Default 256. */
  parts_per_prompt: number;
  /**
   * Most pixels one image may decode to, read from its header before any pixel is decoded:
   * width × height, times the frame count for animated GIF/WebP (pixels). Guards against
   * decompression bombs (a small file declaring a huge canvas). Default 50 000 000.
   */
  image_pixels: number;
  /**
   * Largest source file parsed to expand a one-line `file:` range (`?start=N&end=N`) to the
   * symbol starting on that line (bytes). A bigger file is read as the single line. Default 1 MiB.
   */
  symbol_source_bytes: number;
  /**
   * Most one-line ranges of one prompt widened to a symbol, in draft order; later ones read
   * their single line. Parsing runs on the server's event loop, one file at a time, so this and
   * `symbol_source_bytes` bound the work one prompt can ask for. Default 16.
   */
  symbol_lookups: number;
  /**
   * Most events waiting, unread, for one stream (`WatchSession`, `PromptStream`,
   * `ResumeSession`) while its client does not read (events, deltas included). A stream
   * past it ends with `RESOURCE_EXHAUSTED` (reason `WATCHER_TOO_SLOW`, metadata `last_seq`): its
   * client resumes with `WatchSession(after_seq = last_seq)`. Must exceed the events of the
   * largest single write (a revert's removals, a prompt's parts). Default 10 000.
   */
  watch_buffer_events: number;
  /**
   * Most bytes (the events' protobuf size) waiting, unread, for one stream; same outcome as
   * `watch_buffer_events`. Must exceed the largest single write (about `request_bytes` plus the
   * files a prompt reads). Default 64 MiB.
   */
  watch_buffer_bytes: number;
  /**
   * Most Postgres connections that hold session locks (one per running or waiting agent loop,
   * subagent runs included), outside the query pool. A loop that cannot get one does not start:
   * its caller gets `RESOURCE_EXHAUSTED` (reason `LOCK_CONNECTIONS_EXHAUSTED`); the prompt stays
   * stored for `ResumeSession`. Keep it, plus the query pool, within Postgres's
   * `max_connections` for every replica. Unused with the embedded database. Default 50.
   */
  lock_connections: number;
  /**
   * Largest text item of an MCP resource a prompt stores (bytes of UTF-8), and the most of an MCP
   * tool's output stored (cut, with a note). A resource draft with a bigger item gets a failure
   * text naming this limit instead of its content; the prompt is still stored. Default 1 MiB
   * (as `text_part_bytes`, the largest text a client may send itself).
   */
  mcp_item_bytes: number;
  /**
   * Most MCP resource text one prompt stores, all its resource drafts together, in draft order
   * (bytes of UTF-8). A resource draft that would pass it gets a failure text naming this limit;
   * the prompt is still stored. Default 8 MiB (a quarter of `request_bytes`).
   */
  mcp_prompt_bytes: number;
  /**
   * Most one `ListMessages` page holds, in bytes of its messages' and parts' JSON as written
   * (UTF-8, uncompressed: `listMessageRowsWithBytes`; what a client receives, not what the
   * database's compression makes of it): a page ends
   * before the message that would pass it, so large sessions are answered in several pages
   * whatever `page_size` asks; a message larger than this alone still makes a page. Default
   * 4 MiB (grpc-js clients refuse a response over 4 MiB by default). A probe, 2026-12-02: a
   * 150 MB session answered in one page held the event loop for 3.3 s on PGlite.
   */
  page_bytes: number;
}

/** The defaults of every limit. */
export const DEFAULT_LIMITS: Limits = {
  request_bytes: 32 * 1024 * 1024,
  text_part_bytes: 1024 * 1024,
  metadata_bytes: 256 * 1024,
  data_url_bytes: 20 * 1024 * 1024,
  attachment_bytes: 20 * 1024 * 1024,
  parts_per_prompt: 256,
  image_pixels: 50_000_000,
  symbol_source_bytes: 1024 * 1024,
  symbol_lookups: 16,
  watch_buffer_events: 10_000,
  watch_buffer_bytes: 64 * 1024 * 1024,
  lock_connections: 50,
  mcp_item_bytes: 1024 * 1024,
  mcp_prompt_bytes: 8 * 1024 * 1024,
  page_bytes: 4 * 1024 * 1024,
};
