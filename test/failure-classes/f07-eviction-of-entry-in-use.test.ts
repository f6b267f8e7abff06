// F7, eviction of entries in use (LMCache #1429, #4133, #993, #1858).
//
// The triggering sequence, in our words: the cache is full; one request is
// reading entries (a load into its GPU blocks) or a copy is still writing
// them, and another request's store needs room. LMCache chose eviction
// candidates under a lock and evicted them outside it, so pinned entries
// were evicted (and their memory handed to the new writer) while they were
// read; unpins ran twice and pin counts went negative.
//
// kvoff: an entry being written (refCount -1) or read (refCount > 0) is never
// a victim, in host memory and on disk; a store that cannot find room is
// refused and retried, not served by taking an entry in use. A store job is
// completed (and its blocks unpinned) exactly once. Each sequence below runs
// on kvoff and on a test-only variant that evicts entries in use
// (`unsafeEvictInUse`), where the same check must fail.
//
// No Redis case: kvoff never evicts from Redis (the cluster's own
// maxmemory-policy does), and a read is one GET of one whole value, so there
// is no window in which kvoff holds a Redis entry in use.
import { afterAll, describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { InvalidArgumentError } from '../../src/errors.js';
import type { LocalOffload } from '../../src/local.js';
import { HostTier } from '../../src/tier/host-tier.js';
import type { HostTierOptions } from '../../src/tier/host-tier.js';
import type { LowerTierSwitches } from '../../src/tier/lower.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';
import {
  VALUE_BYTES,
  freshDir,
  fuzzSafeAndBroken,
  openDisk,
  payloadOf,
  removeDirs,
  settle,
  valueOf,
} from './lower-tier-support.js';
import { ONE_GROUP } from '../helpers/configs.js';

afterAll(removeDirs);

// Chunks of one 4-token block; room for exactly one 4-chunk prompt.
const CONFIG: ConfigInput = { ...ONE_GROUP, tierChunks: 4 };
const UNSAFE: HostTierOptions = { unsafeEvictInUse: true };

let nextBlock = 1;
function blocks(n: number): number[] {
  return Array.from({ length: n }, () => nextBlock++);
}

/** Runs request `id` over `prompt` to its end and releases it: its four chunks are in the tier. */
function storePrompt(lo: LocalOffload, prompt: number[], id: number): void {
  const h = lo.open({ requestId: id, promptTokens: prompt });
  lo.hash(h);
  lo.appendBlocks(h, 0, blocks(5));
  lo.progress(h, prompt.length);
  planAndComplete(lo);
  lo.finish(h);
  planAndComplete(lo);
  lo.release(h);
}

/**
 * A full tier; request 2 is loading prompt A (every entry being read) when
 * request 3's store of prompt B needs four slots. Returns what a check can
 * see: violations of "an entry in use keeps its slot" (empty on kvoff).
 */
async function loadThenStoreUnderPressure(options: HostTierOptions): Promise<string[]> {
  const tier = new HostTier(4, options);
  const lo = await local(CONFIG, { tier });
  const A = tokens(17, 1);
  const B = tokens(17, 2);
  storePrompt(lo, A, 1);
  const answer = lo.lookup(A);
  if (answer.deferred) throw new Error('a stored prompt is not deferred');
  expect(answer.hitTokens).toBe(16);
  const h2 = lo.open({ requestId: 2, promptTokens: A, hitChunks: answer.hitChunks });
  lo.hash(h2);
  lo.appendBlocks(h2, 0, blocks(4));
  const load = lo.load(h2, answer);
  expect(tier.stats().reading).toBe(4);

  const h3 = lo.open({ requestId: 3, promptTokens: B });
  lo.hash(h3);
  lo.appendBlocks(h3, 0, blocks(5));
  lo.progress(h3, B.length);
  const jobs = lo.plan();

  const violations: string[] = [];
  const readSlots = new Set(load.chunks.map((c) => c.tierSlot));
  for (const c of load.chunks) {
    if (tier.slotOf(c.key) !== c.tierSlot) violations.push(`entry ${c.key} evicted while read`);
  }
  for (const j of jobs) {
    for (const c of j.chunks) {
      if (readSlots.has(c.tierSlot)) violations.push(`slot ${c.tierSlot} rewritten while read`);
    }
  }
  for (const j of jobs) lo.complete(j);
  lo.completeLoad(load);
  if (violations.length > 0) return violations;

  // kvoff refused the store (counted), kept the cursor, and stores B once the load ended.
  expect(lo.counters.allocationFailures).toBeGreaterThan(0);
  expect(lo.cursor(h3, 0)).toBe(0);
  planAndComplete(lo);
  expect(lo.cursor(h3, 0)).toBe(4);
  expect(tier.lookup(lo.keys(h3, 0))).toBe(4);
  return violations;
}

/** Two entries being written fill a 2-slot tier; a third store must not take either slot. */
function storeWhileWriting(options: HostTierOptions): string[] {
  const tier = new HostTier(2, options);
  const first = tier.prepareStore([1n, 2n]);
  if (!first.ok) throw new Error('an empty tier refused two entries');
  const third = tier.prepareStore([3n]);
  const violations: string[] = [];
  if (third.ok) {
    for (const k of third.evicted) violations.push(`entry ${k} evicted while written`);
    for (const s of third.slots) {
      if (first.slots.includes(s)) violations.push(`slot ${s} handed out twice`);
    }
  } else expect(third).toMatchObject({ needed: 1, evictable: 0 });
  return violations;
}

describe('F7 eviction of entries in use: host tier (through LocalOffload)', () => {
  it('kvoff: a store that needs the slots of entries being read is refused, then stored after the load', async () => {
    expect(await loadThenStoreUnderPressure({})).toEqual([]);
  });

  it('broken variant (unsafeEvictInUse): the same sequence evicts the entries being read', async () => {
    const violations = await loadThenStoreUnderPressure(UNSAFE);
    expect(violations).not.toEqual([]);
    expect(violations.join('\n')).toMatch(/evicted while read/);
  });

  it('kvoff: entries being written are never evicted; broken variant: they are', () => {
    expect(storeWhileWriting({})).toEqual([]);
    expect(storeWhileWriting(UNSAFE)).toEqual([
      'entry 1 evicted while written',
      'slot 0 handed out twice',
    ]);
  });

  it('kvoff: a store job completes (and unpins) exactly once; a second complete is refused and changes nothing', async () => {
    const lo = await local(CONFIG);
    const h = lo.open({ requestId: 1, promptTokens: tokens(9, 3) });
    lo.hash(h);
    lo.appendBlocks(h, 0, blocks(3));
    lo.progress(h, 9);
    const [job] = lo.plan();
    expect(job).toBeDefined();
    const pinned = job!.chunks.flatMap((c) => c.blocks);
    expect(pinned.map((b) => Atomics.load(lo.state.pins, b))).toEqual(pinned.map(() => 1));
    lo.complete(job!);
    expect(() => lo.complete(job!)).toThrow(InvalidArgumentError);
    // Never negative: the refused second complete unpinned nothing.
    expect(pinned.map((b) => Atomics.load(lo.state.pins, b))).toEqual(pinned.map(() => 0));
  });
});

describe('F7 eviction of entries in use: disk tier', () => {
  const FP = 0xf07n;

  /** A cap of two entries; key 1 is being read and key 2 being written when key 3 needs room. */
  async function readWriteThenStore(switches: LowerTierSwitches): Promise<string[]> {
    const tier = await openDisk(freshDir(), FP, { bytesMax: 2 * VALUE_BYTES }, switches);
    tier.store(1n, valueOf(FP, 1n));
    await settle(tier);
    const reading = tier.load(1n);
    tier.store(2n, valueOf(FP, 2n));
    tier.store(3n, valueOf(FP, 3n));
    const read = await reading;
    await settle(tier);
    const violations: string[] = [];
    if (read === undefined || !read.equals(payloadOf(1n))) violations.push('read of 1 failed');
    const states = await tier.states([1n, 2n]);
    if (states[0] !== 'hit') violations.push('entry 1 evicted while read');
    if (states[1] !== 'hit') violations.push('entry 2 evicted while written');
    if (violations.length === 0) {
      // The store that found no idle entry was refused and counted, never silent.
      expect(tier.counters).toMatchObject({ fullChunks: 1, droppedChunks: 1, evictions: 0 });
      expect(await tier.states([3n])).toEqual(['miss']);
    }
    await tier.close(2000);
    return violations;
  }

  it('kvoff: entries being read or written survive a store that needs room; it is refused and counted', async () => {
    expect(await readWriteThenStore({})).toEqual([]);
  });

  it('broken variant (unsafeEvictInUse): the same sequence evicts an entry in use', async () => {
    expect(await readWriteThenStore({ unsafeEvictInUse: true })).toContain(
      'entry 1 evicted while read',
    );
  });
});

describe('F7 eviction of entries in use: the runtime fuzzer', () => {
  it('kvoff passes the seeds on which the evict-in-use switch is caught (tier bytes not their key)', async () => {
    const { broken, safe } = await fuzzSafeAndBroken('evict-in-use', 1, 200);
    expect(broken.violations).toBe(1);
    expect(['mispairing', 'crash', 'leak']).toContain(broken.first!.invariant);
    expect(safe.schedules).toBe(broken.schedules);
    expect(safe.violations).toBe(0);
  });
});
