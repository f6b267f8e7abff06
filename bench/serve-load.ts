// `npm run bench:serve`: a bounded load test of `kvoff serve` on loopback.
// 64 connections (--connections) POST simulated requests for a fixed time
// (--duration seconds); then the server's own counters are read and it is
// stopped with SIGTERM. Prints a table and writes bench/results/latest/serve-load.json
// (ignored by git; KVOFF_BENCH_PUBLISH=1 also copies it to bench/results/).
// Fails (exit 1) on any HTTP error, any hole or mismatch, or an unclean exit.
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { defaultBodies, runServeLoad, startServeChild, stopServeChild } from './serve-load-lib.js';
import type { LoadResult } from './serve-load-lib.js';
import { LATEST_DIR, publishRequested, publishResults, shownPath } from './lib/results-dir.js';

const { values } = parseArgs({
  options: {
    connections: { type: 'string', default: '64' },
    duration: { type: 'string', default: '10' },
    'transfer-threads': { type: 'string', default: '1' },
  },
});
const connections = Number(values.connections);
const durationS = Number(values.duration);
if (!Number.isInteger(connections) || connections < 1 || connections > 1024) {
  throw new Error('--connections must be an integer in [1, 1024]');
}
if (!Number.isInteger(durationS) || durationS < 1 || durationS > 300) {
  throw new Error('--duration must be an integer number of seconds in [1, 300]');
}

const server = await startServeChild(['--transfer-threads', values['transfer-threads']]);
let load: Omit<LoadResult, 'exitCode'>;
try {
  load = await runServeLoad(server, { connections, durationS, bodies: defaultBodies() });
} catch (err) {
  server.child.kill('SIGKILL');
  throw err;
}
const exitCode = await stopServeChild(server);
const result: LoadResult = { ...load, exitCode };

const rows: Array<[string, string]> = [
  ['connections', String(result.connections)],
  ['duration', `${result.durationS} s`],
  ['requests', String(result.requests)],
  ['requests/s', result.requestsPerSecond.toFixed(1)],
  [
    'latency p50 / p99 / max',
    `${result.latencyMsP50} / ${result.latencyMsP99} / ${result.latencyMsMax} ms`,
  ],
  ['errors / timeouts / non-2xx', `${result.errors} / ${result.timeouts} / ${result.non2xx}`],
  ['chunks stored / deferred', `${result.chunksStored} / ${result.chunksDeferred}`],
  ['holes / mismatches', `${result.holes} / ${result.mismatches}`],
  [
    'event-loop delay p99 / max',
    `${result.eventLoopDelayMsP99} / ${result.eventLoopDelayMsMax} ms`,
  ],
  ['exit code after SIGTERM', String(result.exitCode)],
];
const width = Math.max(...rows.map(([l]) => l.length));
process.stdout.write(`kvoff serve load test (loopback)\n`);
for (const [l, v] of rows) process.stdout.write(`  ${l.padEnd(width)}  ${v}\n`);

mkdirSync(LATEST_DIR, { recursive: true });
const file = path.join(LATEST_DIR, 'serve-load.json');
writeFileSync(
  file,
  `${JSON.stringify(
    {
      bench: 'serve-load',
      date: new Date().toISOString(),
      node: process.version,
      cores: os.availableParallelism(),
      cpuModel: os.cpus()[0]?.model.trim() ?? 'unknown',
      ...result,
    },
    null,
    2,
  )}\n`,
);
process.stdout.write(`  wrote ${shownPath(file)}\n`);
if (publishRequested()) process.stdout.write(`  published ${shownPath(publishResults(file))}\n`);

const ok =
  result.errors === 0 &&
  result.timeouts === 0 &&
  result.non2xx === 0 &&
  result.holes === 0 &&
  result.mismatches === 0 &&
  result.exitCode === 0;
if (!ok) {
  process.stderr.write('serve load test FAILED: errors, holes, mismatches or unclean exit\n');
  process.exitCode = 1;
}
