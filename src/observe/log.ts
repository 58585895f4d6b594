import { activeTraceIds } from "./spans.js";

/** Severity of a log line, lowest first. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** Extra fields of a log line (anything JSON can show; errors, bigints and URLs are converted). */
export type LogFields = Record<string, unknown>;

/** A structured logger: each call writes one JSON object on one line. */
export interface Logger {
  readonly level: LogLevel;
  /** Changes the level from now on (tests, or an operator's switch). */
  setLevel(level: LogLevel): void;
  /** True when a line of `level` would be written (skip building costly fields otherwise). */
  enabled(level: LogLevel): boolean;
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
}

const LEVELS: Readonly<Record<LogLevel, number>> = { debug: 10, info: 20, warn: 30, error: 40 };

/** Field names every line sets itself; a field with one of these names is written as `field_<name>` (`trace_id` and `span_id` are not reserved). */
const RESERVED = new Set(["time", "level", "msg"]);

/** Reads `LEDGER_LOG_LEVEL` (debug|info|warn|error, case-insensitive); anything else → info. */
export function levelFromEnv(env: NodeJS.ProcessEnv = process.env): LogLevel {
  const value = env.LEDGER_LOG_LEVEL?.trim().toLowerCase();
  return value && value in LEVELS ? (value as LogLevel) : "info";
}

/**
 * A logger writing `{"time":ISO-8601,"level":…,"msg":…,…fields}` lines. Lines below `level` are
 * dropped. `write` defaults to `process.stderr.write` (looked up at each call, so tests may
 * replace it). Never throws: a field that cannot be serialized is written as a string.
 */
export function createLogger(options: { level?: LogLevel; write?: (line: string) => void } = {}): Logger {
  let level = options.level ?? levelFromEnv();
  let threshold = LEVELS[level];
  const write = options.write ?? ((line: string) => void process.stderr.write(line));
  const emit = (lineLevel: LogLevel, msg: string, fields?: LogFields) => {
    if (LEVELS[lineLevel] < threshold) return;
    write(`${formatLine(lineLevel, msg, fields)}\n`);
  };
  return {
    get level() {
      return level;
    },
    setLevel(next) {
      level = next;
      threshold = LEVELS[next];
    },
    enabled: (l) => LEVELS[l] >= threshold,
    debug: (msg, fields) => emit("debug", msg, fields),
    info: (msg, fields) => emit("info", msg, fields),
    warn: (msg, fields) => emit("warn", msg, fields),
    error: (msg, fields) => emit("error", msg, fields),
  };
}

/** The process-wide logger (level from `LEDGER_LOG_LEVEL` when this module is first loaded). */
export const logger: Logger = createLogger();

/**
 * One log line (without the newline). Exported for tests. Written inside a span while tracing
 * runs (docs/operations.md#tracing), it carries the span's `trace_id` and `span_id` after `msg`
 * (fields of those names replace them).
 */
export function formatLine(level: LogLevel, msg: string, fields?: LogFields): string {
  const line: Record<string, unknown> = { time: new Date().toISOString(), level, msg, ...activeTraceIds() };
  if (fields) {
    for (const [key, value] of Object.entries(fields)) {
      if (value === undefined) continue;
      line[RESERVED.has(key) ? `field_${key}` : key] = value;
    }
  }
  try {
    return JSON.stringify(line, replacer);
  } catch {
    // A cycle or a throwing toJSON: keep the line, show the fields as strings.
    const safe: Record<string, string> = {};
    for (const [key, value] of Object.entries(line)) safe[key] = typeof value === "string" ? value : String(value);
    return JSON.stringify(safe);
  }
}

function replacer(_key: string, value: unknown): unknown {
  if (typeof value === "bigint") return value.toString();
  if (value instanceof Error) {
    const out: Record<string, unknown> = { name: value.name, message: value.message };
    if (value.stack) out.stack = value.stack;
    if ("code" in value && value.code !== undefined) out.code = value.code;
    if (value.cause !== undefined) out.cause = value.cause;
    return out;
  }
  return value;
}
