import { execFile } from "node:child_process";

/**
 * The pids of the processes whose command line holds `marker` (`pgrep -f`), this test process
 * left out: to see that a command a test started (a shell command, a tool's process group) is
 * running, or that none of it is left.
 */
export function pgrep(marker: string): Promise<string[]> {
  return new Promise((resolve) =>
    execFile("pgrep", ["-f", marker], (_error, stdout) => resolve(stdout.split("\n").filter((l) => l.trim() && Number(l) !== process.pid))),
  );
}
