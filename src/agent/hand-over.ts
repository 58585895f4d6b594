/**
 * The abort reason of an agent loop handed over at shutdown (the runner's `handOver`): the
 * server drained and its grace period ended while the loop still ran. The loop stops as on an
 * abort, but its current answer ends `interrupted` (the state crash recovery gives an answer a
 * dead process left open), not `aborted`, and the session lock is released, so `ResumeSession`
 * on another replica continues the answer (docs/operations.md, "Running behind a load balancer").
 */
export class LoopHandedOver extends Error {
  constructor() {
    super("the server shut down while this loop ran: its answer was handed over (ResumeSession continues it)");
    this.name = "LoopHandedOver";
  }
}

/** True when `reason` (an `AbortSignal.reason`) is a {@link LoopHandedOver}. */
export function isHandOver(reason: unknown): boolean {
  return reason instanceof LoopHandedOver;
}
