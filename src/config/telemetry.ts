import { z } from "zod";

/** The service name traces carry (`service.name`) unless `telemetry.service_name` or `OTEL_SERVICE_NAME` says otherwise. */
export const DEFAULT_SERVICE_NAME = "session-ledger";

/** `telemetry` in ledger.json (docs/configuration.md#telemetry). */
export const telemetrySchema = z
  .object({
    enabled: z.boolean().optional(),
    endpoint: z.url({ protocol: /^https?$/, error: "expected an http(s) URL of an OTLP/HTTP collector" }).optional(),
    service_name: z.string().min(1).optional(),
    headers: z.record(z.string(), z.string()).default({}),
    sample_ratio: z.number().min(0).max(1).default(1),
    record_content: z.boolean().default(false),
  })
  .default({ headers: {}, sample_ratio: 1, record_content: false });

/** `telemetry` as parsed from ledger.json. */
export type TelemetryFile = z.infer<typeof telemetrySchema>;

/**
 * OpenTelemetry traces (docs/operations.md#tracing): off unless `telemetry.enabled` is true, or
 * an endpoint is configured (`telemetry.endpoint`, `OTEL_EXPORTER_OTLP_ENDPOINT` or
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) and `telemetry.enabled` is not false;
 * `OTEL_SDK_DISABLED=true` turns them off whatever the file says.
 */
export interface TelemetryConfig {
  /** Whether `startLedger` starts tracing (resolved as above). */
  enabled: boolean;
  /**
   * The OTLP/HTTP collector's base URL (`/v1/traces` is appended), e.g. `http://127.0.0.1:4318`;
   * undefined: the exporter's own default, which reads the `OTEL_EXPORTER_OTLP_*` variables
   * (`http://localhost:4318/v1/traces` without them).
   */
  endpoint?: string;
  /** `service.name` of every span; default `OTEL_SERVICE_NAME`, else "session-ledger". */
  serviceName: string;
  /** Extra headers of the export requests (e.g. an API key of the collector). */
  headers: Record<string, string>;
  /** The share of new traces (no sampled parent) that are recorded, 0..1; a caller's sampled `traceparent` is followed. */
  sampleRatio: number;
  /** Whether the AI SDK's spans carry the prompts and answers (`ai.prompt`, `ai.response.text`...); default false. */
  recordContent: boolean;
}

/** The resolved telemetry settings of a parsed `telemetry` entry and the environment (see {@link TelemetryConfig}). */
export function telemetryConfig(file: TelemetryFile, env: NodeJS.ProcessEnv = {}): TelemetryConfig {
  const envEndpoint = Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
  const disabled = env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true";
  return {
    enabled: !disabled && (file.enabled ?? (file.endpoint !== undefined || envEndpoint)),
    endpoint: file.endpoint,
    serviceName: file.service_name ?? (env.OTEL_SERVICE_NAME || DEFAULT_SERVICE_NAME),
    headers: file.headers,
    sampleRatio: file.sample_ratio,
    recordContent: file.record_content,
  };
}
