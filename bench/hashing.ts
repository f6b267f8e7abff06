// Benchmark 6: the hasher thread's cost per token. One HasherRole over real
// shared memory hashes a whole prompt (block digests, keys of every group,
// their checks, the counts published), as the hasher worker does, for SHA-256
// (the default) and xxHash64 (the single-process opt-in), at the default
// geometry (the hybrid model: two groups, 16-token hash blocks, 4 blocks a
// chunk) and at 16- and 256-token blocks (one group, one block a chunk: a key
// per block, the most key work per token). Figures are CPU ns per token of the
// hash() calls only (opening and releasing the request is outside the timing).
import { performance } from 'node:perf_hooks';
import { resolveConfig } from '../src/config.js';
import type { ConfigInput } from '../src/config.js';
import { loadHashing } from '../src/hashing.js';
import type { KeyHash } from '../src/identity.js';
import { HasherRole } from '../src/roles/hasher.js';
import { SchedulerRole } from '../src/roles/scheduler.js';
import { DEFAULT_RUNTIME_CONFIG } from '../src/runtime/defaults.js';
import { SharedState } from '../src/state.js';
import type { Figure } from './lib/stats.js';
import { figure, ratioFigure } from './lib/stats.js';

export interface HashingOptions {
  /** Tokens hashed per timed run (one prompt). */
  readonly tokens: number;
  /** Timed runs per (geometry, hash); the figure is their median. */
  readonly repeats: number;
}

export const HASHING_GEOMETRIES = ['default', '16-token blocks', '256-token blocks'] as const;
export type HashingGeometry = (typeof HASHING_GEOMETRIES)[number];

export interface HashingRow {
  readonly geometry: HashingGeometry;
  readonly keyHash: KeyHash;
  readonly tokensPerHash: number;
  /** Keys derived per hash block, over all groups. */
  readonly keysPerHashBlock: number;
  readonly nsPerToken: Figure;
}

export interface HashingResults {
  readonly tokens: number;
  readonly rows: readonly HashingRow[];
  /** Per geometry: SHA-256 over xxHash64, paired by repeat. */
  readonly sha256OverXxh64: readonly { geometry: HashingGeometry; ratio: Figure }[];
}

function geometryConfig(geometry: HashingGeometry, tokens: number, keyHash: KeyHash): ConfigInput {
  const one = (tpb: number): ConfigInput => ({
    groups: [{ kind: 'full', tokensPerBlock: tpb }],
    tokensPerHash: tpb,
    blocksPerChunk: 1,
    maxBlocksPerRequest: Math.ceil(tokens / tpb),
  });
  const base =
    geometry === 'default'
      ? {
          ...DEFAULT_RUNTIME_CONFIG,
          maxBlocksPerRequest: Math.ceil(tokens / 16 / 4) * 4,
        }
      : one(geometry === '16-token blocks' ? 16 : 256);
  return {
    ...base,
    maxRequests: 1,
    gpuBlocks: 2,
    tierChunks: 1,
    namespace: { model: 'bench' },
    keyHash,
  };
}

async function measure(
  geometry: HashingGeometry,
  keyHash: KeyHash,
  options: HashingOptions,
): Promise<{ row: Omit<HashingRow, 'nsPerToken'>; samples: number[] }> {
  const config = resolveConfig(geometryConfig(geometry, options.tokens, keyHash));
  const state = SharedState.create(config);
  const scheduler = new SchedulerRole(state);
  const hasher = new HasherRole(state, await loadHashing(keyHash));
  const tokens = config.maxHashesPerRequest * config.tokensPerHash;
  const prompt = Int32Array.from({ length: tokens }, (_, i) => (i * 7919 + 13) % 50_000);
  const samples: number[] = [];
  // One warm-up run, then the timed ones.
  for (let r = 0; r <= options.repeats; r += 1) {
    prompt[0] = r; // a different chain every run
    const h = scheduler.open({ requestId: r, promptTokens: prompt });
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const hashed = hasher.hash(h);
    const cpu = process.cpuUsage(cpu0);
    const wallNs = (performance.now() - t0) * 1e6;
    if (hashed !== config.maxHashesPerRequest)
      throw new Error('hashing bench: not every block hashed');
    // CPU time of the process (this thread: nothing else runs) when it resolves the run, else wall time.
    const ns = cpu.user + cpu.system > 0 ? (cpu.user + cpu.system) * 1000 : wallNs;
    if (r > 0) samples.push(ns / tokens);
    scheduler.finish(h);
    scheduler.release(h);
  }
  const keysPerHashBlock = config.groups.reduce((n, g) => n + 1 / g.hashesPerChunk, 0);
  return {
    row: { geometry, keyHash, tokensPerHash: config.tokensPerHash, keysPerHashBlock },
    samples,
  };
}

export async function runHashingBench(options: HashingOptions): Promise<HashingResults> {
  const rows: HashingRow[] = [];
  const ratios: HashingResults['sha256OverXxh64'][number][] = [];
  for (const geometry of HASHING_GEOMETRIES) {
    const sha = await measure(geometry, 'sha256', options);
    const xxh = await measure(geometry, 'xxh64', options);
    rows.push({ ...sha.row, nsPerToken: figure(sha.samples, 'ns/token') });
    rows.push({ ...xxh.row, nsPerToken: figure(xxh.samples, 'ns/token') });
    ratios.push({ geometry, ratio: ratioFigure(sha.samples, xxh.samples) });
  }
  return { tokens: options.tokens, rows, sha256OverXxh64: ratios };
}
