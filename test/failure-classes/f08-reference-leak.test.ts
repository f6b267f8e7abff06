// F8, reference leak (LMCache #1756; Dynamo #4171, #3730).
//
// The triggering sequence, in our words: a copy takes references (pins on
// its source GPU blocks, a read reference on the cache entries it loads) and
// then fails or its request goes away; the path that ends it in error never
// drops them. The entries can never be evicted again, the blocks never return
// to the pool: GPU memory leaks one failed copy at a time.
//
// kvoff: every pin is dropped by the copy's completion, failed copies
// included (`StorePlanner.complete(job, false)`, the transfer task's
// `finally`), and a failed load releases its read references like a good one.
// Each sequence runs on kvoff and on a test-only variant that keeps the
// references of a failed copy (`unsafeSkipUnpinOnFailure` in the planner; the
// runtime fuzzer's `leak-on-load-failure` switch, `unsafeLeakOnLoadFailure` in
// the store loop), where the same check must fail.
import { describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { GpuBlockPool } from '../../src/gpu-pool.js';
import type { PlannerOptions } from '../../src/planner.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';
import { fuzzSafeAndBroken } from './lower-tier-support.js';
import { ONE_GROUP } from '../helpers/configs.js';

const GPU_BLOCKS = 64;
const CONFIG: ConfigInput = { ...ONE_GROUP, gpuBlocks: GPU_BLOCKS, tierChunks: 16 };

/**
 * Three requests each store four chunks; every copy fails. Then the request
 * ends and its blocks are freed. Returns the violations of "a failed copy
 * leaves no reference behind" (empty on kvoff).
 */
async function failedCopies(options: PlannerOptions): Promise<string[]> {
  const lo = await local(CONFIG, options);
  const pool = new GpuBlockPool(GPU_BLOCKS, lo.state.pins);
  for (let id = 1; id <= 3; id += 1) {
    const prompt = tokens(17, id);
    const blocks = pool.allocate(5)!;
    const h = lo.open({ requestId: id, promptTokens: prompt });
    lo.hash(h);
    lo.appendBlocks(h, 0, blocks);
    lo.progress(h, prompt.length);
    const jobs = lo.plan();
    expect(jobs.flatMap((j) => j.chunks)).toHaveLength(4);
    for (const j of jobs) lo.complete(j, false);
    const keys = lo.keys(h, 0);
    lo.finish(h);
    planAndComplete(lo);
    pool.release(lo.release(h));
    // The failure is counted and nothing was published.
    expect(lo.tier.lookup(keys)).toBe(0);
  }
  expect(lo.counters.chunksTransferFailed).toBe(12);
  const violations: string[] = [];
  let pins = 0;
  for (let b = 0; b < GPU_BLOCKS; b += 1) pins += Atomics.load(lo.state.pins, b);
  if (pins !== 0) violations.push(`${pins} pins outstanding`);
  pool.releaseUnpinned();
  if (pool.quarantined !== 0) violations.push(`${pool.quarantined} blocks stuck in quarantine`);
  // Every usable block can be handed out again.
  if (pool.allocate(GPU_BLOCKS - 1) === undefined) violations.push('the pool cannot refill');
  return violations;
}

describe('F8 reference leak: failed store copies (through LocalOffload)', () => {
  it('kvoff: a failed copy unpins its source blocks; the pool gets every block back', async () => {
    expect(await failedCopies({})).toEqual([]);
  });

  it('broken variant (unsafeSkipUnpinOnFailure): the pins of failed copies leak and the blocks never come back', async () => {
    expect(await failedCopies({ unsafeSkipUnpinOnFailure: true })).toEqual([
      '12 pins outstanding',
      '12 blocks stuck in quarantine',
      'the pool cannot refill',
    ]);
  });

  it('kvoff: a load ends with its read references dropped, so the entries are evictable again', async () => {
    const lo = await local(CONFIG);
    const prompt = tokens(17, 9);
    const h = lo.open({ requestId: 1, promptTokens: prompt });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2, 3, 4, 5]);
    lo.progress(h, prompt.length);
    planAndComplete(lo);
    lo.finish(h);
    planAndComplete(lo);
    lo.release(h);
    const answer = lo.lookup(prompt);
    if (answer.deferred) throw new Error('a stored prompt is not deferred');
    const h2 = lo.open({ requestId: 2, promptTokens: prompt, hitChunks: answer.hitChunks });
    lo.appendBlocks(h2, 0, [6, 7, 8, 9]);
    const load = lo.load(h2, answer);
    expect(lo.tier.stats()).toMatchObject({ reading: 4, evictable: 0 });
    lo.completeLoad(load);
    expect(lo.tier.stats()).toMatchObject({ reading: 0, evictable: 4 });
  });
});

describe('F8 reference leak: failed loads in the runtime fuzzer', () => {
  it('kvoff leaks nothing on the seeds where the leak-on-load-failure switch is caught by the leak check', async () => {
    const { broken, safe } = await fuzzSafeAndBroken('leak-on-load-failure', 1, 400);
    expect(broken.violations).toBe(1);
    expect(broken.first!.invariant).toBe('leak');
    expect(broken.first!.message).toMatch(/being read/);
    expect(safe.schedules).toBe(broken.schedules);
    expect(safe.violations).toBe(0);
  });
});
