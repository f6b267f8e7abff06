// Benchmark: the levels below host memory. `npm run bench:tiers [-- --quick]`
//
// 1. Per level (disk, Redis Cluster), per chunk size (64 KiB to 4 MiB): chunks/s
//    and MB/s stored (offer to visible, a bounded window in flight so nothing is
//    dropped) and loaded (GET / read plus the header check), median over
//    repeats, and the store-to-visible latency p50/p99 of every chunk.
// 2. The default overflow scenario (`kvoff simulate`'s shape) host only, with
//    the disk tier, and with the Redis tier: each lower level runs twice on the
//    same directory / cluster (cold, then warm with hits), wall time as a ratio
//    to host only (the mean of a host-only run before and one after them, so a
//    load change on a shared machine shows as a gap between the two), with the
//    stores each level dropped.
//
// Bounded: 32 MiB per measurement (8 MiB with --quick), about 3 minutes on a
// loaded 2-core box. The Redis cluster comes from scripts/redis-cluster.sh on a
// random port range (taken down at the end), or from KVOFF_REDIS_URL when set.
// JSON goes to bench/results/latest/tiers.json (ignored by git);
// KVOFF_BENCH_PUBLISH=1 (full runs only) also refreshes bench/results/tiers.json.
import { execFile } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { runSimulate } from '../src/commands/simulate.js';
import { parseSimulateOptions } from '../src/commands/simulate-options.js';
import type { SimulateRawOptions } from '../src/commands/simulate-options.js';
import { DiskTier } from '../src/tier/disk-tier.js';
import type { LowerTier } from '../src/tier/lower.js';
import { RedisTier } from '../src/tier/redis-tier.js';
import { commitInfo, machineInfo } from './lib/machine.js';
import { LATEST_DIR, publishRequested, publishResults, shownPath } from './lib/results-dir.js';
import type { Figure } from './lib/stats.js';
import { figure, quantile, sortedCopy } from './lib/stats.js';

const run = promisify(execFile);
const KIB = 1024;
const MIB = 1024 * KIB;
const QUICK = process.argv.includes('--quick');
const CHUNK_BYTES = [64 * KIB, 256 * KIB, MIB, 4 * MIB];
/** Bytes moved per measurement and level. */
const BYTES_PER_RUN = QUICK ? 8 * MIB : 32 * MIB;
const REPEATS = QUICK ? 2 : 3;
/** Stores in flight while measuring throughput (below every level's drop bound). */
const WINDOW = 8;
const FP = 0x7469657273n; // "tiers"
/** Entries are authenticated, as a deployment runs them (the scenarios read it from the environment). */
const BENCH_SECRET = 'kvoff-bench-tiers-secret-0123456789';
process.env.KVOFF_TIER_SECRET ??= BENCH_SECRET;

interface LevelRow {
  level: 'disk' | 'redis';
  chunkKiB: number;
  chunks: number;
  storeChunksPerSecond: Figure;
  storeMBPerSecond: Figure;
  loadChunksPerSecond: Figure;
  loadMBPerSecond: Figure;
  storeToVisibleMsP50: number;
  storeToVisibleMsP99: number;
  dropped: number;
  errors: number;
}

interface ScenarioRow {
  tiers: string;
  pass: 'cold' | 'warm' | 'before' | 'after';
  wallSeconds: number;
  ratioToHostOnly: number;
  tierHits: number;
  lowerHitChunks: number;
  /** Stores offered to the lower level (stored + dropped) and how many were dropped. */
  lowerOfferedChunks: number;
  lowerDroppedChunks: number;
  lowerErrors: number;
  mismatches: number;
  loadAverage1m: number;
}

async function waitIdle(tier: LowerTier): Promise<void> {
  const deadline = performance.now() + 120_000;
  while (tier.storesInFlight > 0 && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 1));
  }
}

async function measureLevel(
  open: (payloadBytes: number, fingerprint: bigint) => Promise<LowerTier>,
  level: 'disk' | 'redis',
  chunkBytes: number,
  salt: bigint,
): Promise<LevelRow> {
  const chunks = Math.max(8, Math.min(1024, Math.floor(BYTES_PER_RUN / chunkBytes)));
  const payload = Buffer.alloc(chunkBytes, 0x5a);
  const storeRates: number[] = [];
  const loadRates: number[] = [];
  const latencies: number[] = [];
  let dropped = 0;
  let errors = 0;
  for (let r = 0; r < REPEATS; r += 1) {
    const fp = FP ^ (salt << 16n) ^ BigInt(r);
    const tier = await open(chunkBytes, fp);
    // Sealed as the level checks them: with the deployment secret's tag (the production path).
    const values = Array.from({ length: chunks }, (_, i) => tier.seal(BigInt(i + 1), payload));
    const t0 = performance.now();
    for (let i = 0; i < chunks; i += 1) {
      while (tier.storesInFlight >= WINDOW) await new Promise((res) => setImmediate(res));
      tier.store(BigInt(i + 1), values[i]!);
    }
    await waitIdle(tier);
    const storeS = (performance.now() - t0) / 1000;
    for (const s of tier.takeSamples()) latencies.push(s.latencyMs);
    const t1 = performance.now();
    let next = 0;
    let loaded = 0;
    await Promise.all(
      Array.from({ length: WINDOW }, async () => {
        while (next < chunks) {
          const k = BigInt(++next);
          if ((await tier.load(k)) !== undefined) loaded += 1;
        }
      }),
    );
    const loadS = (performance.now() - t1) / 1000;
    const c = tier.counters;
    dropped += c.droppedChunks;
    errors += c.errors;
    storeRates.push(c.storedChunks / storeS);
    loadRates.push(loaded / loadS);
    await tier.close(10_000);
  }
  const sorted = sortedCopy(latencies);
  const mb = chunkBytes / 1e6;
  return {
    level,
    chunkKiB: chunkBytes / KIB,
    chunks,
    storeChunksPerSecond: figure(storeRates, 'chunks/s'),
    storeMBPerSecond: figure(
      storeRates.map((x) => x * mb),
      'MB/s',
    ),
    loadChunksPerSecond: figure(loadRates, 'chunks/s'),
    loadMBPerSecond: figure(
      loadRates.map((x) => x * mb),
      'MB/s',
    ),
    storeToVisibleMsP50: round(quantile(sorted, 0.5)),
    storeToVisibleMsP99: round(quantile(sorted, 0.99)),
    dropped,
    errors,
  };
}

async function scenario(
  raw: SimulateRawOptions,
  label: string,
  pass: ScenarioRow['pass'],
): Promise<ScenarioRow> {
  const base: SimulateRawOptions = QUICK ? { requests: '8', promptTokens: '20000' } : {};
  const loadAverage1m = round(loadavg()[0] ?? 0);
  const r = await runSimulate(parseSimulateOptions({ ...base, ...raw, json: true }));
  const { disk, redis } = r.tiers;
  return {
    tiers: label,
    pass,
    wallSeconds: r.wallSeconds,
    ratioToHostOnly: 1,
    tierHits: r.tierHits,
    lowerHitChunks: disk.hitChunks + redis.hitChunks,
    lowerOfferedChunks:
      disk.storedChunks + disk.droppedChunks + redis.storedChunks + redis.droppedChunks,
    lowerDroppedChunks: disk.droppedChunks + redis.droppedChunks,
    lowerErrors: disk.errors + redis.errors,
    mismatches: r.mismatches,
    loadAverage1m,
  };
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

async function main(): Promise<void> {
  const script = fileURLToPath(new URL('../scripts/redis-cluster.sh', import.meta.url));
  const workDir = mkdtempSync(join(tmpdir(), 'kvoff-bench-tiers-'));
  const env = {
    ...process.env,
    // Client ports 11000-15995, bus ports (+10000) 21000-25995: disjoint, and
    // below Linux's ephemeral range, where outgoing connections take ports.
    KVOFF_REDIS_PORT: String(11_000 + 10 * Math.floor(Math.random() * 500)),
    KVOFF_REDIS_DIR: join(workDir, 'redis'),
    KVOFF_REDIS_TTL_S: '3600',
  };
  let url = process.env.KVOFF_REDIS_URL;
  const own = url === undefined;
  if (own) {
    const { stdout } = await run('bash', [script, 'up'], { env, timeout: 300_000 });
    url = stdout.trim().split('\n').at(-1)!;
  }
  const log = (s: string) => process.stderr.write(`${s}\n`);
  const machine = machineInfo();
  const git = commitInfo();
  const t0 = performance.now();
  try {
    const levels: LevelRow[] = [];
    let salt = 1n;
    for (const chunkBytes of CHUNK_BYTES) {
      const diskDir = join(workDir, `disk-${chunkBytes}`);
      levels.push(
        await measureLevel(
          (payloadBytes, scope) =>
            DiskTier.open({
              dir: diskDir,
              bytesMax: 4 * BYTES_PER_RUN,
              payloadBytes,
              scope,
              freeBytesMin: 0,
              secret: BENCH_SECRET,
            }),
          'disk',
          chunkBytes,
          (salt += 1n),
        ),
      );
      log(`disk ${chunkBytes / KIB} KiB done`);
      levels.push(
        await measureLevel(
          (payloadBytes, scope) =>
            RedisTier.open({ urls: [url!], payloadBytes, scope, secret: BENCH_SECRET }),
          'redis',
          chunkBytes,
          (salt += 1n),
        ),
      );
      log(`redis ${chunkBytes / KIB} KiB done`);
    }
    // The overflow scenario: host only, each lower level cold and warm, host only again.
    const scenarios: ScenarioRow[] = [];
    scenarios.push(await scenario({}, 'host', 'before'));
    const disk = join(workDir, 'scenario-disk');
    scenarios.push(await scenario({ disk }, 'host+disk', 'cold'));
    scenarios.push(await scenario({ disk }, 'host+disk', 'warm'));
    // The per-level runs used other fingerprints, so the cold Redis pass finds nothing of theirs.
    scenarios.push(await scenario({ redis: url!, seed: '8' }, 'host+redis', 'cold'));
    scenarios.push(await scenario({ redis: url!, seed: '8' }, 'host+redis', 'warm'));
    scenarios.push(await scenario({}, 'host', 'after'));
    const hostOnlyS = (scenarios[0]!.wallSeconds + scenarios.at(-1)!.wallSeconds) / 2;
    for (const s of scenarios) s.ratioToHostOnly = round(s.wallSeconds / hostOnlyS);
    log('overflow scenario done');
    const results = {
      description:
        'Tiers below host memory: per level and chunk size, store (offer to visible) and load (with the header check) rates, median over repeats; store-to-visible latency over every chunk; the default overflow scenario host only vs with disk and Redis (cold, then warm).',
      mode: QUICK ? 'quick' : 'full',
      at: new Date().toISOString(),
      ...git,
      machine,
      loadAverageAtEnd: loadavg().map(round),
      benchSeconds: round((performance.now() - t0) / 1000),
      bytesPerMeasurement: BYTES_PER_RUN,
      repeats: REPEATS,
      windowInFlight: WINDOW,
      levels,
      scenarios,
    };
    const file = join(LATEST_DIR, QUICK ? 'tiers-quick.json' : 'tiers.json');
    mkdirSync(LATEST_DIR, { recursive: true });
    writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
    printTables(levels, scenarios);
    process.stdout.write(`wrote ${shownPath(file)}\n`);
    // A quick run is too small to stand for the committed table.
    if (publishRequested() && !QUICK) {
      process.stdout.write(`published ${shownPath(publishResults(file))}\n`);
    }
  } finally {
    if (own) await run('bash', [script, 'down'], { env }).catch(() => undefined);
    rmSync(workDir, { recursive: true, force: true });
  }
}

function printTables(levels: LevelRow[], scenarios: ScenarioRow[]): void {
  const lines = [
    '| level | chunk | stored chunks/s | stored MB/s | loaded chunks/s | loaded MB/s | store→visible p50 / p99 ms | dropped | errors |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const r of levels) {
    lines.push(
      `| ${r.level} | ${r.chunkKiB} KiB | ${r.storeChunksPerSecond.median.toFixed(0)} | ${r.storeMBPerSecond.median.toFixed(0)} | ${r.loadChunksPerSecond.median.toFixed(0)} | ${r.loadMBPerSecond.median.toFixed(0)} | ${r.storeToVisibleMsP50} / ${r.storeToVisibleMsP99} | ${r.dropped} | ${r.errors} |`,
    );
  }
  lines.push(
    '',
    '| tiers | pass | load 1m | wall s | ratio to host only | tier hits | lower-level hits | lower stores dropped / offered | mismatches |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  );
  for (const s of scenarios) {
    lines.push(
      `| ${s.tiers} | ${s.pass} | ${s.loadAverage1m.toFixed(1)} | ${s.wallSeconds.toFixed(1)} | ${s.ratioToHostOnly.toFixed(2)} | ${s.tierHits} | ${s.lowerHitChunks} | ${s.lowerDroppedChunks} / ${s.lowerOfferedChunks} | ${s.mismatches} |`,
    );
  }
  process.stdout.write(`${lines.join('\n')}\n`);
}

await main();
