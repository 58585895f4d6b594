/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Polls `check` every `intervalMs` (default 25 ms) until it returns a value other than undefined/false and returns that
 * value; a throwing check counts as "not yet" (its last error is quoted on timeout). Throws after
 * `timeoutMs` (ms) naming `what`. A bound against a hang, not a speed assertion.
 */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 20_000,
  intervalMs = 25,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? ` (last error: ${String(lastError)})` : ""}`);
    await sleep(intervalMs);
  }
}

/**
 * Hang bound for a call that must not block (a FIFO opened, /dev/zero read, an image decoded, a
 * backtracking regular expression), ms: what it guards against takes minutes or forever, while
 * the right behaviour takes milliseconds, so CPU load never decides it. A timer cannot fire while
 * synchronous work holds the event loop: there the bound is vitest's test timeout, after that
 * work ends. Speed goals live in `npm run bench`.
 */
export const HANG_MS = 10_000;

/**
 * Settles like `promise` (resolves or rejects with its value), or rejects naming `what` once
 * `timeoutMs` (ms, default {@link HANG_MS}) passed without it settling. A hang bound, not a
 * speed assertion.
 */
export async function settlesWithin<T>(what: string, promise: Promise<T>, timeoutMs = HANG_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: still running after ${timeoutMs} ms (blocked?)`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, hung]);
  } finally {
    clearTimeout(timer);
  }
}
