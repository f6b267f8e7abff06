// Regression: open() refused maxOffloadTokens: null with InvalidArgumentError,
// where vLLM treats None as "no cap" (its test
// test_max_offload_tokens_none_treated_as_unset: the request stores every
// chunk). null now means no cap, as an absent field; 0 still stores nothing
// and a cap still limits the stored chunks (vLLM's
// test_max_offload_tokens_zero_stores_nothing and _limits_stored_tokens),
// through the same geometry as those tests: 4-token blocks, 3 blocks per
// chunk, a 36-token prompt, one EOS token decoded.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import type { LocalOffload } from '../../src/local.js';
import { local, planAndComplete, range } from '../helpers/local.js';

const GEOMETRY = {
  groups: [{ kind: 'full' as const, tokensPerBlock: 4 }],
  blocksPerChunk: 3,
  tokensPerHash: 4,
  maxRequests: 2,
  maxBlocksPerRequest: 12,
  gpuBlocks: 32,
  tierChunks: 32,
  bytesPerBlock: 8,
};

/** Runs the request to its end; returns the GPU block offsets (request-relative) stored. */
function run(lo: LocalOffload, maxOffloadTokens: number | null | undefined): number[] {
  const h = lo.open({
    requestId: 1,
    promptTokens: new Array<number>(36).fill(0),
    ...(maxOffloadTokens === undefined ? {} : { maxOffloadTokens }),
  });
  const blocks = range(1, 10);
  lo.appendBlocks(h, 0, blocks);
  lo.hash(h);
  lo.progress(h, 0, 36);
  const stored: number[] = [];
  const take = () => {
    for (const j of planAndComplete(lo)) {
      for (const c of j.chunks) for (const b of c.blocks) stored.push(blocks.indexOf(b));
    }
  };
  take();
  lo.progress(h, 36);
  lo.appendTokens(h, [2]); // EOS
  lo.hash(h);
  lo.finish(h);
  lo.settle(h);
  take();
  expect(lo.drained(h)).toBe(true);
  return stored.sort((a, b) => a - b);
}

describe('regression: maxOffloadTokens null (vLLM None) was refused', () => {
  it('null is no cap: every chunk is stored, as when absent', async () => {
    expect(run(await local(GEOMETRY), null)).toEqual(range(0, 9));
    expect(run(await local(GEOMETRY), undefined)).toEqual(range(0, 9));
  });

  it('0 stores nothing; 24 stores the first two chunks (offsets 0-5)', async () => {
    expect(run(await local(GEOMETRY), 0)).toEqual([]);
    expect(run(await local(GEOMETRY), 24)).toEqual(range(0, 6));
  });

  it('a negative, fractional or non-number cap is still refused and opens nothing', async () => {
    const lo = await local(GEOMETRY);
    for (const cap of [-1, 24.5, '24', true, 1n]) {
      expect(() =>
        lo.open({ requestId: 1, promptTokens: [1, 2, 3, 4], maxOffloadTokens: cap as never }),
      ).toThrow(InvalidArgumentError);
    }
    expect(lo.scheduler.freeSlotCount).toBe(2);
  });
});
