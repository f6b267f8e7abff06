// Regression: the allocator answers one step's allocation with every block ID
// in a single ring record (at most 131,071 words). The engine sized a step
// only by stepTokenBudget (valid up to 2^24 tokens) and the pool, so a large
// budget over small blocks (here 150,000 one-token blocks in one prefill step)
// made the allocator throw "record: at most 131071 words" and the whole
// runtime failed (WorkerFailedError). A step now takes at most the tokens
// whose new blocks fit one answer; the prefill simply takes more steps. The
// hit allocation of a load is bounded the same way (its answer carries three
// header words, one more than the load record the lookup was sized for).
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { RINGS } from '../../src/runtime/thread-words.js';
import { lookupTokensThatFit } from '../../src/runtime/lookup-record.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { NO_LEAKS } from '../helpers/runtime.js';

/** One-token blocks: a block ID per prompt token. */
const TINY_BLOCKS = {
  groups: [{ kind: 'full' as const, tokensPerBlock: 1 }],
  blocksPerChunk: 16,
  tokensPerHash: 1,
  maxRequests: 2,
  maxBlocksPerRequest: 200_000,
  gpuBlocks: 400_000,
  tierChunks: 20_000,
  bytesPerBlock: 8,
};

describe('regression: a large step allocation killed the allocator', () => {
  it('a 150,000-token prefill with stepTokenBudget 2^20 finishes, stores every chunk, then hits', async () => {
    const rt = await OffloadRuntime.start({
      config: TINY_BLOCKS,
      simulator: { stepTokenBudget: 1 << 20 },
      closeTimeoutMs: 30_000,
    });
    try {
      const first = await rt.submit({ promptLength: 150_000, prefixId: 1, maxDecodeTokens: 2 });
      expect(first.status).toBe('finished');
      expect(first.holes).toBe(0);
      expect(first.chunksStored).toBe(Math.floor(150_000 / 16));
      const second = await rt.submit({ promptLength: 150_000, prefixId: 1, maxDecodeTokens: 2 });
      expect(second.status).toBe('finished');
      expect(second.hitChunks).toBeGreaterThan(0);
      expect(rt.failedWith).toBeUndefined();
    } finally {
      await rt.close();
    }
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  }, 120_000);

  it("a lookup's hit blocks, with the allocator answer's three header words, fit one answer record", () => {
    const answerWordsMax = RINGS.allocAnswer.words / 2 - 1;
    const recordWordsMax = RINGS.storeRequest.words / 2 - 1;
    for (const blocksPerChunk of [1, 2, 3, 16]) {
      const config = resolveConfig({ ...TINY_BLOCKS, blocksPerChunk });
      const tokens = lookupTokensThatFit(config, 10_000_000, recordWordsMax);
      const hitBlocks = Math.floor(tokens / config.groups[0]!.tokensPerChunk) * blocksPerChunk;
      expect(3 + hitBlocks, `bpc ${blocksPerChunk}`).toBeLessThanOrEqual(answerWordsMax);
    }
  });
});
