import pLimit, { type LimitFunction } from "p-limit";

/** What a turn's `take` answered: the bytes fit (and are counted), or not, with the bytes counted before. */
export type McpTake = { ok: true } | { ok: false; used: number };

/** One resource draft's turn at an {@link McpBudget}. */
export interface McpTurn {
  /** The budget's {@link McpBudget.read}: `read` in one of the prompt's read slots, unless the budget is full by then. */
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
 * while the reads themselves run concurrently (at most {@link MCP_READS_AT_ONCE} at a time, see
 * {@link read}): each resource draft takes a {@link turn} in draft order (synchronously, before
 * any read starts); a turn's `take` waits until every earlier turn is done, so the first drafts
 * fill the budget whatever order their servers answer in.
 */
export class McpBudget {
  private used = 0;
  private tail: Promise<void> = Promise.resolve();
  private readonly reads: LimitFunction = pLimit(MCP_READS_AT_ONCE);

  constructor(readonly max: number) {}

  /**
   * Runs `read` when one of the prompt's {@link MCP_READS_AT_ONCE} read slots is free, or answers
   * `full` without reading when the budget is already used up by then (nothing more can fit).
   */
  read<T>(read: () => Promise<T>): Promise<{ full: true; used: number } | { full: false; value: T }> {
    return this.reads(async () => (this.used >= this.max ? { full: true, used: this.used } : { full: false, value: await read() }));
  }

  /** The next draft's turn. */
  turn(): McpTurn {
    const previous = this.tail;
    let release!: () => void;
    this.tail = new Promise<void>((resolve) => (release = resolve));
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      void previous.then(release);
    };
    return {
      read: (read) => this.read(read),
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
