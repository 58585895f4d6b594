/**
 * Loading something heavy on first use (a package's `import()`, a WebAssembly runtime, a
 * provider), once per process: later uses share the first load, and a load that failed is not
 * remembered, so the next use tries again (a transient EMFILE must not disable a feature until
 * restart).
 */

/**
 * A function that runs `load` on its first call and answers every later call with that call's
 * promise; after that promise rejects, the next call runs `load` again.
 *
 * ```ts
 * const loadSharp = loadOnce(() => import("sharp").then((mod) => mod.default));
 * const sharp = await loadSharp(); // imported here, on the first image
 * ```
 */
export function loadOnce<T>(load: () => Promise<T>): () => Promise<T> {
  const once = loadOncePerKey<undefined, T>(load);
  return () => once(undefined);
}

/** {@link loadOnce} per key: `load(key)` runs on the first call with that key, and again after it rejected. */
export function loadOncePerKey<K, T>(load: (key: K) => Promise<T>): (key: K) => Promise<T> {
  const loads = new Map<K, Promise<T>>();
  return (key) => {
    const known = loads.get(key);
    if (known !== undefined) return known;
    const loading = load(key);
    loads.set(key, loading);
    loading.catch(() => {
      if (loads.get(key) === loading) loads.delete(key);
    });
    return loading;
  };
}
