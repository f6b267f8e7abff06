// Regression: nothing in a key said which model, weights, adapter or tenant
// made the KV. Two runtimes of two models with the same geometry, on one
// Redis Cluster (and again on one disk directory): the second model's run got
// 518 hits on the first model's chunks, silently wrong KV. Keys now chain
// from a root of the namespace and the request's cache salt, and the lower
// levels' entries are scoped by them: each runtime here is its own process,
// as engine instances are, and only the same model (and salt) hits.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import type { TiersOptions } from '../../src/tier/cascade.js';
import { useCluster } from '../helpers/redis-cluster.js';

const run = promisify(execFile);
const theCluster = useCluster();
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

interface Child {
  tierHits: number;
  mismatches: number;
  holes: number;
  verify: { ok: boolean };
  tiers: Record<'host' | 'disk' | 'redis', Record<string, number>>;
}

/** One engine instance in its own process (test/fixtures/tier-runtime-child.ts). */
async function instance(tiers: TiersOptions, model: string, cacheSalt?: string): Promise<Child> {
  const args = {
    tiers,
    model,
    requests: 2,
    promptTokens: 3000,
    ...(cacheSalt !== undefined ? { cacheSalt } : {}),
  };
  const { stdout } = await run(
    process.execPath,
    ['--import', 'tsx', 'test/fixtures/tier-runtime-child.ts', JSON.stringify(args)],
    { timeout: 120_000 },
  );
  const child = JSON.parse(stdout.trim().split('\n').at(-1)!) as Child;
  // Whatever hit, every loaded block was checked against its key and every host entry too.
  expect(child.mismatches).toBe(0);
  expect(child.holes).toBe(0);
  expect(child.verify.ok).toBe(true);
  return child;
}

type Level = 'disk' | 'redis';

const levels: [Level, () => TiersOptions][] = [
  [
    'disk',
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'kvoff-identity-'));
      dirs.push(dir);
      return { disk: { dir } };
    },
  ],
  // A fresh namespace per test keeps runs apart on the one cluster.
  [
    'redis',
    () => ({ redis: { urls: [theCluster().url] }, secret: 'tier-secret-for-tests-0123456789' }),
  ],
];

describe("regression: a second model got hits on the first model's chunks", () => {
  for (const [level, tiersOf] of levels) {
    it(`${level}: another --model gets 0 hits on the first one's entries; the same model hits`, async () => {
      const tiers = tiersOf();
      const model = `m-${level}-${Date.now()}`;
      const a = await instance(tiers, `${model}-a`);
      expect(a.tiers[level]!.storedChunks).toBeGreaterThan(0);
      const b = await instance(tiers, `${model}-b`);
      expect(b.tiers[level]!.hitChunks).toBe(0);
      expect(b.tiers[level]!.keyCollisions).toBe(0); // other scopes never even meet
      const again = await instance(tiers, `${model}-a`);
      expect(again.tiers[level]!.hitChunks).toBeGreaterThan(0);
      expect(again.tiers[level]!.errors).toBe(0);
    }, 240_000);

    it(`${level}: two cache salts share 0 entries; the same salt hits; no salt is a domain of its own`, async () => {
      const tiers = tiersOf();
      const model = `s-${level}-${Date.now()}`;
      const x = await instance(tiers, model, 'tenant-x');
      expect(x.tiers[level]!.storedChunks).toBeGreaterThan(0);
      const y = await instance(tiers, model, 'tenant-y');
      expect(y.tiers[level]!.hitChunks).toBe(0);
      const none = await instance(tiers, model);
      expect(none.tiers[level]!.hitChunks).toBe(0);
      const xAgain = await instance(tiers, model, 'tenant-x');
      expect(xAgain.tiers[level]!.hitChunks).toBeGreaterThan(0);
    }, 240_000);
  }
});
