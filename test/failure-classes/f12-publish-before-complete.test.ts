// F12, publish before complete (a design lesson: Mooncake's PutEnd, Dynamo's
// Registered state and vLLM's complete_store publish only after the copy).
//
// The triggering sequence, in our words: a store has reserved an entry and
// its copy is still running when another request looks the same prefix up.
// A system that makes the entry visible at reservation answers a hit, and the
// reader gets a half-written (or not yet written) entry.
//
// kvoff: a host-tier entry is invisible (a lookup answers "pending" and
// defers) until completeStore, after the copy; a disk entry is written under
// a temp name and renamed into place, and this process answers "pending" for
// it meanwhile; a Redis key whose SET is in flight answers "pending". Each
// sequence runs on kvoff and on a test-only variant that publishes before the
// copy completes (`unsafePublishBeforeComplete` in the host, disk and Redis
// tiers; the runtime fuzzer's `load-while-writing` switch), where the same
// check must fail.
import { statSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { HostTier } from '../../src/tier/host-tier.js';
import type { HostTierOptions } from '../../src/tier/host-tier.js';
import type { LowerTierSwitches } from '../../src/tier/lower.js';
import { VALUE_HEADER_BYTES } from '../../src/tier/value.js';
import { local, tokens } from '../helpers/local.js';
import { useCluster } from '../helpers/redis-cluster.js';
import {
  freshDir,
  fuzzSafeAndBroken,
  openDisk,
  openRedis,
  payloadOf,
  removeDirs,
  settle,
  valueOf,
} from './lower-tier-support.js';
import { ONE_GROUP } from '../helpers/configs.js';

const cluster = useCluster();
afterAll(removeDirs);

/**
 * Request 1's store job for a 4-chunk prompt is in flight (its copy has not
 * run) when request 2 looks the prompt up. Returns the violations of "a
 * lookup sees only completed entries" (empty on kvoff).
 */
async function lookupDuringCopy(options: HostTierOptions): Promise<string[]> {
  const tier = new HostTier(16, options);
  const lo = await local(ONE_GROUP, { tier });
  const prompt = tokens(17, 8);
  const h = lo.open({ requestId: 1, promptTokens: prompt });
  lo.hash(h);
  lo.appendBlocks(h, 0, [1, 2, 3, 4, 5]);
  lo.progress(h, prompt.length);
  const jobs = lo.plan();
  expect(jobs.flatMap((j) => j.chunks)).toHaveLength(4);
  const violations: string[] = [];
  const during = lo.lookup(prompt);
  if (!during.deferred && during.hitTokens > 0) {
    violations.push(`lookup hit ${during.hitTokens} tokens before the copy completed`);
  }
  const keys = lo.keys(h, 0);
  if (tier.lookup(keys) > 0)
    violations.push(`tier lookup found ${tier.lookup(keys)} entries being written`);
  for (const j of jobs) lo.complete(j);
  const after = lo.lookup(prompt);
  if (after.deferred || after.hitTokens !== 16) violations.push('no hit after the copy completed');
  return violations;
}

describe('F12 publish before complete: host tier (through LocalOffload)', () => {
  it('kvoff: a lookup during the copy defers; after completeStore it hits', async () => {
    expect(await lookupDuringCopy({})).toEqual([]);
  });

  it('broken variant (unsafePublishBeforeComplete): the lookup hits entries whose copy has not run', async () => {
    expect(await lookupDuringCopy({ unsafePublishBeforeComplete: true })).toEqual([
      'lookup hit 16 tokens before the copy completed',
      'tier lookup found 4 entries being written',
    ]);
  });
});

describe('F12 publish before complete: disk tier', () => {
  const FP = 0xf12n;
  const BIG = 4 << 20;

  /**
   * Stores large entries and, while each write is in flight, asks this
   * process, and watches the final file name at every turn of the event loop;
   * then a second process on the same directory reads the entry. Returns the
   * violations of "an entry is visible only once whole" (empty on kvoff).
   * (The final name may appear before this process hears its rename landed:
   * it is then whole, which is allowed.) Stops after `keysMax` entries, or
   * once both violations were seen.
   */
  async function lookupDuringWrite(
    switches: LowerTierSwitches,
    keysMax: number,
  ): Promise<string[]> {
    const dir = freshDir();
    const extra = { payloadBytes: BIG };
    const writer = await openDisk(dir, FP, extra, switches);
    const other = await openDisk(dir, FP, extra);
    const violations = new Set<string>();
    for (let k = 1n; k <= BigInt(keysMax) && violations.size < 2; k += 1n) {
      writer.store(k, valueOf(FP, k, BIG));
      const own = (await writer.states([k]))[0];
      if (own !== 'pending') violations.add(`this process answered ${own} during the write`);
      for (let i = 0; i < 100_000 && writer.storesInFlight > 0; i += 1) {
        const size = statSync(writer.pathOf(k), { throwIfNoEntry: false })?.size;
        if (size !== undefined && size !== VALUE_HEADER_BYTES + BIG) {
          violations.add('a partial entry was visible under its final name');
        }
        await new Promise((r) => setImmediate(r));
      }
      await settle(writer);
      const state = (await other.states([k]))[0];
      const got = await other.load(k);
      if (state !== 'hit' || !got?.equals(payloadOf(k, BIG))) {
        violations.add('not whole after the write');
      }
    }
    await writer.close(5000);
    await other.close(5000);
    return [...violations];
  }

  it('kvoff: during the write this process answers pending and no partial entry is ever under its final name', async () => {
    expect(await lookupDuringWrite({}, 2)).toEqual([]);
  }, 30_000);

  it('broken variant (unsafePublishBeforeComplete): the entry answers hit and its file is visible mid-write', async () => {
    const violations = await lookupDuringWrite({ unsafePublishBeforeComplete: true }, 10);
    expect(violations).toContain('this process answered hit during the write');
    expect(violations).toContain('a partial entry was visible under its final name');
  }, 30_000);
});

describe('F12 publish before complete: Redis Cluster tier', () => {
  let fp = 0xf1200n;

  /** A lookup right after the store was offered, while its SET is in flight. */
  async function lookupDuringSet(switches: LowerTierSwitches): Promise<string[]> {
    fp += 1n;
    const tier = await openRedis(cluster().url, fp, switches);
    try {
      const violations: string[] = [];
      const keys = [1n, 2n, 3n];
      for (const k of keys) tier.store(k, valueOf(fp, k));
      const during = await tier.states(keys);
      if (during.some((s) => s === 'hit')) violations.push('hit while the SET was in flight');
      await settle(tier);
      expect(await tier.states(keys)).toEqual(['hit', 'hit', 'hit']);
      for (const k of keys) expect((await tier.load(k))?.equals(payloadOf(k))).toBe(true);
      if (violations.length === 0) expect(during).toEqual(['pending', 'pending', 'pending']);
      return violations;
    } finally {
      await tier.close(2000);
    }
  }

  it('kvoff: a key whose SET is in flight answers pending', async () => {
    expect(await lookupDuringSet({})).toEqual([]);
  }, 30_000);

  it('broken variant (unsafePublishBeforeComplete): it answers hit before the SET landed', async () => {
    expect(await lookupDuringSet({ unsafePublishBeforeComplete: true })).toEqual([
      'hit while the SET was in flight',
    ]);
  }, 30_000);
});

describe('F12 publish before complete: the runtime fuzzer', () => {
  it('kvoff loads no wrong byte on the seeds where the load-while-writing switch loads a chunk mid-copy', async () => {
    const { broken, safe } = await fuzzSafeAndBroken('load-while-writing', 1, 400);
    expect(broken.violations).toBe(1);
    expect(broken.first!.invariant).toBe('mispairing');
    expect(safe.schedules).toBe(broken.schedules);
    expect(safe.violations).toBe(0);
  });
});
