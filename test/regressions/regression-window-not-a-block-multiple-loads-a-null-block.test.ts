// Regression: a sliding-window group whose window is not a multiple of its
// block size (9 tokens over 4-token blocks) could not load a hit. The load
// plan asks for the window in whole chunks (ceil(9 / 4) = 3), but vLLM's
// sliding-window allocator leaves the first of those blocks null (a token
// that far back is outside the window of the next token), and load() threw
// "block 0 is null but loaded". As vLLM does, a window's leading null blocks
// are now left out of the load (nothing is read into them and their tier
// entries are not protected); a null block after a non-null one, or in a
// full-attention group, is still refused.
import { describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { InvalidArgumentError } from '../../src/errors.js';
import type { LocalOffload } from '../../src/local.js';
import { loadHashing, promptKeys } from '../../src/hashing.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';

const CONFIG: ConfigInput = {
  groups: [
    { kind: 'full', tokensPerBlock: 4 },
    { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 9 },
  ],
  tokensPerHash: 4,
  maxRequests: 4,
  maxBlocksPerRequest: 64,
  gpuBlocks: 512,
  tierChunks: 256,
};

// 17 tokens: 4 whole chunks; the last token is recomputed, so 16 tokens may hit.
const PROMPT = tokens(17, 9);
let nextBlock = 1;

function storePrompt(lo: LocalOffload): void {
  const h = lo.open({ requestId: 1, promptTokens: PROMPT });
  lo.hash(h);
  for (let g = 0; g < 2; g += 1) {
    lo.appendBlocks(
      h,
      g,
      Array.from({ length: 5 }, () => nextBlock++),
    );
  }
  lo.progress(h, PROMPT.length);
  planAndComplete(lo);
  lo.finish(h);
  planAndComplete(lo);
  lo.release(h);
}

async function hitWithBlocks(swBlocks: (fresh: () => number) => number[]) {
  const lo = await local(CONFIG);
  storePrompt(lo);
  const answer = lo.lookup(PROMPT);
  if (answer.deferred) throw new Error('a stored prompt does not defer');
  expect(answer.hitTokens).toBe(16);
  const h = lo.open({ requestId: 2, promptTokens: PROMPT, hitChunks: answer.hitChunks });
  lo.hash(h);
  lo.appendBlocks(
    h,
    0,
    Array.from({ length: 4 }, () => nextBlock++),
  );
  lo.appendBlocks(
    h,
    1,
    swBlocks(() => nextBlock++),
  );
  return { lo, h, answer };
}

describe('regression: a window not a multiple of the block size loads a null block', () => {
  it("loads the window's non-null blocks and leaves the leading null block out, as vLLM does", async () => {
    // The window of token 16 covers tokens 8..16: blocks 2 and 3; vLLM's allocator nulls 0 and 1.
    const { lo, h, answer } = await hitWithBlocks((fresh) => [0, 0, fresh(), fresh()]);
    if (answer.deferred) throw new Error('unreachable');
    const job = lo.load(h, answer);
    const byGroup = (g: number) => job.chunks.filter((c) => c.group === g).map((c) => c.chunk);
    expect(byGroup(0)).toEqual([0, 1, 2, 3]);
    // ceil(9 / 4) = 3 chunks were planned (1..3); chunk 1's only block is null, so it is left out.
    expect(byGroup(1)).toEqual([2, 3]);
    for (const c of job.chunks) expect(c.blocks.every((b) => b !== 0)).toBe(true);
    expect(lo.tier.stats().reading).toBe(6);
    lo.completeLoad(job);
    expect(lo.tier.stats().reading).toBe(0);
  });

  it('still refuses a null block after a non-null one in the window, changing nothing', async () => {
    const { lo, h, answer } = await hitWithBlocks((fresh) => [0, fresh(), 0, fresh()]);
    if (answer.deferred) throw new Error('unreachable');
    expect(() => lo.load(h, answer)).toThrow(InvalidArgumentError);
    expect(lo.tier.stats().reading).toBe(0);
  });

  it('still refuses a null block in a full-attention group', async () => {
    const lo = await local(CONFIG);
    storePrompt(lo);
    const answer = lo.lookup(PROMPT);
    if (answer.deferred) throw new Error('unreachable');
    const h = lo.open({ requestId: 2, promptTokens: PROMPT, hitChunks: answer.hitChunks });
    lo.hash(h);
    lo.appendBlocks(h, 0, [0, nextBlock++, nextBlock++, nextBlock++]);
    lo.appendBlocks(h, 1, [0, 0, nextBlock++, nextBlock++]);
    expect(() => lo.load(h, answer)).toThrow(InvalidArgumentError);
    expect(lo.tier.stats().reading).toBe(0);
  });

  it("an external host's load of the same hit reads the window's non-null blocks, byte for byte", async () => {
    const rt = await OffloadRuntime.start({
      external: true,
      config: { ...CONFIG, blocksPerChunk: 1, bytesPerBlock: 64 },
    });
    try {
      const host = rt.external;
      const prompt = [...PROMPT];
      const keys = promptKeys(rt.config, await loadHashing(), prompt);
      const a = host.scheduler.open({ requestId: 1, promptTokens: prompt });
      for (let g = 0; g < 2; g += 1) {
        const blocks = host.pool.allocate(5)!;
        for (let p = 0; p < 4; p += 1) host.roles.writeBlock(blocks[p]!, keys[g]![p]!, p);
        host.allocator.appendBlocks(a, g, blocks);
      }
      host.scheduler.progress(a, prompt.length, 0);
      host.scheduler.finish(a);
      await host.whenDrained(a);
      host.release(a);
      let answer = await host.lookup(prompt);
      for (let tries = 0; answer.deferred && tries < 1000; tries += 1) {
        await new Promise((r) => setTimeout(r, 5));
        answer = await host.lookup(prompt);
      }
      if (answer.deferred) throw new Error('still deferred');
      expect(answer.hitTokens).toBe(16);
      const b = host.scheduler.open({
        requestId: 2,
        promptTokens: prompt,
        hitChunks: answer.hitChunks,
      });
      host.allocator.appendBlocks(b, 0, host.pool.allocate(4)!);
      host.allocator.appendBlocks(b, 1, [0, 0, ...host.pool.allocate(2)!]);
      // 4 full-attention blocks and the window's 2 non-null ones, each holding its key's bytes.
      const nullBlockWords = host.roles.gpu.subarray(0, 64 / 4);
      expect(nullBlockWords.every((w) => w === 0)).toBe(true);
      await expect(host.load(b, answer)).resolves.toEqual({
        ok: true,
        blocksLoaded: 6,
        mismatches: 0,
        loadedTokens: answer.hitTokens,
      });
      // Nothing was read into the null block the window's leading positions hold.
      expect(nullBlockWords.every((w) => w === 0)).toBe(true);
      host.scheduler.abort(b);
      await host.whenDrained(b);
      host.release(b);
    } finally {
      await rt.close();
    }
  }, 60_000);
});
