import { mkdir, mkdtemp, realpath, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { ToolContext } from "../../src/tools/tool-context.js";

/** A temp layout for tool tests: `<base>/session` (the session dir), `<base>/extra` (a root), `<base>/outside`. */
export interface ToolTree {
  base: string;
  session: string;
  extra: string;
  outside: string;
  ctx: ToolContext;
  /** Writes `content` at `rel` under the session dir (parents created); `mtime` in seconds since the epoch. */
  write(rel: string, content: string | Uint8Array, mtime?: number): Promise<string>;
  cleanup(): Promise<void>;
}

/** Creates a {@link ToolTree}; `outside/secret.txt` holds `secret foo`. */
export async function toolTree(prefix: string): Promise<ToolTree> {
  const base = await realpath(await mkdtemp(join(tmpdir(), prefix)));
  const session = join(base, "session");
  const extra = join(base, "extra");
  const outside = join(base, "outside");
  for (const dir of [session, extra, outside]) await mkdir(dir);
  await writeFile(join(outside, "secret.txt"), "secret foo\n");
  const write = async (rel: string, content: string | Uint8Array, mtime?: number): Promise<string> => {
    const path = join(session, rel);
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, content);
    if (mtime !== undefined) await utimes(path, mtime, mtime);
    return path;
  };
  return {
    base,
    session,
    extra,
    outside,
    write,
    ctx: { directory: session, roots: [extra] },
    cleanup: () => rm(base, { recursive: true, force: true }),
  };
}

/** A context whose signal is already aborted. */
export function aborted(ctx: ToolContext): ToolContext {
  const controller = new AbortController();
  controller.abort();
  return { ...ctx, signal: controller.signal };
}
