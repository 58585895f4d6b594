/**
 * Imported first by bench/run.ts, before any module of src/ is evaluated: the ledgers started by
 * the benchmarks (in process and `ledger serve` children, which inherit the environment) log at
 * `BENCH_LEDGER_LOG_LEVEL` (default warn), so the per-RPC access log does not flood the output.
 */
process.env.LEDGER_LOG_LEVEL = process.env.BENCH_LEDGER_LOG_LEVEL ?? "warn";
