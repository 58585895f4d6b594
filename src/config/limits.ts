/**
 * Size and count limits, all enforced before anything is persisted. Over a limit the request
 * fails with `RESOURCE_EXHAUSTED` naming the limit and the value (docs/design.md §2).
 * Configure them under `limits` in ledger.json (snake_case keys, same names).
 */
export interface Limits {
  /** Largest request message, in bytes after decompression (connect `readMaxBytes`). Default 32 MiB. */
  request_bytes: number;
  /** Largest text draft, in bytes of UTF-8. Default 1 MiB. */
  text_part_bytes: number;
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
}

/** The defaults of every limit. */
export const DEFAULT_LIMITS: Limits = {
  request_bytes: 32 * 1024 * 1024,
  text_part_bytes: 1024 * 1024,
  data_url_bytes: 20 * 1024 * 1024,
  attachment_bytes: 20 * 1024 * 1024,
  parts_per_prompt: 256,
  image_pixels: 50_000_000,
  symbol_source_bytes: 1024 * 1024,
  symbol_lookups: 16,
};
