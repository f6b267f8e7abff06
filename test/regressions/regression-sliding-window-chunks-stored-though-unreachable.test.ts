// Regression (issue 9, part 2): kvoff stored every sliding-window chunk, while
// vLLM stores only those that can ever serve a hit (reference §2.3, §5.5.3):
// hits are aligned to the full-attention chunk, so in each segment of A
// sliding-window chunks only the trailing W (+1 with EAGLE) are reachable.
// The rest are passed by the cursor, counted as chunksUnreachable, never holes.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import type { ConfigInput } from '../../src/config.js';
import { alignmentChunks, storeReachable } from '../../src/ready.js';
import { fuzz } from '../../src/fuzz/run.js';
import { specChunkReachable } from '../../src/fuzz/spec/ready-spec.js';
import { scenarioFromSeed } from '../../src/fuzz/scenario.js';
import { chunkIds, local, planAndComplete, tokens } from '../helpers/local.js';
import { oneThreadLoops } from '../helpers/one-thread-loops.js';

/** Reference §2.3: full-attention block 16, sliding-window block 4, window 8, 1 block per chunk. */
const SECTION_2_3: ConfigInput = {
  groups: [
    { kind: 'full', tokensPerBlock: 16 },
    { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8 },
  ],
  blocksPerChunk: 1,
  tokensPerHash: 4,
  maxRequests: 4,
  maxBlocksPerRequest: 64,
  gpuBlocks: 256,
  tierChunks: 64,
};

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from }, (_, i) => from + i);
}

describe('sliding-window chunks stored though no hit can reach them', () => {
  it('alignment of the §2.3 example: A = 4, W = 2; none for full attention', () => {
    const config = resolveConfig(SECTION_2_3);
    expect(alignmentChunks(config.groups[1]!, config)).toBe(4);
    expect(config.groups[1]!.windowChunks).toBe(2);
    expect(alignmentChunks(config.groups[0]!, config)).toBeNull();
  });

  it('the §2.3 example stores exactly sliding-window chunks 2, 3, 6, 7 of 0-7', async () => {
    const lo = await local(SECTION_2_3);
    const h = lo.open({ requestId: 1, promptTokens: tokens(32) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2]);
    lo.appendBlocks(h, 1, range(10, 18));
    lo.progress(h, 0, 32);
    const jobs = planAndComplete(lo);
    expect(jobs).toHaveLength(1);
    expect(chunkIds(jobs[0])).toEqual(['0:0', '0:1', '1:2', '1:3', '1:6', '1:7']);
    expect(lo.counters.chunksUnreachable).toBe(4);
    expect(lo.cursor(h, 1)).toBe(8); // passed, never offered again
    lo.finish(h);
    lo.plan();
    expect(lo.drained(h)).toBe(true);
    expect(lo.counters.chunksDroppedUnready).toBe(0);
  });

  it('with EAGLE on the sliding-window group the tail is W + 1: chunks 1-3 and 5-7', async () => {
    const lo = await local({
      ...SECTION_2_3,
      groups: [
        { kind: 'full', tokensPerBlock: 16 },
        { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8, eagle: true },
      ],
    });
    const h = lo.open({ requestId: 1, promptTokens: tokens(32) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2]);
    lo.appendBlocks(h, 1, range(10, 18));
    lo.progress(h, 0, 32);
    const sw = chunkIds(planAndComplete(lo)[0]).filter((c) => c.startsWith('1:'));
    expect(sw).toEqual(['1:1', '1:2', '1:3', '1:5', '1:6', '1:7']);
    expect(lo.counters.chunksUnreachable).toBe(2);
  });

  it('a partial last segment is stored early (over-store), as vLLM does', async () => {
    const lo = await local(SECTION_2_3);
    const h = lo.open({ requestId: 1, promptTokens: tokens(32) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2]);
    lo.appendBlocks(h, 1, range(10, 16)); // ready 6 of 8 sliding-window chunks
    lo.progress(h, 0, 32);
    const first = chunkIds(planAndComplete(lo)[0]).filter((c) => c.startsWith('1:'));
    // Segment [4, 8) is partial at ready 6: seg_len 2 <= tail 2, so 4 and 5 are reachable now.
    expect(first).toEqual(['1:2', '1:3', '1:4', '1:5']);
    lo.appendBlocks(h, 1, [16, 17]);
    const second = chunkIds(planAndComplete(lo)[0]);
    expect(second).toEqual(['1:6', '1:7']);
    expect(lo.counters.chunksUnreachable).toBe(2);
  });

  it('no chunk is judged unreachable that a load hit can read (property, against the independent specification)', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(8, 16, 32), // full-attention tokens per block
        fc.constantFrom(2, 4), // sliding-window tokens per block
        fc.integer({ min: 1, max: 16 }), // window in tokens
        fc.boolean(), // EAGLE on the sliding-window group
        fc.integer({ min: 0, max: 64 }), // chunk
        fc.integer({ min: 1, max: 64 }), // ready chunks
        (faBlock, swBlock, windowTokens, eagle, chunk, ready) => {
          if (chunk >= ready) return; // only chunks below the ready prefix are judged
          const config = resolveConfig({
            ...SECTION_2_3,
            groups: [
              { kind: 'full', tokensPerBlock: faBlock },
              { kind: 'sliding-window', tokensPerBlock: swBlock, windowTokens, eagle },
            ],
            tokensPerHash: 2,
          });
          const g = config.groups[1]!;
          if (!storeReachable(g, alignmentChunks(g, config), chunk, ready))
            expect(specChunkReachable(config, g, chunk)).toBe(false);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('the fuzzer draws the aligned geometry and finds no hole there', async () => {
    const seeds: number[] = [];
    for (let seed = 0; seeds.length < 40 && seed < 5000; seed += 1) {
      if (scenarioFromSeed(seed).geometry === 'hybrid-align') seeds.push(seed);
    }
    expect(seeds).toHaveLength(40);
    for (const strategy of ['random', 'pct'] as const) {
      let schedules = 0;
      for (const seed of seeds) {
        const r = await fuzz({ policy: 'ready-prefix', strategy, pins: true, seed, schedules: 1 });
        expect(r.violations, `${strategy} seed ${seed}`).toBe(0);
        schedules += r.schedules;
      }
      expect(schedules).toBe(40);
    }
  });
});

describe('sliding-window chunks stored though no hit can reach them (runtime loops, one thread)', () => {
  it("the runtime's store loop passes them too: counted as unreachable, no holes, every entry verifies", async () => {
    const loops = await oneThreadLoops({
      config: { ...SECTION_2_3, maxRequests: 8, gpuBlocks: 1024, tierChunks: 512 },
      engine: {
        stepMs: 0,
        stepTokenBudget: 512, // a whole prompt per step: many chunks become ready at once
        abortQueuedRate: 0,
        abortRunningRate: 0,
        seed: 11,
        loadFromTier: false,
      },
      engineClock: 'wall',
      allocatorLag: { publishDelayMs: 0, jitterMs: 0, seed: 11 },
      hashesPerWake: 64,
      // The store plans before the allocator handles this step's window nulling.
      storeBeforeAllocator: true,
    });
    const { allocator, drained, ended, store } = loops;
    const n = 8;
    for (let i = 1; i <= n; i += 1) {
      loops.submit({ requestId: i, promptLength: 100 + 13 * i, maxDecodeTokens: 4 });
    }
    loops.runUntil(() => ended.length >= n, 200_000);
    expect(ended).toHaveLength(n);
    loops.drainLeftovers();
    // About half of the sliding-window chunks (A = 4, tail 2) are passed as unreachable.
    expect(store.planner.counters.chunksUnreachable).toBeGreaterThan(0);
    const report = store.verify();
    expect(report.mismatches).toBe(0);
    expect(report.holes).toBe(0);
    expect(drained).toHaveLength(n);
    for (const d of drained) {
      expect(d.holes).toBe(0);
      expect(d.chunksStored + d.chunksCounted).toBe(d.tokenChunks);
    }
    expect(allocator.pool.inUse).toBe(0);
  });
});
