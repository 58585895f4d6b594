import { describe, expect, it } from "vitest";
import { WriteSlots } from "../../src/events/write-slots.js";
import { sleep } from "../support/wait.js";

// The write slots of large replayed events (src/events/write-slots.ts): how many at once, first
// come first served, a slot held too long is given back, an aborted wait takes none.

/** Settles pending promise callbacks (p-limit starts the next task on a microtask). */
const tick = () => sleep(5);

describe("WriteSlots", () => {
  it("grants `count` slots at once and the next in the order asked, as each is released (twice is once)", async () => {
    const slots = new WriteSlots(2, 60_000);
    const order: string[] = [];
    const ask = (name: string) => slots.acquire().then((release) => (order.push(name), release!));
    const a = ask("a");
    const b = ask("b");
    const c = ask("c");
    const d = ask("d");
    await tick();
    expect(order).toEqual(["a", "b"]);
    expect(slots.waiting).toBe(2);
    const releaseA = await a;
    releaseA();
    releaseA();
    await tick();
    expect(order).toEqual(["a", "b", "c"]);
    (await b)();
    await tick();
    expect(order).toEqual(["a", "b", "c", "d"]);
    (await c)();
    (await d)();
    expect(slots.waiting).toBe(0);
  });

  it("gives a slot back after holdMs when its holder does not", async () => {
    const slots = new WriteSlots(1, 50);
    const held = await slots.acquire();
    expect(held).toBeTypeOf("function");
    const started = Date.now();
    const next = await slots.acquire();
    expect(Date.now() - started).toBeGreaterThanOrEqual(45);
    expect(next).toBeTypeOf("function");
    held!();
    next!();
  });

  it("a wait whose signal aborts resolves undefined and takes no slot; an aborted signal does not wait", async () => {
    const slots = new WriteSlots(1, 60_000);
    const held = await slots.acquire();
    const stop = new AbortController();
    const waiting = slots.acquire(stop.signal);
    const after = slots.acquire();
    stop.abort();
    expect(await waiting).toBeUndefined();
    expect(await slots.acquire(stop.signal)).toBeUndefined();
    held!();
    // The aborted wait's turn passed the slot on at once.
    const release = await after;
    expect(release).toBeTypeOf("function");
    release!();
    await tick();
    expect(slots.waiting).toBe(0);
  });
});
