// Issue 25, failure 7: waste. A second run re-stored every chunk the lower
// tiers already held (1,072 SETs for 578 hits), and with the default hybrid
// model (full attention with EAGLE, and a sliding window) a warm restart read
// every prompt's chunks from disk or Redis and loaded none of them: the
// promotion left out the EAGLE tail chunk the lookup reads, so the lookup's
// hit shrank by one chunk and its window moved onto chunks never fetched.
//
// Here, the same small hybrid workload twice against a real cluster and a real
// directory: the warm run loads from the lower tier, reads no more chunks than
// its loads use, and sends no SET for a chunk the cluster is known to hold.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runBuiltCli } from '../helpers/cli.js';
import { redisCli, useCluster } from '../helpers/redis-cluster.js';

const theCluster = useCluster();
const SECRET = 'tier-secret-for-tests-0123456789';
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** The default groups (hybrid), prompts that fit the pool (no preemption), the same seed twice. */
const WORKLOAD = [
  '--requests',
  '4',
  '--prompt-tokens',
  '8192',
  '--gpu-tokens',
  '131072',
  '--decode-tokens',
  '16',
  '--seed',
  '3',
  '--json',
];

interface Report {
  ok: boolean;
  tierHits: number;
  tiers: Record<'disk' | 'redis', Record<string, number>>;
}

async function simulate(tierArgs: string[]): Promise<Report> {
  const r = await runBuiltCli(['simulate', ...WORKLOAD, ...tierArgs], {
    env: { KVOFF_TIER_SECRET: SECRET },
  });
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Report;
}

/** SETs the masters executed since the last call (their command statistics, reset after). */
async function setsSinceLast(ports: readonly number[]): Promise<number> {
  let sets = 0;
  for (const port of ports) {
    if (!(await redisCli(port, 'role')).startsWith('master')) continue;
    const line = (await redisCli(port, 'info', 'commandstats'))
      .split('\n')
      .find((l) => l.startsWith('cmdstat_set:'));
    sets += Number(/calls=(\d+)/.exec(line ?? '')?.[1] ?? 0);
    await redisCli(port, 'config', 'resetstat');
  }
  return sets;
}

/**
 * A warm run's reads are all used: each hit chunk loads at most one chunk per
 * group (a window group only those in its window), so what was read from
 * below is at most the hybrid model's two chunks per hit chunk.
 */
function expectReadsUsed(cold: Report, warm: Report, level: 'disk' | 'redis'): void {
  expect(cold.ok && warm.ok).toBe(true);
  expect(warm.tiers[level]!.hitChunks).toBeGreaterThan(0);
  expect(warm.tierHits).toBeGreaterThan(cold.tierHits);
  expect(warm.tiers[level]!.hitChunks).toBeLessThanOrEqual(2 * warm.tierHits);
}

describe('a warm restart of the default hybrid model', () => {
  it('from Redis: loads what it reads, and sends no SET for a chunk the cluster is known to hold', async () => {
    const cluster = theCluster();
    const url = ['--redis', cluster.url];
    await setsSinceLast(cluster.ports);
    const cold = await simulate(url);
    const coldSets = await setsSinceLast(cluster.ports);
    const warm = await simulate(url);
    const warmSets = await setsSinceLast(cluster.ports);
    expect(coldSets).toBe(cold.tiers.redis!.storedChunks);
    expectReadsUsed(cold, warm, 'redis');
    // What it loaded it does not store again; a tenth leaves room for the chunks
    // no lookup asked about (the decode tail), which this process cannot know the cluster holds.
    expect(warmSets).toBeLessThanOrEqual(coldSets / 10);
  });

  it('from disk: loads what it reads', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvoff-warm-'));
    dirs.push(dir);
    const cold = await simulate(['--disk', dir]);
    const warm = await simulate(['--disk', dir]);
    expectReadsUsed(cold, warm, 'disk');
  });
});
