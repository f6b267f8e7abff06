// F10, deferred work dropped (Mooncake #3006 / #3009).
//
// The triggering sequence, in our words: a store pass finds chunks whose
// tokens are computed but which cannot be stored yet (their keys or block IDs
// are not published), so it defers them. Mooncake acknowledged deferred keys
// at deferral and dropped them on the next cycle: the work was reported as
// taken and silently never done.
//
// kvoff: a deferred chunk is never acknowledged. The cursor stays below it
// until it is stored, so the pass after its key or blocks arrive stores it;
// an ended request whose chunks never became ready counts them
// (chunksDroppedUnready); a lower level counts every store it cannot queue.
// Each sequence runs on kvoff and on a test-only variant that acknowledges
// deferred chunks (`unsafeDropDeferred` in the planner; the runtime fuzzer's
// `drop-deferred` switch), where the same check must fail.
import { afterAll, describe, expect, it } from 'vitest';
import type { PlannerOptions } from '../../src/planner.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';
import {
  freshDir,
  fuzzSafeAndBroken,
  openDisk,
  removeDirs,
  settle,
  valueOf,
} from './lower-tier-support.js';
import { ONE_GROUP } from '../helpers/configs.js';

afterAll(removeDirs);

const UNSAFE: PlannerOptions = { unsafeDropDeferred: true };

/**
 * Four token-ready chunks; the first pass sees only some of their keys
 * ('keys') or block IDs ('blocks'), the rest arrive before the next pass.
 * Returns the violations of "every deferred chunk is stored later" (empty on
 * kvoff).
 */
async function deferThenArrive(options: PlannerOptions, lag: 'keys' | 'blocks'): Promise<string[]> {
  const lo = await local(ONE_GROUP, options);
  const prompt = tokens(17, 6);
  const h = lo.open({ requestId: 1, promptTokens: prompt });
  if (lag === 'keys') {
    lo.hash(h, 2);
    lo.appendBlocks(h, 0, [1, 2, 3, 4, 5]);
  } else {
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2]);
  }
  lo.progress(h, prompt.length);
  planAndComplete(lo);
  const deferred = lo.counters.chunksDeferred;
  expect(deferred).toBe(2);
  if (lag === 'keys') lo.hash(h);
  else lo.appendBlocks(h, 0, [3, 4, 5]);
  planAndComplete(lo);
  lo.finish(h);
  planAndComplete(lo);
  const violations: string[] = [];
  const stored = lo.tier.lookup(lo.keys(h, 0));
  if (stored !== 4) violations.push(`hole: ${stored} of 4 chunks in the tier`);
  const counted = lo.counters.chunksStored + lo.counters.chunksDroppedUnready;
  if (counted !== 4) violations.push(`${4 - counted} deferred chunks neither stored nor counted`);
  return violations;
}

describe('F10 deferred work dropped: the store cursor (through LocalOffload)', () => {
  for (const lag of ['keys', 'blocks'] as const) {
    it(`kvoff: chunks deferred for lagging ${lag} are stored at the pass after they arrive`, async () => {
      expect(await deferThenArrive({}, lag)).toEqual([]);
    });

    it(`broken variant (unsafeDropDeferred): chunks deferred for lagging ${lag} are acknowledged and lost`, async () => {
      expect(await deferThenArrive(UNSAFE, lag)).toEqual([
        'hole: 2 of 4 chunks in the tier',
        '2 deferred chunks neither stored nor counted',
      ]);
    });
  }

  it('kvoff: chunks still deferred when their request ends and its blocks settle are counted as dropped', async () => {
    const lo = await local(ONE_GROUP);
    const prompt = tokens(17, 7);
    const h = lo.open({ requestId: 1, promptTokens: prompt });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2]);
    lo.progress(h, prompt.length);
    lo.finish(h);
    planAndComplete(lo);
    expect(lo.drained(h)).toBe(false); // it waits for the block IDs still to come
    lo.settle(h);
    planAndComplete(lo);
    expect(lo.drained(h)).toBe(true);
    expect(lo.counters).toMatchObject({ chunksStored: 2, chunksDroppedUnready: 2 });
  });
});

describe('F10 deferred work dropped: the disk tier write queue', () => {
  it('kvoff: stores beyond the write queue are dropped and counted; every accepted one is written', async () => {
    const FP = 0xf10n;
    const tier = await openDisk(freshDir(), FP, { writesInFlightMax: 1, writesQueuedMax: 2 });
    const keys = Array.from({ length: 12 }, (_, i) => BigInt(i + 1));
    for (const k of keys) tier.store(k, valueOf(FP, k));
    await settle(tier);
    const c = tier.counters;
    expect(c.droppedChunks).toBeGreaterThan(0);
    expect(c.storedChunks + c.droppedChunks).toBe(keys.length);
    let found = 0;
    for (const k of keys) if ((await tier.load(k)) !== undefined) found += 1;
    expect(found).toBe(c.storedChunks);
    await tier.close(2000);
  });
});

describe('F10 deferred work dropped: the runtime fuzzer', () => {
  it('kvoff has no hole on the seeds where the drop-deferred switch leaves one', async () => {
    const { broken, safe } = await fuzzSafeAndBroken('drop-deferred', 1, 200);
    expect(broken.violations).toBe(1);
    expect(['hole', 'cursor-within-ready']).toContain(broken.first!.invariant);
    expect(safe.schedules).toBe(broken.schedules);
    expect(safe.violations).toBe(0);
  });
});
