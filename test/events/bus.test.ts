import { describe, expect, it } from "vitest";
import { EventBus } from "../../src/events/bus.js";

describe("EventBus.onWatch", () => {
  it("reports a session's first listener and the departure of its last one, once each, per session", () => {
    const bus = new EventBus();
    const seen: Array<[string, boolean]> = [];
    const stop = bus.onWatch((sessionId, watched) => seen.push([sessionId, watched]));
    const listener = () => {};
    const a1 = bus.subscribe("ses_A", listener);
    const a2 = bus.subscribe("ses_A", listener); // the same function twice: two subscriptions
    const b1 = bus.subscribe("ses_B", () => {});
    expect(bus.watchedSessions()).toEqual(["ses_A", "ses_B"]);
    a1();
    a1(); // idempotent: does not take a2 with it
    expect(bus.watchedSessions()).toEqual(["ses_A", "ses_B"]);
    a2();
    b1();
    const a3 = bus.subscribe("ses_A", listener);
    stop();
    a3();
    expect(seen).toEqual([
      ["ses_A", true],
      ["ses_B", true],
      ["ses_A", false],
      ["ses_B", false],
      ["ses_A", true],
    ]);
    expect(bus.watchedSessions()).toEqual([]);
  });

  it("delivers to each subscription of the same listener function", () => {
    const bus = new EventBus();
    const got: string[] = [];
    const listener = (item: { sessionId: string }) => got.push(item.sessionId);
    const one = bus.subscribe("ses_A", listener);
    const two = bus.subscribe("ses_A", listener);
    bus.publish([{ hint: true, sessionId: "ses_A", seq: 1n }]);
    one();
    bus.publish([{ hint: true, sessionId: "ses_A", seq: 2n }]);
    two();
    bus.publish([{ hint: true, sessionId: "ses_A", seq: 3n }]);
    expect(got).toEqual(["ses_A", "ses_A", "ses_A"]);
  });
});
