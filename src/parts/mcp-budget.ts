import pLimit, { type LimitFunction } from "p-limit";

/** What a turn's `take` answered: the bytes fit (and are counted), or not, with the bytes counted before. */
export type McpTake = { ok: true } | { ok: false; used: number };

/** One resource draft's turn at an {@link McpBudget}. */
export interface McpTurn {
  /** Waits for the turn's read slot, then runs `read`, unless the budget is full by then (`full`: nothing more can fit). */
  read<T>(read: () => Promise<T>): Promise<{ full: true; used: number } | { full: false; value: T }>;
  /** Waits for the earlier drafts' turns, then counts `bytes` when they fit within the budget. Once per turn. */
  take(bytes: number): Promise<McpTake>;
  /** Ends the turn (without counting, when `take` was not called); call it in every case, e.g. in `finally`. */
  done(): void;
}

/**
 * Most MCP resource reads of one prompt at once. Each answer is at most 10 MiB (the stdio and
 * HTTP message limits), so a prompt holds at most about 40 MiB of answers being checked, however
 * many resource drafts it has (`parts_per_prompt` allows 256: unbounded, they were all read at
 * once, 9 MB each held until checked: +342 MiB for 25 drafts, measured).
 */
export const MCP_READS_AT_ONCE = 4;

/**
 * The MCP resource text of one prompt, counted against `limits.mcp_prompt_bytes` in draft order
 * while the reads themselves run concurrently (at most {@link MCP_READS_AT_ONCE} drafts at a
 * time, each from its read to its take): each resource draft takes a {@link turn} in draft order (synchronously, before
 * any read starts); a turn's `take` waits until every earlier turn is done, so the first drafts
 * fill the budget whatever order their servers answer in.
 */
export class McpBudget {
  private used = 0;
  private tail: Promise<void> = Promise.resolve();
  private readonly slots: LimitFunction = pLimit(MCP_READS_AT_ONCE);

  constructor(readonly max: number) {}

  /**
   * The next draft's turn. Its read slot is asked for now (slots are handed out in turn order,
   * first come first served) and held until the turn is done — through the read, the checks and
   * the `take` — so at most {@link MCP_READS_AT_ONCE} answers are held at once. No turn waits
   * for a later one, so this cannot deadlock, as long as every turn is `done`.
   */
  turn(): McpTurn {
    const previous = this.tail;
    let release!: () => void;
    this.tail = new Promise<void>((resolve) => (release = resolve));
    let ended = false;
    let freeSlot: (() => void) | undefined;
    const granted = new Promise<void>((grant) => {
      void this.slots(() => {
        grant();
        return ended ? Promise.resolve() : new Promise<void>((free) => (freeSlot = free));
      });
    });
    const end = () => {
      if (ended) return;
      ended = true;
      freeSlot?.();
      void previous.then(release);
    };
    return {
      read: async (read) => {
        await granted;
        if (this.used >= this.max) return { full: true, used: this.used };
        return { full: false, value: await read() };
      },
      take: async (bytes) => {
        await previous;
        try {
          if (this.used + bytes > this.max) return { ok: false, used: this.used };
          this.used += bytes;
          return { ok: true };
        } finally {
          end();
        }
      },
      done: end,
    };
  }
}
