// Regression (issue 9, part 3): after an offer kvoff touched only the offered
// keys, and also when nothing was stored, so a request's prefix head aged out
// before its tail: with a 3-chunk host tier, A stores a0, B stores b0, A
// stores a1, C stores c0 -> a0 was evicted and A's prefix hit dropped to 0.
// vLLM (reference §5.6, §7.4) touches, after an offer that stored something,
// every key of a full-attention group (a windowed group: from the hit window
// on), so the head stays longest: b0 is evicted.
import { describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import type { LocalOffload } from '../../src/local.js';
import type { RequestHandle } from '../../src/roles/handle.js';
import type { OffloadTier } from '../../src/tier/types.js';
import { HostTier } from '../../src/tier/host-tier.js';
import { chunkIds, local, planAndComplete, tokens } from '../helpers/local.js';
import { ONE_GROUP } from '../helpers/configs.js';

const TIER_3: ConfigInput = { ...ONE_GROUP, tierChunks: 3 };

/** A request of `chunks` 4-token chunks whose tokens are hashed and blocks published. */
function open(lo: LocalOffload, id: number, chunks: number, salt: number, firstBlock: number) {
  const h = lo.open({ requestId: id, promptTokens: tokens(4 * chunks, salt) });
  lo.hash(h);
  lo.appendBlocks(
    h,
    0,
    Array.from({ length: chunks }, (_, i) => firstBlock + i),
  );
  return h;
}

function storeUpTo(lo: LocalOffload, h: RequestHandle, chunks: number): string[] {
  lo.progress(h, 0, 4 * chunks);
  return planAndComplete(lo).flatMap((j) => chunkIds(j).map((c) => `${j.requestId}:${c}`));
}

/** Records every touch call the planner makes. */
class RecordingTier extends HostTier implements OffloadTier {
  readonly touches: bigint[][] = [];
  override touch(keys: readonly bigint[]): void {
    this.touches.push([...keys]);
    super.touch(keys);
  }
}

describe("touch order: the LRU evicted the head of a request's prefix before its tail", () => {
  it('3-chunk tier: A a0, B b0, A a1, C c0 -> b0 is evicted, a0 and a1 stay', async () => {
    const lo = await local(TIER_3);
    const a = open(lo, 1, 2, 1, 10);
    const b = open(lo, 2, 1, 2, 20);
    const c = open(lo, 3, 1, 3, 30);
    const [a0, a1] = lo.keys(a, 0);
    const [b0] = lo.keys(b, 0);
    const [c0] = lo.keys(c, 0);
    expect(storeUpTo(lo, a, 1)).toEqual(['1:0:0']);
    expect(storeUpTo(lo, b, 1)).toEqual(['2:0:0']);
    expect(storeUpTo(lo, a, 2)).toEqual(['1:0:1']);
    expect(storeUpTo(lo, c, 1)).toEqual(['3:0:0']);
    expect(lo.tier.slotOf(b0!)).toBeUndefined();
    expect(lo.tier.slotOf(a0!)).toBeDefined();
    expect(lo.tier.slotOf(a1!)).toBeDefined();
    expect(lo.tier.slotOf(c0!)).toBeDefined();
  });

  it('no touch when the offer stored nothing (every chunk already present)', async () => {
    const tier = new RecordingTier(8);
    const lo = await local(ONE_GROUP, { tier });
    const a = open(lo, 1, 2, 1, 10);
    storeUpTo(lo, a, 2);
    expect(tier.touches).toEqual([lo.keys(a, 0)]);
    // Same tokens again: both chunks are present, the offer stores nothing.
    const d = open(lo, 2, 2, 1, 40);
    expect(storeUpTo(lo, d, 2)).toEqual([]);
    expect(lo.counters.chunksAlreadyPresent).toBe(2);
    expect(tier.touches).toHaveLength(1);
  });

  it('no touch when the tier could not allocate', async () => {
    const tier = new RecordingTier(1);
    const lo = await local(ONE_GROUP, { tier });
    const a = open(lo, 1, 2, 1, 10);
    lo.progress(a, 0, 8);
    lo.plan(); // two new chunks for a one-slot tier with nothing evictable: refused
    expect(lo.counters.allocationFailures).toBe(1);
    expect(tier.touches).toEqual([]);
  });

  it('one touch per group, in group order: full attention all keys, a window from hit - W on', async () => {
    const tier = new RecordingTier(64);
    const lo = await local(
      {
        groups: [
          { kind: 'full', tokensPerBlock: 4 },
          { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8 },
        ],
        tokensPerHash: 4,
        maxRequests: 4,
        maxBlocksPerRequest: 64,
        gpuBlocks: 256,
        tierChunks: 64,
      },
      { tier },
    );
    // Five chunks hit at admission (window 2 chunks): the window group touches from chunk 3.
    const h = lo.open({ requestId: 1, promptTokens: tokens(32), hitChunks: [5, 5] });
    lo.hash(h);
    lo.appendBlocks(
      h,
      0,
      Array.from({ length: 8 }, (_, i) => 10 + i),
    );
    lo.appendBlocks(
      h,
      1,
      Array.from({ length: 8 }, (_, i) => 30 + i),
    );
    lo.progress(h, 0, 32);
    expect(planAndComplete(lo).flatMap((j) => chunkIds(j))).toEqual([
      '0:5',
      '0:6',
      '0:7',
      '1:5',
      '1:6',
      '1:7',
    ]);
    expect(tier.touches).toEqual([lo.keys(h, 0), lo.keys(h, 1).slice(3)]);
  });
});
