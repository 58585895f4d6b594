/** Reading `GET /metrics`: the Prometheus text format as samples, for tests of the metrics. */
import { expect } from "vitest";

/** One sample of the exposition text: metric name, labels, value. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (`# HELP`/`# TYPE` lines skipped). */
export function parseExposition(body: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of body.split("\n")) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[key!] = value!;
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

/** The value of the one sample of `name` whose labels include `labels` (undefined when none). */
export function sample(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const found = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  expect(found.length, `${name} ${JSON.stringify(labels)} matches ${found.length} samples`).toBeLessThanOrEqual(1);
  return found[0]?.value;
}
