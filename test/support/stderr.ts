import { afterEach, beforeEach, vi } from "vitest";

/**
 * Captures what the code under test writes to this process's stderr during each test (not shown),
 * registering the file's (or the enclosing describe's) `beforeEach`/`afterEach`. `written()` is
 * the current test's chunks as text, in order.
 */
export function captureStderr(): { written(): string[] } {
  let chunks: string[] = [];
  beforeEach(() => {
    chunks = [];
    vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => {
      chunks.push(typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8"));
      return true;
    });
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });
  return { written: () => chunks };
}
