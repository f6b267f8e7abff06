// F9, allocation failure treated as success (SGLang HiCache #27108; vLLM #26329).
//
// The triggering sequence, in our words: the cache level is full (no free
// slot and nothing evictable, a byte cap, a file system below its floor, an
// unwritable directory, a Redis cluster answering OOM), and a store is
// offered anyway. HiCache could not allocate host memory, yet marked the
// entry as backed up and evicted its source; later lookups trusted an entry
// that was never written.
//
// kvoff: `prepareStore` reserves every slot or changes nothing; a refused
// offer leaves the store cursor where it was and is offered again at the next
// pass (a final pass that still cannot store counts chunksDroppedForCapacity);
// a lower level drops and counts a store it cannot take (droppedChunks,
// fullChunks) and never indexes it. Each sequence runs on kvoff and on a
// test-only variant that acknowledges the failed allocation
// (`unsafeAckOnAllocFailure`: planner, disk tier, Redis tier; the runtime
// fuzzer's `ack-on-alloc-failure` switch), where the same check must fail.
import { afterAll, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ConfigInput } from '../../src/config.js';
import type { PlannerOptions } from '../../src/planner.js';
import { FaultyTier } from '../../src/fuzz/faulty-tier.js';
import { HostTier } from '../../src/tier/host-tier.js';
import type { LowerTier, LowerTierSwitches } from '../../src/tier/lower.js';
import { scopeDirName } from '../../src/tier/disk-tier.js';
import { keyName } from '../../src/tier/value.js';
import { DEFAULT_RUNTIME_CONFIG, OffloadRuntime } from '../../src/index.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';
import { redisCli, useCluster } from '../helpers/redis-cluster.js';
import {
  freshDir,
  fuzzSafeAndBroken,
  openDisk,
  openRedis,
  removeDirs,
  settle,
  valueOf,
} from './lower-tier-support.js';
import { ONE_GROUP } from '../helpers/configs.js';

const CONFIG: ConfigInput = { ...ONE_GROUP, tierChunks: 16 };
const UNSAFE: PlannerOptions = { unsafeAckOnAllocFailure: true };

const cluster = useCluster();
afterAll(removeDirs);

/**
 * A request of four chunks; the tier refuses its first offer (cannot
 * allocate), then has room. Returns the violations of "a chunk counted as
 * stored is in the tier" (empty on kvoff).
 */
async function refusedThenRoom(options: PlannerOptions): Promise<string[]> {
  const tier = new FaultyTier(new HostTier(16));
  const lo = await local(CONFIG, { ...options, tier });
  const prompt = tokens(17, 4);
  const h = lo.open({ requestId: 1, promptTokens: prompt });
  lo.hash(h);
  lo.appendBlocks(h, 0, [1, 2, 3, 4, 5]);
  lo.progress(h, prompt.length);
  tier.failNext = 1;
  expect(planAndComplete(lo)).toEqual([]);
  expect(tier.refused).toBe(1);
  const afterRefusal = lo.cursor(h, 0);
  planAndComplete(lo);
  lo.finish(h);
  planAndComplete(lo);
  const keys = lo.keys(h, 0);
  const violations: string[] = [];
  const inTier = lo.tier.lookup(keys);
  if (afterRefusal !== 0) violations.push(`cursor moved to ${afterRefusal} on a refused offer`);
  if (inTier !== lo.counters.chunksStored) {
    violations.push(`${lo.counters.chunksStored} chunks counted stored, ${inTier} in the tier`);
  }
  if (inTier !== 4) violations.push(`hole: ${inTier} of 4 chunks in the tier`);
  if (violations.length === 0) {
    expect(lo.counters).toMatchObject({ allocationFailures: 1, chunksDroppedForCapacity: 0 });
  }
  return violations;
}

describe('F9 allocation failure treated as success: host tier (through LocalOffload)', () => {
  it('kvoff: a refused offer leaves the cursor and is stored at the next pass', async () => {
    expect(await refusedThenRoom({})).toEqual([]);
  });

  it('broken variant (unsafeAckOnAllocFailure): the refused chunks count as stored and never reach the tier', async () => {
    expect(await refusedThenRoom(UNSAFE)).toEqual([
      'cursor moved to 4 on a refused offer',
      '4 chunks counted stored, 0 in the tier',
      'hole: 0 of 4 chunks in the tier',
    ]);
  });

  it('kvoff: an ended request whose final offers keep failing counts what it drops, never silent', async () => {
    const tier = new FaultyTier(new HostTier(16));
    const lo = await local(CONFIG, { tier });
    const prompt = tokens(17, 5);
    const h = lo.open({ requestId: 1, promptTokens: prompt });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2, 3, 4, 5]);
    lo.progress(h, prompt.length);
    lo.finish(h);
    tier.failNext = 100;
    for (let pass = 0; pass < 10 && !lo.drained(h); pass += 1) planAndComplete(lo);
    expect(lo.drained(h)).toBe(true);
    expect(lo.counters).toMatchObject({ chunksStored: 0, chunksDroppedForCapacity: 4 });
    expect(lo.tier.lookup(lo.keys(h, 0))).toBe(0);
  });
});

/** Every key the level counts as stored must be one a lookup finds; refusals are counted. */
async function storedMeansFound(tier: LowerTier, keys: bigint[]): Promise<string[]> {
  const violations: string[] = [];
  let found = 0;
  for (const k of keys) if ((await tier.states([k]))[0] === 'hit') found += 1;
  const c = tier.counters;
  if (c.storedChunks !== found) violations.push(`${c.storedChunks} counted stored, ${found} found`);
  if (c.storedChunks + c.droppedChunks !== keys.length) {
    violations.push(
      `${keys.length - c.storedChunks - c.droppedChunks} stores neither stored nor dropped`,
    );
  }
  if (found > 0) {
    for (const k of keys) {
      if ((await tier.load(k)) === undefined) violations.push(`key ${k} answered hit, then missed`);
    }
  }
  return violations;
}

describe('F9 allocation failure treated as success: disk tier', () => {
  const FP = 0xf09n;
  const KEYS = [1n, 2n, 3n];

  async function fullDisk(
    switches: LowerTierSwitches,
    how: 'floor' | 'cap' | 'unwritable',
  ): Promise<string[]> {
    const dir = freshDir();
    const extra =
      how === 'floor'
        ? { freeBytesMin: Number.MAX_SAFE_INTEGER }
        : how === 'cap'
          ? { bytesMax: 100 }
          : {};
    const tier = await openDisk(dir, FP, extra, switches);
    // Unwritable after open (a directory that cannot be used at open is refused there):
    // a file where the keys' shard directory goes, so no write can land, even for root.
    if (how === 'unwritable')
      writeFileSync(join(dir, scopeDirName(FP), keyName(KEYS[0]!).slice(0, 2)), 'x');
    for (const k of KEYS) tier.store(k, valueOf(FP, k));
    await settle(tier);
    const violations = await storedMeansFound(tier, KEYS);
    if (violations.length === 0) {
      expect(tier.counters).toMatchObject({ storedChunks: 0, droppedChunks: 3 });
      if (how !== 'unwritable') expect(tier.counters.fullChunks).toBe(3);
    }
    await tier.close(2000);
    return violations;
  }

  for (const how of ['floor', 'cap', 'unwritable'] as const) {
    it(`kvoff: a store refused by the ${how} is dropped and counted, never indexed`, async () => {
      expect(await fullDisk({}, how)).toEqual([]);
    });

    it(`broken variant (unsafeAckOnAllocFailure): a store refused by the ${how} answers hit and then misses`, async () => {
      const violations = await fullDisk({ unsafeAckOnAllocFailure: true }, how);
      expect(violations).toContain('key 1 answered hit, then missed');
    });
  }
});

describe('F9 allocation failure treated as success: Redis Cluster tier (OOM)', () => {
  let fp = 0xf0900n;

  async function outOfMemory(switches: LowerTierSwitches): Promise<string[]> {
    const ports = cluster().ports;
    for (const p of ports) {
      await redisCli(p, 'config', 'set', 'maxmemory-policy', 'noeviction');
      await redisCli(p, 'config', 'set', 'maxmemory', '1');
    }
    fp += 1n;
    const tier = await openRedis(cluster().url, fp, switches);
    try {
      const keys = [1n, 2n, 3n, 4n];
      for (const k of keys) tier.store(k, valueOf(fp, k));
      await settle(tier);
      const violations = await storedMeansFound(tier, keys);
      if (violations.length === 0) {
        expect(tier.counters).toMatchObject({ storedChunks: 0, fullChunks: 4, droppedChunks: 4 });
      }
      return violations;
    } finally {
      for (const p of ports) {
        await redisCli(p, 'config', 'set', 'maxmemory', '512mb');
        await redisCli(p, 'config', 'set', 'maxmemory-policy', 'allkeys-lru');
      }
      await tier.close(2000);
    }
  }

  it('kvoff: a store answered OOM is dropped and counted as full', async () => {
    expect(await outOfMemory({})).toEqual([]);
  }, 30_000);

  it('broken variant (unsafeAckOnAllocFailure): the OOM stores count as stored though no lookup finds them', async () => {
    expect(await outOfMemory({ unsafeAckOnAllocFailure: true })).toEqual([
      '4 counted stored, 0 found',
    ]);
  }, 30_000);
});

describe('F9 allocation failure treated as success: the threaded runtime', () => {
  it('kvoff: eight requests into a 12-chunk host tier: every chunk is stored or counted as dropped, no hole, nothing held', async () => {
    const config = {
      ...DEFAULT_RUNTIME_CONFIG,
      groups: [{ kind: 'full' as const, tokensPerBlock: 16 }],
      tierChunks: 12,
    };
    const rt = await OffloadRuntime.start({ config });
    const requests = 8;
    const promptLength = 512;
    const maxDecodeTokens = 4;
    await Promise.all(
      Array.from({ length: requests }, (_, i) =>
        rt.submit({ promptLength, prefixId: i + 1, sharedPrefixTokens: 0, maxDecodeTokens }),
      ),
    );
    await rt.close();
    const s = rt.stats();
    // Distinct prompts: each request's chunks up to (not including) its last sampled token.
    const tokensPerChunk = rt.config.groups[0]!.tokensPerChunk;
    const chunks = requests * Math.floor((promptLength + maxDecodeTokens - 1) / tokensPerChunk);
    expect(s.chunksStored + s.chunksDroppedForCapacity + s.chunksDroppedUnready).toBe(chunks);
    expect(s).toMatchObject({ holes: 0, mismatches: 0, pinsOutstanding: 0 });
    expect(rt.leakReport()).toMatchObject({ pinsOutstanding: 0, tierEntriesWriting: 0 });
  }, 30_000);
});

describe('F9 allocation failure treated as success: the runtime fuzzer', () => {
  it('kvoff has no hole on the seeds where the ack-on-alloc-failure switch leaves one', async () => {
    const { broken, safe } = await fuzzSafeAndBroken('ack-on-alloc-failure', 1, 200);
    expect(broken.violations).toBe(1);
    expect(broken.first!.invariant).toBe('hole');
    expect(safe.schedules).toBe(broken.schedules);
    expect(safe.violations).toBe(0);
  });
});
