// The lookup budget of the levels below host memory bounds a stalled level,
// not a busy one. In the project's CI a warm restart's fourth resolution,
// queued behind the other three's reads while the levels answered steadily,
// was cut short by a budget counted from its start and loaded none of what it
// had read. Here the store's resolutions run over levels whose answers the
// test hands out on a fake clock, so the order is fixed and nothing depends
// on the machine's speed: reads answered steadily, all of them together
// longer than the budget, are not cut short; a level silent for the budget
// is, and what it had read is discarded and counted, not promoted.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LowerLookups } from '../../src/runtime/lower-lookup.js';
import type { LookupView } from '../../src/runtime/lower-lookup.js';
import type { RuntimeViews } from '../../src/runtime/buffers.js';
import type { TierCascade, LowerState } from '../../src/tier/cascade.js';
import type { HostTier } from '../../src/tier/host-tier.js';
import { zeroCounters } from '../../src/tier/lower.js';
import type { LowerTier } from '../../src/tier/lower.js';

const BUDGET_MS = 300;
const CHUNKS = 40;
const BYTES_PER_BLOCK = 8;

/** A level whose reads the test answers, oldest first (as the cascade's bounded fetch queue runs them). */
function fakeLevels() {
  const level = { name: 'redis', counters: zeroCounters() } as unknown as LowerTier;
  const queue: { resolve: (b: Buffer | undefined) => void; wanted: () => boolean }[] = [];
  const cascade = {
    lookupBudgetMs: BUDGET_MS,
    async resolve(keys: readonly bigint[]) {
      return new Map<bigint, LowerState>(keys.map((k) => [k, { state: 'hit', level }]));
    },
    fetch(_key: bigint, _level: LowerTier, wanted: () => boolean) {
      return new Promise<Buffer | undefined>((resolve) => queue.push({ resolve, wanted }));
    },
  } as unknown as TierCascade;
  /** Answers the `n` oldest reads (a read nobody wants any more when its turn comes reads nothing). */
  const answer = (n: number) => {
    for (const r of queue.splice(0, n)) {
      r.resolve(r.wanted() ? Buffer.alloc(BYTES_PER_BLOCK) : undefined);
    }
  };
  return { level, cascade, answer, waiting: () => queue.length };
}

function lookups(cascade: TierCascade) {
  const views = {
    config: {
      blocksPerChunk: 1,
      bytesPerBlock: BYTES_PER_BLOCK,
      groups: [{ index: 0, windowChunks: null, eagle: false }],
    },
    tier: { buffer: new SharedArrayBuffer(4 * CHUNKS * BYTES_PER_BLOCK) },
  } as unknown as RuntimeViews;
  let next = 0;
  const host = {
    prepareStore: (keys: bigint[]) => ({
      ok: true,
      keysToStore: keys,
      slots: keys.map(() => next++),
    }),
    completeStore: () => undefined,
  } as unknown as HostTier;
  return new LowerLookups(
    cascade,
    views,
    host,
    new Map(),
    () => undefined,
    () => undefined,
    () => 0,
  );
}

/** A full-attention prompt of CHUNKS chunks whose keys start at `base`: its hit is its prefix. */
function prompt(base: number): LookupView {
  const key = (_g: number, c: number) => BigInt(base + c);
  return {
    count: CHUNKS,
    key,
    prefixHit(present) {
      let c = 0;
      while (c < CHUNKS && present(key(0, c))) c += 1;
      return c;
    },
  };
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('the lower levels lookup budget', () => {
  it('does not cut short a resolution queued behind others while the levels answer', async () => {
    const { level, cascade, answer, waiting } = fakeLevels();
    const lower = lookups(cascade);
    const a = prompt(1_000);
    const b = prompt(2_000);
    expect(lower.mustWait(1, a)).toBe('retry');
    expect(lower.mustWait(2, b)).toBe('retry');
    await vi.advanceTimersByTimeAsync(0);
    expect(waiting()).toBe(2 * CHUNKS);
    // Eight answers every 50 ms: 80 reads take 500 ms, longer than the budget,
    // and no level is ever silent for it.
    while (waiting() > 0) {
      answer(8);
      await vi.advanceTimersByTimeAsync(50);
    }
    expect(lower.cutShort).toBe(0);
    expect(lower.mustWait(1, a)).toBeNull();
    expect(lower.mustWait(2, b)).toBeNull();
    expect(lower.finish(1).promoted.size).toBe(CHUNKS);
    expect(lower.finish(2).promoted.size).toBe(CHUNKS);
    expect(level.counters.discardedChunks).toBe(0);
    expect(lower.ended).toBe(2);
  });

  it('cuts short a resolution once the levels are silent for the budget, and counts what it had read as discarded', async () => {
    const { level, cascade, answer, waiting } = fakeLevels();
    const lower = lookups(cascade);
    const a = prompt(1_000);
    expect(lower.mustWait(1, a)).toBe('retry');
    await vi.advanceTimersByTimeAsync(0);
    answer(8);
    await vi.advanceTimersByTimeAsync(BUDGET_MS - 1);
    expect(lower.mustWait(1, a)).toBe('retry');
    // Silent for the budget since the last answer.
    await vi.advanceTimersByTimeAsync(1);
    expect(lower.cutShort).toBe(1);
    expect(lower.mustWait(1, a)).toBeNull();
    expect(lower.finish(1).promoted.size).toBe(0);
    // The rest are read no more; the eight that came back before the cut
    // wait for no answer any more: discarded, and counted.
    answer(waiting());
    await vi.advanceTimersByTimeAsync(0);
    expect(lower.ended).toBe(1);
    expect(level.counters.discardedChunks).toBe(8);
  });
});
