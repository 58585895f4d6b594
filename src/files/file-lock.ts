/** The tail of each path's queue: resolves when the last holder queued for that path is done. */
const queues = new Map<string, Promise<void>>();

/**
 * Runs `fn` while holding this process's lock on `path`, after every earlier holder of it has
 * finished (first come, first served). The edit and write tools hold it from reading the file to
 * writing it, their permission ask included, so two calls on one file in a step (or two asks
 * answered one after the other) apply one after the other, each to what the other wrote,
 * instead of both writing from offset 0 over one read (OpenCode holds a lock per file the same
 * way, `FileTime.withLock`). The key should be canonical (`canonicalPath`), so two spellings of
 * one file share it. It does not lock against other processes or replicas.
 *
 * @param path - the lock's key: the file's canonical absolute path.
 * @param fn - the work; it runs only once the lock is held.
 * @param signal - while waiting for the lock, an abort gives up the place in the queue at once
 *   (the holders after it keep their order) and rejects with the signal's reason; `fn` never runs.
 * @returns what `fn` returned; the lock is released whether `fn` resolved or threw.
 * @throws what `fn` throws, or the signal's reason when it aborted before the lock was held.
 */
export async function withFileLock<T>(path: string, fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
  const before = queues.get(path) ?? Promise.resolve();
  let release!: () => void;
  const mine = new Promise<void>((done) => (release = done));
  const tail = before.then(() => mine);
  queues.set(path, tail);
  try {
    await (signal ? untilAborted(before, signal) : before);
    return await fn();
  } finally {
    release();
    // Forgotten once the whole queue up to here is done: a caller that gave up while an earlier
    // holder still runs must not drop the queue (the next caller would not wait for that holder).
    void tail.then(() => {
      if (queues.get(path) === tail) queues.delete(path);
    });
  }
}

/** `turn`, or a rejection with `signal.reason` as soon as `signal` aborts (at once if it has). */
function untilAborted(turn: Promise<void>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const abort = () => reject(signal.reason);
    signal.addEventListener("abort", abort, { once: true });
    void turn.then(() => {
      signal.removeEventListener("abort", abort);
      resolve();
    });
  });
}
