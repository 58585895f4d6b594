import type { IncomingHttpHeaders } from "node:http";
import { cors } from "@connectrpc/connect";

const LOOPBACK_ORIGIN = /^https?:\/\/(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$/;

/** Response headers for CORS, or undefined when the origin is not allowed (or absent). */
export function corsHeaders(headers: IncomingHttpHeaders, allowedOrigins: string[]): Record<string, string> | undefined {
  const origin = headers.origin;
  if (!origin) return undefined;
  const allowed = LOOPBACK_ORIGIN.test(origin) || allowedOrigins.includes("*") || allowedOrigins.includes(origin);
  if (!allowed) return undefined;
  return {
    "access-control-allow-origin": origin,
    vary: "Origin",
    "access-control-allow-methods": cors.allowedMethods.join(", "),
    "access-control-allow-headers": [...cors.allowedHeaders, "Authorization", "X-Request-Id"].join(", "),
    "access-control-expose-headers": [...cors.exposedHeaders, "X-Request-Id"].join(", "),
    "access-control-max-age": "7200",
  };
}
