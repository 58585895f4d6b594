import { describe, expect, it } from "vitest";
import { withFileLock } from "../../src/files/file-lock.js";

const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

describe("withFileLock", () => {
  it("a caller that gives up while an earlier holder runs keeps the queue: the next caller still waits for that holder", async () => {
    const log: string[] = [];
    let allow!: () => void;
    const holder = withFileLock("/k/queue", async () => {
      log.push("holder start");
      await new Promise<void>((resolve) => (allow = resolve));
      log.push("holder end");
    });
    await tick();
    const controller = new AbortController();
    const waiting = withFileLock("/k/queue", async () => void log.push("waiting ran"), controller.signal).catch((error: Error) =>
      log.push(`waiting: ${error.message}`),
    );
    controller.abort(new Error("aborted"));
    await tick();
    // Queued after the one that gave up (before the fix it ran at once, beside the holder).
    const after = withFileLock("/k/queue", async () => void log.push("after ran"));
    await tick();
    log.push("allow");
    allow();
    await Promise.all([holder, waiting, after]);
    expect(log).toEqual(["holder start", "waiting: aborted", "allow", "holder end", "after ran"]);
  });

  it("runs one path's callers one at a time in order, other paths at once, and passes results and errors on", async () => {
    const log: string[] = [];
    const slow = (name: string, ms: number) => async () => {
      log.push(`${name} start`);
      await new Promise((resolve) => setTimeout(resolve, ms));
      log.push(`${name} end`);
      return name;
    };
    const results = await Promise.all([
      withFileLock("/k/a", slow("a1", 20)),
      withFileLock("/k/a", async () => {
        throw new Error("a2 failed");
      }).catch((error: Error) => error.message),
      withFileLock("/k/a", slow("a3", 1)),
      withFileLock("/k/b", slow("b1", 1)),
    ]);
    expect(results).toEqual(["a1", "a2 failed", "a3", "b1"]);
    expect(log.indexOf("a1 end")).toBeLessThan(log.indexOf("a3 start"));
    expect(log.indexOf("b1 end")).toBeLessThan(log.indexOf("a1 end"));
  });
});
