// The prefix of a hit that counts as loaded after a load in which some chunks
// failed (loadedPrefixChunks, the rule behind loadFailurePolicy 'recompute').
// vLLM's rows, replayed with its figures: test_sync_load_failure and
// test_async_load_failure (a 100-block prompt, 99 blocks hit, invalid blocks
// {0, 98}, {50, 98}, {98}: the request's computed tokens become the first
// invalid block times the block size), and
// test_block_level_load_failure_fails_closed_with_multiple_groups (vLLM
// refuses block-level reports on a multi-group layout and recomputes the
// whole request; kvoff keeps a sound prefix where every group still holds
// what it needs, and recomputes from 0 where a window does not).
import { describe, expect, it } from 'vitest';
import { loadPlan, loadedPrefixChunks } from '../../src/lookup.js';

/** One chunk per block, as vLLM's rows count blocks (16 tokens each). */
const FULL = { tokensPerChunk: 16, tokensPerBlock: 16, windowChunks: null, eagle: false };
const WINDOW = (chunks: number) => ({ ...FULL, windowChunks: chunks });

/** The first failed chunk per group of a set of failed chunks per group (none: past the end). */
function firstFailed(hit: number, failed: readonly (readonly number[])[]): number[] {
  return failed.map((f) => Math.min(hit, ...f));
}

describe('loadedPrefixChunks: vLLM rows', () => {
  for (const invalid of [[0, 98], [50, 98], [98]]) {
    it(`100 blocks, 99 hit, invalid ${JSON.stringify(invalid)}: computed up to block ${Math.min(...invalid)}`, () => {
      const groups = [FULL];
      const plans = loadPlan(groups, 0, 99 * 16);
      expect(loadedPrefixChunks(groups, plans, firstFailed(99, [invalid]))).toBe(
        Math.min(...invalid),
      );
    });
  }

  it('a sound load keeps the whole hit', () => {
    const groups = [FULL, WINDOW(4)];
    const plans = loadPlan(groups, 0, 20 * 16);
    expect(loadedPrefixChunks(groups, plans, [20, 20])).toBe(20);
  });
});

describe('loadedPrefixChunks: groups with a window (vLLM fails these over to the whole request)', () => {
  it('a failure in the full-attention group of a hit longer than the window: 0 (the window below the cut was never loaded)', () => {
    const groups = [FULL, WINDOW(4)];
    const plans = loadPlan(groups, 0, 20 * 16);
    expect(plans[1]!.firstChunk).toBe(16);
    expect(loadedPrefixChunks(groups, plans, firstFailed(20, [[10], []]))).toBe(0);
  });

  it('a failure inside the window: 0 as well', () => {
    const groups = [FULL, WINDOW(4)];
    const plans = loadPlan(groups, 0, 20 * 16);
    expect(loadedPrefixChunks(groups, plans, firstFailed(20, [[], [18]]))).toBe(0);
  });

  it('a window that reaches chunk 0 keeps the sound prefix, the first failure of any group', () => {
    const groups = [FULL, WINDOW(8)];
    const plans = loadPlan(groups, 0, 6 * 16);
    expect(plans[1]!.firstChunk).toBe(0);
    expect(loadedPrefixChunks(groups, plans, firstFailed(6, [[4], []]))).toBe(4);
    expect(loadedPrefixChunks(groups, plans, firstFailed(6, [[5], [2]]))).toBe(2);
  });
});
