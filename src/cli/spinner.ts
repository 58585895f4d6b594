import type { CliOutput } from "./io.js";

/** A one-line progress indicator on a terminal stream; see {@link createSpinner}. */
export interface Spinner {
  /** Shows `label` (or hides the spinner with `undefined`); the elapsed time restarts on a new label. */
  set(label: string | undefined): void;
  /** Erases the spinner line if it is drawn, so other output can be written; it comes back on the next tick. */
  clear(): void;
  /** Erases the line and stops for good. */
  stop(): void;
}

const FRAMES = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const TICK_MS = 80;

/**
 * A braille spinner with a label and elapsed seconds, redrawn in place on `stream` every 80 ms
 * while `canDraw()` says the cursor may be used (e.g. stdout is at the start of a line). When
 * `stream` is not a TTY it does nothing at all, so pipes and logs stay clean.
 */
export function createSpinner(stream: CliOutput, canDraw: () => boolean = () => true): Spinner {
  if (!stream.isTTY) return { set() {}, clear() {}, stop() {} };
  let label: string | undefined;
  let since = Date.now();
  let frame = 0;
  let drawn = false;
  const clear = () => {
    if (drawn) stream.write("\r\x1b[K");
    drawn = false;
  };
  const draw = () => {
    if (!label || !canDraw()) return clear();
    const seconds = Math.floor((Date.now() - since) / 1000);
    const text = `${FRAMES[frame++ % FRAMES.length]} ${label}${seconds > 0 ? ` ${seconds}s` : ""}`;
    const width = stream.columns !== undefined && stream.columns > 1 ? stream.columns - 1 : 79;
    stream.write(`\r\x1b[K\x1b[2m${text.slice(0, width)}\x1b[0m`);
    drawn = true;
  };
  const timer = setInterval(draw, TICK_MS);
  timer.unref();
  return {
    set(next) {
      if (next !== label) since = Date.now();
      label = next;
      if (!label) clear();
    },
    clear,
    stop() {
      clearInterval(timer);
      label = undefined;
      clear();
    },
  };
}
