// npm run soak -- --seconds N [--json] [--disk DIR] [--redis URL]
//
// One runtime for N seconds through slot reuse, aborts, preemptions, shared
// prefixes and tier eviction; prints lifecycles per second and, per worker,
// how its memory moved after warm-up. Exits 1 when a worker's live heap (what
// a full collection leaves) grew past its bound, resident memory kept
// growing, verify() failed or close() left something over; 2 on bad usage or
// without --expose-gc (npm run soak passes it). See docs/benchmarks.md ("Soak").
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { LATEST_DIR, shownPath } from './lib/results-dir.js';
import { mkdirSync } from 'node:fs';
import { runSoak, SOAK_COLLECT_EVERY_S } from './lib/soak.js';
import type { SoakReport } from './lib/soak.js';

function positive(name: string) {
  return (v: string): number => {
    const n = Number(v);
    if (!/^\d+(\.\d+)?$/.test(v) || !(n > 0)) {
      throw new InvalidArgumentError(`${name} must be a positive number`);
    }
    return n;
  };
}

const program = new Command('soak')
  .description('run one runtime for a long time and check that no worker leaks memory')
  .addOption(
    new Option('--seconds <n>', 'how long to run').default(600).argParser(positive('--seconds')),
  )
  .addOption(
    new Option(
      '--warmup <s>',
      'seconds before the memory baseline (default min(60, seconds / 3))',
    ).argParser(positive('--warmup')),
  )
  .addOption(
    new Option(
      '--heap-growth-max <ratio>',
      "largest growth of a worker's live heap (after a full collection) after warm-up",
    )
      .default(0.1)
      .argParser(positive('--heap-growth-max')),
  )
  .addOption(
    new Option('--rss-mb-per-minute-max <mb>', 'largest growth of resident memory after warm-up')
      .default(1)
      .argParser(positive('--rss-mb-per-minute-max')),
  )
  .option('--disk <dir>', 'add a disk tier in this directory')
  .option('--redis <url>', 'add a Redis Cluster tier (a seed node, redis://host:port)')
  .option('--seed <n>', 'workload seed', '1')
  .option('--json', 'print the report as one JSON object')
  .addHelpText(
    'after',
    `
Every ${SOAK_COLLECT_EVERY_S} s the soak runs a full garbage collection on main and in every
worker (runtime.collectMemory()) and judges each one's heap on what is left:
heap in use at an arbitrary moment also counts garbage not yet collected,
which drifts with V8's heap sizing. That needs node's --expose-gc, which
npm run soak passes.`,
  )
  .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : 2));

program.parse();
if (typeof (globalThis as { gc?: unknown }).gc !== 'function') {
  process.stderr.write(
    'soak: the heap is judged after full collections, which needs node --expose-gc (npm run soak passes it)\n',
  );
  process.exit(2);
}
const opts = program.opts<{
  seconds: number;
  warmup?: number;
  heapGrowthMax: number;
  rssMbPerMinuteMax: number;
  disk?: string;
  redis?: string;
  seed: string;
  json?: boolean;
}>();

const report = await runSoak({
  seconds: opts.seconds,
  ...(opts.warmup !== undefined ? { warmupSeconds: opts.warmup } : {}),
  heapGrowthMax: opts.heapGrowthMax,
  rssMbPerMinuteMax: opts.rssMbPerMinuteMax,
  seed: Number(opts.seed) | 0,
  ...(opts.disk !== undefined ? { disk: opts.disk } : {}),
  ...(opts.redis !== undefined ? { redis: opts.redis } : {}),
  onTick: (done, s) => {
    if (!opts.json && process.stderr.isTTY && Math.floor(s) % 10 === 0) {
      process.stderr.write(`\r${Math.floor(s)} s: ${done.toLocaleString('en')} lifecycles`);
    }
  },
});
mkdirSync(LATEST_DIR, { recursive: true });
const file = path.join(LATEST_DIR, 'soak.json');
writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
if (opts.json) {
  const { points, ...rest } = report;
  process.stdout.write(`${JSON.stringify({ ...rest, samples: points.length })}\n`);
} else {
  process.stdout.write(`${format(report)}\nfull report: ${shownPath(file)}\n`);
}
process.exitCode = report.ok ? 0 : 1;

function format(r: SoakReport): string {
  const mb = (b: number) => (b / (1024 * 1024)).toFixed(1);
  const lines = [
    '',
    `${r.lifecycles.toLocaleString('en')} lifecycles in ${r.seconds} s: ${r.lifecyclesPerSecond.toLocaleString('en')} per second ` +
      `(${r.completed} completed, ${r.aborted} aborted, ${r.preemptions} preemptions, ${r.tierHits} tier hits, ${r.tierEvictions} evictions)`,
    `memory after ${r.warmupSeconds} s of warm-up (each worker's live heap, after a full collection, lowest per sixth of the rest):`,
  ];
  const rows = r.workers.map((w) => ({
    worker: w.worker,
    'live heap MB at baseline': mb(w.heapBaselineBytes),
    'max / baseline': w.heapRatioMax.toFixed(3),
    'live heap MB/min': mb(w.heapSlopeBytesPerMinute),
    'in-use floor MB/min (not judged)': mb(w.heapUsedFloorSlopeBytesPerMinute),
    'external MB/min': mb(w.externalSlopeBytesPerMinute),
    ok: w.ok ? 'yes' : 'NO',
  }));
  lines.push(table(rows));
  lines.push(
    `resident memory: ${mb(r.rssBaselineBytes)} MB at baseline, ${mb(r.rssSlopeBytesPerMinute)} MB/min after (${r.rssOk ? 'ok' : 'TOO MUCH'})`,
    `verify: ${r.verifyOk ? 'ok' : 'FAILED'} (holes ${r.holes}, mismatches ${r.mismatches}); leaks after close: ${r.leaksOk ? 'none' : JSON.stringify(r.leaks)}`,
    r.ok ? 'ok' : `FAILED:\n  ${r.failures.join('\n  ')}`,
  );
  return lines.join('\n');
}

function table(rows: Record<string, string>[]): string {
  if (rows.length === 0) return '';
  const keys = Object.keys(rows[0]!);
  const width = keys.map((k) => Math.max(k.length, ...rows.map((r) => r[k]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(width[i]!)).join('  ');
  return [line(keys), ...rows.map((r) => line(keys.map((k) => r[k]!)))].join('\n');
}
