/** What a turn's `take` answered: the bytes fit (and are counted), or not, with the bytes counted before. */
export type McpTake = { ok: true } | { ok: false; used: number };

/** One resource draft's turn at an {@link McpBudget}. */
export interface McpTurn {
  /** Waits for the earlier drafts' turns, then counts `bytes` when they fit within the budget. Once per turn. */
  take(bytes: number): Promise<McpTake>;
  /** Ends the turn (without counting, when `take` was not called); call it in every case, e.g. in `finally`. */
  done(): void;
}

/**
 * The MCP resource text of one prompt, counted against `limits.mcp_prompt_bytes` in draft order
 * while the reads themselves run concurrently: each resource draft takes a {@link turn} in draft
 * order (synchronously, before any read starts); a turn's `take` waits until every earlier turn
 * is done, so the first drafts fill the budget whatever order their servers answer in.
 */
export class McpBudget {
  private used = 0;
  private tail: Promise<void> = Promise.resolve();

  constructor(readonly max: number) {}

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
