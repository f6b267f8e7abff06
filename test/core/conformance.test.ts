// Conformance of the store path with vLLM after the seeds' fix: one scenario
// per behaviour, driven through the single-thread facade over the real shared
// state and role code.
import { describe, expect, it } from 'vitest';
import { LegacyAssertionError } from '../../src/errors.js';
import { chunkIds, local, planAndComplete, range, tokens } from '../helpers/local.js';
import { ONE_GROUP } from '../helpers/configs.js';

describe('seed regression: defer stores until block IDs are tracked', () => {
  it('stores the two ready chunks, then retries exactly chunk 3 when its block arrives', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(12) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [11, 12]); // three chunks token-ready, two block IDs tracked
    lo.progress(h, 0, 12);
    const first = lo.plan();
    expect(first).toHaveLength(1);
    expect(chunkIds(first[0])).toEqual(['0:0', '0:1']);
    expect(first[0]!.chunks.map((c) => c.blocks)).toEqual([[11], [12]]);
    expect(lo.cursor(h, 0)).toBe(2);
    lo.complete(first[0]!);

    lo.appendBlocks(h, 0, [13]);
    lo.progress(h, 12, 1);
    const second = lo.plan();
    expect(second).toHaveLength(1);
    expect(chunkIds(second[0])).toEqual(['0:2']);
    expect(second[0]!.chunks[0]!.blocks).toEqual([13]);
    expect(lo.cursor(h, 0)).toBe(3);
  });

  it('keys lag (symmetric): two hashed chunks stored, the third once its hash arrives', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(12) });
    lo.hash(h, 2);
    lo.appendBlocks(h, 0, [11, 12, 13]);
    lo.progress(h, 0, 12);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:0', '0:1']);
    expect(lo.cursor(h, 0)).toBe(2);
    expect(lo.plan()).toEqual([]); // nothing new: the lagging chunk is not skipped either
    expect(lo.cursor(h, 0)).toBe(2);
    lo.hash(h);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:2']);
    expect(lo.cursor(h, 0)).toBe(3);
  });

  it('counts the lagging chunk as deferred at each visit of its slot while it waits', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(12) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [11, 12]);
    lo.progress(h, 0, 12);
    planAndComplete(lo);
    expect(lo.counters.chunksDeferred).toBe(1);
    // Nothing published since: the pass does not visit the slot (its dirty bit is down).
    planAndComplete(lo);
    expect(lo.counters.chunksDeferred).toBe(1);
    expect(lo.counters.requestsVisited).toBe(1);
    // A publication that does not make the chunk ready: visited again, deferred again.
    lo.progress(h, 0, 12);
    planAndComplete(lo);
    expect(lo.counters.chunksDeferred).toBe(2);
    expect(lo.counters.requestsVisited).toBe(2);
  });
});

describe('lag in different groups', () => {
  it('keys lag in one group and blocks in the other; each cursor moves on its own', async () => {
    const lo = await local({
      ...ONE_GROUP,
      groups: [
        { kind: 'full', tokensPerBlock: 4 },
        { kind: 'full', tokensPerBlock: 8 },
      ],
    });
    const h = lo.open({ requestId: 1, promptTokens: tokens(32) });
    lo.hash(h, 6); // 6 hashes: group 0 has 6 keys, group 1 has 3
    lo.appendBlocks(h, 0, range(1, 9)); // 8 blocks: group 0 is key-bound at 6
    lo.appendBlocks(h, 1, [100, 101]); // group 1 is block-bound at 2 (token chunks 4, keys 3)
    lo.progress(h, 0, 32);
    const [job] = planAndComplete(lo);
    expect(chunkIds(job)).toEqual(['0:0', '0:1', '0:2', '0:3', '0:4', '0:5', '1:0', '1:1']);
    expect([lo.cursor(h, 0), lo.cursor(h, 1)]).toEqual([6, 2]);
    lo.hash(h);
    lo.appendBlocks(h, 1, [102, 103]);
    const [next] = planAndComplete(lo);
    expect(chunkIds(next)).toEqual(['0:6', '0:7', '1:2', '1:3']);
    expect([lo.cursor(h, 0), lo.cursor(h, 1)]).toEqual([8, 4]);
  });
});

describe('multi-block chunks', () => {
  it('a partially tracked chunk waits for its last block (bpc 3, 8 blocks for 3 chunks)', async () => {
    const lo = await local({ ...ONE_GROUP, blocksPerChunk: 3 });
    const h = lo.open({ requestId: 1, promptTokens: tokens(36) });
    lo.hash(h);
    lo.appendBlocks(h, 0, range(11, 19)); // 8 blocks: floor(8/3) = 2 chunks
    lo.progress(h, 0, 36);
    const [job] = planAndComplete(lo);
    expect(chunkIds(job)).toEqual(['0:0', '0:1']);
    expect(job!.chunks.map((c) => c.blocks)).toEqual([
      [11, 12, 13],
      [14, 15, 16],
    ]);
    expect(lo.cursor(h, 0)).toBe(2);
    lo.appendBlocks(h, 0, [19]);
    const [next] = planAndComplete(lo);
    expect(next!.chunks.map((c) => c.blocks)).toEqual([[17, 18, 19]]);
    expect(lo.cursor(h, 0)).toBe(3);
  });
});

describe('hybrid groups', () => {
  it('groups with different block sizes chunk the same tokens differently', async () => {
    const lo = await local({
      ...ONE_GROUP,
      groups: [
        { kind: 'full', tokensPerBlock: 4 },
        { kind: 'full', tokensPerBlock: 16 },
      ],
      blocksPerChunk: 2,
    });
    const h = lo.open({ requestId: 1, promptTokens: tokens(64) });
    lo.hash(h);
    lo.appendBlocks(h, 0, range(1, 17));
    lo.appendBlocks(h, 1, range(100, 104));
    lo.progress(h, 0, 64);
    const [job] = planAndComplete(lo);
    // group 0: 8 tokens per chunk -> 8 chunks; group 1: 32 tokens per chunk -> 2 chunks
    expect(job!.chunks.filter((c) => c.group === 0)).toHaveLength(8);
    expect(job!.chunks.filter((c) => c.group === 1).map((c) => c.blocks)).toEqual([
      [100, 101],
      [102, 103],
    ]);
    // Keys differ across groups even when built from the same hash.
    const keys = new Set(job!.chunks.map((c) => c.key));
    expect(keys.size).toBe(10);
  });
});

describe('sliding window', () => {
  it('skips a chunk whose deciding block is the null block and stores only non-null blocks', async () => {
    const lo = await local({
      ...ONE_GROUP,
      groups: [
        { kind: 'full', tokensPerBlock: 4 },
        { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8 },
      ],
      blocksPerChunk: 2,
    });
    const h = lo.open({ requestId: 1, promptTokens: tokens(32) });
    lo.hash(h);
    lo.appendBlocks(h, 0, range(1, 9));
    lo.appendBlocks(h, 1, [0, 0, 0, 21, 22, 23, 24, 25]); // SW manager skipped positions 0..2
    lo.progress(h, 0, 32);
    const [job] = planAndComplete(lo);
    const sw = job!.chunks.filter((c) => c.group === 1);
    expect(sw.map((c) => c.chunk)).toEqual([1, 2, 3]); // chunk 0's deciding block (pos 1) is null
    expect(sw[0]!.blocks).toEqual([21]); // chunk 1 stores its non-null block only
    expect(lo.cursor(h, 1)).toBe(4);
    expect(lo.counters.chunksSkippedNull).toBe(1);
  });

  it('a block nulled after it slid out of the window is never used as a source', async () => {
    const lo = await local({
      ...ONE_GROUP,
      groups: [{ kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 4 }],
    });
    const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [5, 6, 7, 8]);
    lo.progress(h, 0, 16);
    expect(lo.nullBlock(h, 0, 1)).toBe(6);
    const [job] = planAndComplete(lo);
    expect(chunkIds(job)).toEqual(['0:0', '0:2', '0:3']);
  });
});

describe('EAGLE trailing chunk', () => {
  const EAGLE = {
    ...ONE_GROUP,
    groups: [{ kind: 'full' as const, tokensPerBlock: 4, eagle: true }],
  };

  it('holds the trailing chunk back while decoding and stores it at finish', async () => {
    const lo = await local(EAGLE);
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    lo.appendBlocks(h, 0, [1, 2, 3, 4]);
    lo.progress(h, 0, 8); // prefill: the trailing chunk is stable and stored
    lo.hash(h);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:0', '0:1']);
    lo.appendTokens(h, tokens(9, 1).slice(0, 9)); // decode 9 tokens: 17 known
    lo.hash(h);
    lo.progress(h, 16, 1); // offloadable 17 > prompt: 4 token chunks, less the trailing one
    expect(lo.groupProgress(h, 0).tokenChunks).toBe(3);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:2']);
    lo.finish(h); // horizon max(prompt, 17 - 1) = 16 -> 4 chunks, exclusion lifted
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:3']);
    expect(lo.cursor(h, 0)).toBe(4);
  });

  it('the cursor never moves back at the prefill to decode transition', async () => {
    const lo = await local(EAGLE);
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2, 3]);
    lo.progress(h, 0, 8);
    planAndComplete(lo);
    expect(lo.cursor(h, 0)).toBe(2);
    lo.appendTokens(h, [1, 2]);
    lo.progress(h, 8, 2); // offloadable 10 > 8: 2 token chunks - 1 = 1 < cursor
    expect(lo.plan()).toEqual([]);
    expect(lo.cursor(h, 0)).toBe(2);
  });
});

describe('preemption', () => {
  it('mid-prefill: blocks cleared, cursor kept, chunks come back once blocks are re-appended', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(24) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2, 3]);
    lo.progress(h, 0, 12);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:0', '0:1', '0:2']);
    expect(lo.preempt(h)).toEqual([1, 2, 3]);
    expect(lo.plan()).toEqual([]);
    expect(lo.cursor(h, 0)).toBe(3);
    // Re-admitted (recompute): fresh blocks, progress from zero.
    lo.appendBlocks(h, 0, [7, 8, 9, 10, 11, 12]);
    lo.progress(h, 0, 24);
    const [job] = planAndComplete(lo);
    expect(chunkIds(job)).toEqual(['0:3', '0:4', '0:5']);
    expect(job!.chunks.map((c) => c.blocks[0])).toEqual([10, 11, 12]);
  });
});

describe('aborts', () => {
  it('queued abort with no blocks yields nothing and no error', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(12) });
    lo.hash(h);
    lo.abort(h);
    expect(lo.plan()).toEqual([]);
    expect(lo.counters.jobs).toBe(0);
    expect(lo.release(h)).toEqual([]);
  });

  it('abort after partial progress stores only computed chunks', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(24) });
    lo.hash(h);
    lo.appendBlocks(h, 0, range(1, 7));
    lo.progress(h, 8, 16); // 8 computed, 16 more scheduled but never run
    lo.abort(h);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:0', '0:1']);
    expect(lo.cursor(h, 0)).toBe(2);
  });
});

describe('finish', () => {
  it('the last sampled token is not stored: a chunk completed only by it stays out', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2, 3]);
    lo.progress(h, 0, 8);
    planAndComplete(lo);
    lo.appendTokens(h, [5, 6, 7, 8]); // 12 tokens known; the 12th was sampled last, KV never written
    lo.hash(h);
    lo.progress(h, 11, 1);
    lo.finish(h);
    expect(lo.plan()).toEqual([]); // horizon max(8, 11) = 11 -> 2 chunks
    expect(lo.cursor(h, 0)).toBe(2);
  });

  it('never below the prompt', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(12) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2, 3]);
    lo.progress(h, 12, 0);
    lo.finish(h); // 12 known tokens, all prompt: horizon max(12, 11) = 12
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:0', '0:1', '0:2']);
  });
});

describe('tier allocation failure', () => {
  it('leaves the cursor unchanged and offers the same chunks again', async () => {
    const lo = await local({ ...ONE_GROUP, tierChunks: 2 });
    const a = lo.open({ requestId: 1, promptTokens: tokens(8, 1) });
    lo.hash(a);
    lo.appendBlocks(a, 0, [1, 2]);
    lo.progress(a, 0, 8);
    const [held] = lo.plan(); // fills the tier with 2 entries still being written
    const b = lo.open({ requestId: 2, promptTokens: tokens(8, 2) });
    lo.hash(b);
    lo.appendBlocks(b, 0, [3, 4]);
    lo.progress(b, 0, 8);
    expect(lo.plan()).toEqual([]);
    expect(lo.counters.allocationFailures).toBe(1);
    expect(lo.cursor(b, 0)).toBe(0);
    lo.complete(held!); // a's entries become readable, hence evictable
    const [retry] = planAndComplete(lo);
    expect(chunkIds(retry)).toEqual(['0:0', '0:1']);
    expect(retry!.requestId).toBe(2);
    expect(lo.cursor(b, 0)).toBe(2);
  });
});

describe('shared prefix', () => {
  it('two requests sharing a prefix store it once', async () => {
    const lo = await local();
    const prefix = tokens(8, 3);
    const a = lo.open({ requestId: 1, promptTokens: [...prefix, ...tokens(4, 4)] });
    const b = lo.open({ requestId: 2, promptTokens: [...prefix, ...tokens(4, 5)] });
    for (const [h, ids] of [
      [a, [1, 2, 3]],
      [b, [4, 5, 6]],
    ] as const) {
      lo.hash(h);
      lo.appendBlocks(h, 0, ids);
      lo.progress(h, 0, 12);
    }
    expect(lo.keys(a, 0).slice(0, 2)).toEqual(lo.keys(b, 0).slice(0, 2));
    const jobs = planAndComplete(lo);
    expect(jobs.map(chunkIds)).toEqual([['0:0', '0:1', '0:2'], ['0:2']]);
    expect(lo.counters.chunksAlreadyPresent).toBe(2);
    expect(lo.cursor(b, 0)).toBe(3);
    expect(lo.tier.stats().used).toBe(4);
  });
});

describe('policies on the seed inputs', () => {
  async function seedRun(policy: 'ready-prefix' | 'legacy-assert' | 'legacy-zip') {
    const lo = await local(ONE_GROUP, { policy });
    const h = lo.open({ requestId: 1, promptTokens: tokens(12) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [11, 12]);
    lo.progress(h, 0, 12);
    const stored: string[] = [];
    for (const j of planAndComplete(lo)) stored.push(...chunkIds(j));
    lo.appendBlocks(h, 0, [13]);
    lo.progress(h, 12, 1);
    for (const j of planAndComplete(lo)) stored.push(...chunkIds(j));
    return stored;
  }

  it('ready-prefix stores every chunk', async () => {
    expect(await seedRun('ready-prefix')).toEqual(['0:0', '0:1', '0:2']);
  });
  it('legacy-assert throws the old length assertion', async () => {
    await expect(seedRun('legacy-assert')).rejects.toBeInstanceOf(LegacyAssertionError);
  });
  it('legacy-zip leaves chunk 3 as a permanent hole', async () => {
    expect(await seedRun('legacy-zip')).toEqual(['0:0', '0:1']);
  });
});

describe('failed transfer', () => {
  it('drops the reservation, unpins, and counts the chunks instead of losing them silently', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2]);
    lo.progress(h, 0, 8);
    const [job] = lo.plan();
    expect(Atomics.load(lo.state.pins, 1)).toBe(1);
    lo.complete(job!, false);
    expect(lo.counters.chunksTransferFailed).toBe(2);
    expect(lo.tier.lookup(job!.chunks.map((c) => c.key))).toBe(0);
    expect(lo.tier.stats().used).toBe(0);
    expect([Atomics.load(lo.state.pins, 1), Atomics.load(lo.state.pins, 2)]).toEqual([0, 0]);
  });
});

describe('final pass under hasher lag', () => {
  it('an ended request waits for its lagging keys instead of draining without them', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
    lo.hash(h, 2);
    lo.appendBlocks(h, 0, [1, 2, 3, 4]);
    lo.progress(h, 16, 0);
    lo.finish(h);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:0', '0:1']);
    expect(lo.drained(h)).toBe(false); // chunks 2 and 3 are token-ready, their keys lag
    expect(lo.plan()).toEqual([]);
    expect(lo.drained(h)).toBe(false);
    lo.hash(h);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:2', '0:3']);
    expect(lo.drained(h)).toBe(true);
    expect(lo.counters.chunksDroppedUnready).toBe(0);
  });

  it('a stalled hasher cannot hold the blocks forever: after the bound the rest is counted as dropped', async () => {
    const { FINAL_WAIT_MS_MAX } = await import('../../src/planner.js');
    let nowMs = 0;
    const lo = await local(undefined, { now: () => nowMs });
    const h = lo.open({ requestId: 1, promptTokens: tokens(12) });
    lo.hash(h, 1);
    lo.appendBlocks(h, 0, [1, 2, 3]);
    lo.progress(h, 12, 0);
    lo.abort(h);
    planAndComplete(lo);
    nowMs = FINAL_WAIT_MS_MAX - 1;
    lo.plan();
    expect(lo.drained(h)).toBe(false);
    nowMs = FINAL_WAIT_MS_MAX;
    lo.plan();
    expect(lo.drained(h)).toBe(true);
    expect(lo.counters.chunksDroppedUnready).toBe(2);
  });
});
