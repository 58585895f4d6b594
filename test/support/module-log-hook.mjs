// Resolve hook registered by module-log.mjs (runs on Node's loader thread).
import { appendFileSync } from "node:fs";

const file = process.env.LEDGER_MODULE_LOG;
const seen = new Set();

export async function resolve(specifier, context, next) {
  const result = await next(specifier, context);
  if (file && !seen.has(result.url)) {
    seen.add(result.url);
    appendFileSync(file, `${result.url}\n`);
  }
  return result;
}
