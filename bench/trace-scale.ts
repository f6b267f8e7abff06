// Benchmark: the whole conversation trace of Mooncake through the threaded
// runtime, at small blocks (8 bytes: the runtime's own work, not copy volume).
// `npm run bench:trace-scale`
//
// One replay per capacity, each in its own process so one run's memory does
// not show in the next (unlimited: the tier grows with every new chunk; 3 M
// tokens: the paper's local cache, full after the first few hundred requests,
// so from there memory must not grow), 32 requests in flight, as fast as
// admission allows. Every 1,000 ended requests: the time so far and
// the process's RSS (all threads) and every thread's heap. At the
// end: requests per second, hit ratio, holes, verify(). About 3 minutes on a
// loaded 2-core box.
//
//   --traces DIR   where conversation_trace.jsonl is (default ../shared/data/mooncake)
//   --limit N      replay only the first N requests
//   --publish      also refresh bench/results/trace-scale.json
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { loadHashing } from '../src/hashing.js';
import { replayThreaded, traceRuntimeConfig } from '../src/trace/threaded-replay.js';
import { readTrace } from '../src/trace/trace.js';
import { commitInfo, machineInfo } from './lib/machine.js';
import { LATEST_DIR, publishResults, shownPath } from './lib/results-dir.js';

const CAPACITIES = [0, 3_000_000];
const WINDOW = 32;
const BYTES_PER_BLOCK = 8;

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const mib = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;

type Run = Awaited<ReturnType<typeof runOne>>;

/** One replay at one capacity (the child process's work); its row goes to stdout as JSON. */
async function runOne(file: string, limit: number | undefined, capacityTokens: number) {
  const trace = readTrace(file, limit !== undefined ? { limit } : {});
  const hashing = await loadHashing();
  const config = traceRuntimeConfig(trace, hashing, {
    groups: [{ kind: 'full', tokensPerBlock: 16 }],
    blocksPerChunk: 32,
    bytesPerBlock: BYTES_PER_BLOCK,
    gpuTokens: 611_840,
    capacityTokens,
  });
  const load0 = loadavg()[0] ?? 0;
  const r = await replayThreaded(trace, {
    config,
    window: WINDOW,
    sampleEvery: 1000,
    onProgress: (done, total) => {
      if (done % 2000 === 0) process.stderr.write(`  ${done}/${total}\n`);
    },
  });
  const row = {
    capacityTokens,
    tierChunks: config.tierChunks,
    loadAverage: [Math.round(load0 * 100) / 100, Math.round((loadavg()[0] ?? 0) * 100) / 100],
    requests: r.trace.requests,
    tokenHitRatio: r.trace.tokenHitRatio,
    runSeconds: Math.round(r.runSeconds * 10) / 10,
    requestsPerSecond: Math.round(r.requestsPerSecond * 10) / 10,
    promptTokensPerSecond: Math.round(r.trace.promptTokens / r.runSeconds),
    completed: r.completed,
    holes: r.holes,
    mismatches: r.mismatches,
    verifyOk: r.verifyOk,
    preemptions: r.preemptions,
    leaks: r.leaks,
    samples: r.samples.map((s) => ({
      requests: s.requests,
      seconds: Math.round(s.seconds * 10) / 10,
      rssMiB: mib(s.memory.rssBytes),
      // Each thread's V8 heap in use, as it last sampled it (every 250 ms).
      heapUsedMiB: {
        main: mib(s.memory.main.heapUsedBytes),
        scheduler: mib(s.memory.scheduler?.heapUsedBytes ?? 0),
        hasher: mib(s.memory.hasher?.heapUsedBytes ?? 0),
        allocator: mib(s.memory.allocator?.heapUsedBytes ?? 0),
        store: mib(s.memory.store?.heapUsedBytes ?? 0),
        transfer: s.memory.transfer.map((t) => mib(t.heapUsedBytes)),
      },
    })),
  };
  return row;
}

async function main(): Promise<void> {
  const dir = resolve(arg('--traces') ?? '../shared/data/mooncake');
  const file = join(dir, 'conversation_trace.jsonl');
  const limitArg = arg('--limit');
  const limit = limitArg !== undefined ? Number(limitArg) : undefined;
  const one = arg('--one');
  if (one !== undefined) {
    process.stdout.write(`${JSON.stringify(await runOne(file, limit, Number(one)))}\n`);
    return;
  }
  const run = promisify(execFile);
  const runs: Run[] = [];
  for (const capacityTokens of CAPACITIES) {
    const args = [
      '--import',
      'tsx',
      'bench/trace-scale.ts',
      '--traces',
      dir,
      '--one',
      String(capacityTokens),
    ];
    if (limitArg !== undefined) args.push('--limit', limitArg);
    const { stdout } = await run(process.execPath, args, {
      maxBuffer: 16 << 20,
      timeout: 1_800_000,
    });
    const row = JSON.parse(stdout.trim().split('\n').pop()!) as Run;
    runs.push(row);
    process.stdout.write(
      `capacity ${capacityTokens === 0 ? 'unlimited' : capacityTokens}: ${row.requests} requests in ${row.runSeconds} s ` +
        `(${row.requestsPerSecond}/s), hit ratio ${(row.tokenHitRatio * 100).toFixed(2)}%, holes ${row.holes}, verify ${row.verifyOk}\n`,
    );
    process.stdout.write(
      '| requests | seconds | RSS MiB | heap MiB: main | scheduler | hasher | allocator | store | transfer |\n' +
        '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n',
    );
    for (const s of row.samples) {
      const h = s.heapUsedMiB;
      process.stdout.write(
        `| ${s.requests} | ${s.seconds} | ${s.rssMiB} | ${h.main} | ${h.scheduler} | ${h.hasher} | ${h.allocator} | ${h.store} | ${h.transfer.join(', ')} |\n`,
      );
    }
  }
  const git = commitInfo();
  const results = {
    schema: 'kvoff-bench-trace-scale/1',
    at: new Date().toISOString(),
    ...git,
    machine: machineInfo(),
    source: 'conversation_trace.jsonl',
    window: WINDOW,
    bytesPerBlock: BYTES_PER_BLOCK,
    note: "RSS covers every thread of the process; heapUsedMiB is each thread's own V8 heap (runtime.stats().memory).",
    runs,
  };
  mkdirSync(LATEST_DIR, { recursive: true });
  const out = join(LATEST_DIR, 'trace-scale.json');
  writeFileSync(out, `${JSON.stringify(results, null, 2)}\n`);
  process.stdout.write(`wrote ${shownPath(out)}\n`);
  if (process.argv.includes('--publish') && limitArg === undefined) {
    process.stdout.write(`published ${shownPath(publishResults(out))}\n`);
  }
}

await main();
