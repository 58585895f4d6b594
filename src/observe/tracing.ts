/**
 * The OpenTelemetry SDK of a ledger with telemetry configured (docs/operations.md#tracing).
 * Loaded with `import()` by `startLedger` only then: a ledger without telemetry never loads the
 * SDK, the exporter or the pg instrumentation.
 */
import { createRequire } from "node:module";
import { setTimeout as sleep } from "node:timers/promises";
import { context, diag, DiagLogLevel, propagation, trace, type DiagLogger } from "@opentelemetry/api";
import { NodeSDK } from "@opentelemetry/sdk-node";
import { BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, type SpanProcessor } from "@opentelemetry/sdk-trace";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { PgInstrumentation } from "@opentelemetry/instrumentation-pg";
import type { TelemetryConfig } from "../config/telemetry.js";
import { logger } from "./log.js";
import { setTracingEnabled } from "./spans.js";

/** Extra options of {@link startTracing} (tests). */
export interface TracingOptions {
  /**
   * The span processors instead of the default one (a `BatchSpanProcessor` exporting over
   * OTLP/HTTP), e.g. a `SimpleSpanProcessor` over an `InMemorySpanExporter`.
   */
  spanProcessors?: SpanProcessor[];
}

/** Running tracing; see {@link startTracing}. */
export interface Tracing {
  /** Exports the spans ended so far (waits for the exporter). */
  flush(): Promise<void>;
  /**
   * Flushes (waiting at most 3 s: a collector that does not answer loses the last spans, with a
   * `warn` line), then stops: the SDK's providers shut down, the pg instrumentation is removed and
   * the API's globals (tracer provider, context manager, propagator) are released, so the API is
   * a no-op again and tracing may start anew. Never throws.
   */
  shutdown(): Promise<void>;
}

/**
 * Starts the OpenTelemetry Node SDK for traces only (no metrics, no logs): spans go through
 * `options.spanProcessors`, else a batch processor to the OTLP/HTTP exporter at
 * `config.endpoint` + `/v1/traces` (or where the `OTEL_EXPORTER_OTLP_*` variables say) with
 * `config.headers`; resource `service.name` = `config.serviceName`; sampler: the caller's
 * decision when a `traceparent` came in, else `config.sampleRatio` of the traces; propagator:
 * W3C trace context and baggage; context manager: AsyncLocalStorage. Postgres queries are traced
 * by `@opentelemetry/instrumentation-pg` as children of the ledger's spans (never as root spans).
 *
 * Only one tracing runs per process (the API's globals): a second `startTracing` before the
 * first's `shutdown` throws.
 */
export async function startTracing(config: TelemetryConfig, options: TracingOptions = {}): Promise<Tracing> {
  if (running) throw new Error("tracing is already running in this process");
  const pgInstrumentation = new PgInstrumentation({ requireParentSpan: true, enhancedDatabaseReporting: false });
  const spanProcessors = options.spanProcessors ?? [
    new BatchSpanProcessor({
      exporter: new OTLPTraceExporter({
        ...(config.endpoint ? { url: `${config.endpoint.replace(/\/+$/, "")}/v1/traces` } : {}),
        headers: config.headers,
      }),
    }),
  ];
  const sdk = new NodeSDK({
    serviceName: config.serviceName,
    spanProcessors,
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(config.sampleRatio) }),
    instrumentations: [pgInstrumentation],
    // Traces only: without these the SDK would also export metrics and logs over OTLP.
    metricReaders: [],
    logRecordProcessors: [],
  });
  // The SDK reports failed exports through the API's diagnostics logger: to the log (unless OTEL_LOG_LEVEL asks for the SDK's own).
  const ownDiag = !process.env.OTEL_LOG_LEVEL;
  if (ownDiag) diag.setLogger(diagToLog(), DiagLogLevel.ERROR);
  sdk.start();
  await patchLoadedPg(pgInstrumentation);
  running = true;
  setTracingEnabled(true);
  const flush = async () => {
    await Promise.all(spanProcessors.map((p) => p.forceFlush()));
  };
  let stopped: Promise<void> | undefined;
  return {
    flush,
    shutdown() {
      stopped ??= (async () => {
        setTracingEnabled(false);
        const exported = (async () => {
          await flush();
          await sdk.shutdown();
        })();
        try {
          // An unreachable collector must not hold the exit: the exporter retries for up to 10 s.
          const timedOut = await Promise.race([exported.then(() => false), sleep(SHUTDOWN_EXPORT_MS, true, { ref: false })]);
          if (timedOut) logger.warn("tracing: the last spans were not exported in time; dropped", { timeout_ms: SHUTDOWN_EXPORT_MS });
        } catch (error) {
          logger.warn("tracing: the last spans could not be exported", { error: error instanceof Error ? error.message : String(error) });
        } finally {
          exported.catch(() => undefined);
          pgInstrumentation.disable();
          trace.disable();
          context.disable();
          propagation.disable();
          if (ownDiag) diag.disable();
          running = false;
        }
      })();
      return stopped;
    },
  };
}

/** True between a `startTracing` and its `shutdown`. */
let running = false;

/** How long (ms) `shutdown` waits for the last spans to be exported. */
const SHUTDOWN_EXPORT_MS = 3000;

/** Between two log lines of the SDK's errors (a collector that is down fails every batch), at least this long (ms). */
const DIAG_LOG_INTERVAL_MS = 60_000;

/**
 * The SDK's diagnostics (errors only: failed exports) as `warn` lines of the JSON log,
 * `{"msg":"tracing: <message>"}`, at most one a minute.
 */
function diagToLog(): DiagLogger {
  let last = -Infinity;
  const write = (message: string, ...args: unknown[]) => {
    if (Date.now() - last < DIAG_LOG_INTERVAL_MS) return;
    last = Date.now();
    const detail = args.map((arg) => (arg instanceof Error ? arg.message : typeof arg === "string" ? arg : JSON.stringify(arg)));
    logger.warn(`tracing: ${message}`, detail.length > 0 ? { detail: detail.join(" ") } : undefined);
  };
  return { error: write, warn: write, info: () => {}, debug: () => {}, verbose: () => {} };
}

/**
 * Applies the pg instrumentation to the `pg` the ledger already loaded: src/storage imports it
 * when the process starts (and the bundle imports it as an ES module), so the instrumentation's
 * require hook never sees it. Patches `pg.Client.prototype` (query, connect) and pg-pool's
 * `Pool.prototype` (connect) in place, which every existing and future client and pool shares;
 * `disable()` removes the patches.
 */
async function patchLoadedPg(instrumentation: PgInstrumentation): Promise<void> {
  const pg = (await import("pg")).default as unknown as { Client: unknown; Pool: object };
  const version = (createRequire(import.meta.url)("pg/package.json") as { version: string }).version;
  const exportsOf: Record<string, unknown> = { pg, "pg-pool": Object.getPrototypeOf(pg.Pool) as unknown };
  for (const definition of instrumentation.getModuleDefinitions()) {
    const moduleExports = exportsOf[definition.name];
    if (!moduleExports || !definition.patch) continue;
    definition.patch(moduleExports, version);
    // What `disable()` unpatches.
    definition.moduleExports = moduleExports;
    definition.moduleVersion = version;
  }
}
