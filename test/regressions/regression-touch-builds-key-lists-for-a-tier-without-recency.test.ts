// Regression: after every store the planner read every key of the request
// into a fresh array for tier.touch, even for a tier with no recency order
// (the design benchmarks' accept-all tier, whose touch did nothing). With a
// request storing one chunk per pass that was quadratic in the prompt and
// most of the store's time per job. `touch` is now optional in OffloadTier:
// a tier without it gets no touch calls and the planner reads no keys for it,
// while a tier with it still gets every key, group by group, after each store.
import { describe, expect, it } from 'vitest';
import { HostTier } from '../../src/tier/host-tier.js';
import type { OffloadTier } from '../../src/tier/types.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';
import { ONE_GROUP } from '../helpers/configs.js';

/** A host tier that hides its touch: a tier with no recency order. */
function withoutTouch(inner: HostTier): OffloadTier {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'touch') return undefined;
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

class CountingTier extends HostTier {
  readonly touched: bigint[][] = [];
  override touch(keys: readonly bigint[]): void {
    this.touched.push([...keys]);
    super.touch(keys);
  }
}

async function storeChunkByChunk(tier: OffloadTier, chunks: number): Promise<number> {
  const lo = await local(ONE_GROUP, { tier });
  const h = lo.open({ requestId: 1, promptTokens: tokens(4 * chunks, 3) });
  lo.hash(h);
  lo.appendBlocks(
    h,
    0,
    Array.from({ length: chunks }, (_, i) => 1 + i),
  );
  let stored = 0;
  for (let c = 1; c <= chunks; c += 1) {
    lo.progress(h, 0, 4 * c);
    for (const job of planAndComplete(lo)) stored += job.chunks.length;
  }
  return stored;
}

describe('regression: touch builds key lists for a tier without recency', () => {
  it('stores every chunk through a tier without touch, and the tier is never asked to touch', async () => {
    const inner = new CountingTier(64);
    expect(await storeChunkByChunk(withoutTouch(inner), 8)).toBe(8);
    expect(inner.touched).toHaveLength(0);
    expect(inner.stats().stores).toBe(8);
  });

  it('still touches every key after each store for a tier with recency', async () => {
    const tier = new CountingTier(64);
    expect(await storeChunkByChunk(tier, 8)).toBe(8);
    // One touch per store, each with all 8 keys the hasher published (the whole prompt).
    expect(tier.touched.map((k) => k.length)).toEqual([8, 8, 8, 8, 8, 8, 8, 8]);
    expect(new Set(tier.touched[0]).size).toBe(8);
    for (const t of tier.touched) expect(t).toEqual(tier.touched[0]);
  });
});
