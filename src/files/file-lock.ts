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
 * @param fn - the work; its result or error is passed on, and the lock is released either way.
 */
export async function withFileLock<T>(path: string, fn: () => Promise<T>): Promise<T> {
  const before = queues.get(path) ?? Promise.resolve();
  let release!: () => void;
  const mine = new Promise<void>((done) => (release = done));
  const tail = before.then(() => mine);
  queues.set(path, tail);
  await before;
  try {
    return await fn();
  } finally {
    release();
    if (queues.get(path) === tail) queues.delete(path);
  }
}
