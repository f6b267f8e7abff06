// Regression: tiers index and name entries by a 64-bit key word, and a key
// word is all a level compared. At 10^8 chunks a 64-bit key collides by
// chance with probability about 3e-4, and a crafted collision takes about
// 2^32 work; a collision served the other chunk's KV. Every entry now carries
// the chunk's whole 256-bit identity, compared before a byte is served.
//
// A test-only switch (unsafeKeyBits: 16) keeps 16 bits of each key word, so
// thousands of chunks collide often; the check beside it stays whole. Each
// runtime is its own process on one disk directory (and on one Redis
// Cluster): the second run finds other chunks' entries under its key words,
// counts every one as a miss (keyCollisions) and loads no wrong byte (the
// engine checks every loaded block against its key; the bytes are expanded
// from the whole identity, so a wrong entry cannot look right). With the
// identity check switched off (unsafeKeyWordOnly) the same run loads wrong
// bytes: the check is what prevents it.
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
  mismatches: number;
  holes: number;
  verify: { ok: boolean };
  tiers: Record<'host' | 'disk' | 'redis', Record<string, number>>;
}

async function instance(tiers: TiersOptions, model: string, keyWordOnly = false): Promise<Child> {
  const args = {
    tiers,
    model,
    // 8 prompts of about 8,000 tokens in 16-token chunks: some 3,000 distinct
    // chunks, about 70 colliding 16-bit key words among them.
    requests: 8,
    promptTokens: 8000,
    blocksPerChunk: 1,
    unsafeKeyBits: 16,
    // One at a time: each later request looks up what the earlier ones stored.
    sequential: true,
    ...(keyWordOnly ? { unsafeTierSwitches: { unsafeKeyWordOnly: true } } : {}),
  };
  const { stdout } = await run(
    process.execPath,
    ['--import', 'tsx', 'test/fixtures/tier-runtime-child.ts', JSON.stringify(args)],
    { timeout: 180_000, maxBuffer: 16 << 20 },
  );
  return JSON.parse(stdout.trim().split('\n').at(-1)!) as Child;
}

const levels: ['disk' | 'redis', () => TiersOptions][] = [
  [
    'disk',
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'kvoff-collide-'));
      dirs.push(dir);
      return { disk: { dir } };
    },
  ],
  [
    'redis',
    () => ({ redis: { urls: [theCluster().url] }, secret: 'tier-secret-for-tests-0123456789' }),
  ],
];

describe("regression: a colliding key word served another chunk's KV", () => {
  for (const [level, tiersOf] of levels) {
    it(`${level}: with 16-bit key words collisions are frequent, each a counted miss, no wrong byte; without the identity check wrong bytes load`, async () => {
      const tiers = tiersOf();
      const model = `collide-${level}-${Date.now()}`;
      const first = await instance(tiers, model);
      expect(first.tiers[level]!.storedChunks).toBeGreaterThan(1000);
      const second = await instance(tiers, model);
      const l = second.tiers[level]!;
      expect(l.keyCollisions).toBeGreaterThan(0);
      expect(l.hitChunks).toBeGreaterThan(0);
      expect(second.mismatches).toBe(0);
      expect(second.holes).toBe(0);
      expect(second.verify.ok).toBe(true);
      // The same run with only the key word compared: another chunk's bytes are served.
      const unchecked = await instance(tiers, model, true);
      expect(unchecked.tiers[level]!.keyCollisions).toBe(0);
      expect(unchecked.mismatches).toBeGreaterThan(0);
    }, 420_000);
  }
});
