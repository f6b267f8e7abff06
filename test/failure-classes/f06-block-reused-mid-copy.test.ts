// F6: a source block reused mid-copy (vLLM #31341, #48596; SGLang HiCache
// #28468; Dynamo #826).
//
// The sequence in those issues: a store copy is issued from a request's GPU
// blocks and queued; before it runs, the request is preempted (or aborted, or
// finishes) and its blocks go back to the allocator, which hands them to
// another request at once; that request's forward pass writes its own KV into
// them; then the queued copy runs and stores the other request's bytes under
// the first request's key. Nothing crashes: wrong KV is served later.
//
// Here: r1's 8-token prompt (2 chunks, one block each) gets blocks from a GPU
// block pool, its forward pass writes them, and a store pass issues the job.
// r1 is preempted and its blocks freed before the copy; r2 is admitted and
// allocates 2 blocks, writing its bytes into them; then the job's copy runs
// and the tier bytes are checked against their key. kvoff pins a job's source
// blocks, and the pool never hands out a pinned block (a freed pinned block
// waits in quarantine until the copy ends). The broken variant (the planner's
// unsafeSkipPins with the pool's unsafeIgnorePins, `--no-pins`) hands r1's
// blocks to r2 and the copy stores r2's bytes under r1's keys.
import { describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { copyChunkToTier, tierChunkMatches, writeComputedBlock } from '../../src/copy.js';
import { GpuBlockPool } from '../../src/gpu-pool.js';
import { fuzz } from '../../src/fuzz/run.js';
import { local, tokens } from '../helpers/local.js';
import { fuzzClass } from './helpers.js';
import { SMALL_ONE_GROUP } from '../helpers/configs.js';

const CONFIG: ConfigInput = { ...SMALL_ONE_GROUP, gpuBlocks: 8 };

async function reusedBeforeCopy(unsafe: boolean) {
  const lo = await local(CONFIG, unsafe ? { unsafeSkipPins: true } : {});
  const pool = new GpuBlockPool(lo.config.gpuBlocks, lo.state.pins, { unsafeIgnorePins: unsafe });
  const geo = { wordsPerBlock: lo.config.bytesPerBlock / 4, blocksPerChunk: 1 };
  const gpu = new Uint32Array(lo.config.gpuBlocks * geo.wordsPerBlock);
  const tier = new Uint32Array(lo.config.tierChunks * geo.wordsPerBlock);
  /** Allocates a request's 2 blocks and runs its prefill: each block gets its chunk's bytes. */
  const admit = (requestId: number) => {
    const h = lo.open({ requestId, promptTokens: tokens(8, 60 + requestId) });
    lo.hash(h);
    const keys = lo.keys(h, 0);
    const blocks = pool.allocate(2)!;
    blocks.forEach((b, c) => writeComputedBlock(gpu, geo, b, keys[c]!, c));
    lo.appendBlocks(h, 0, blocks);
    lo.progress(h, 0, 8);
    return { h, blocks };
  };
  const r1 = admit(1);
  const [job] = lo.plan(); // the copy of r1's chunks 0 and 1, queued
  const freed = lo.preempt(r1.h);
  pool.release(freed);
  const quarantinedWhileQueued = pool.quarantined;
  const r2 = admit(2);
  // The queued copy runs now; the check: the tier bytes are the expansion of their key.
  const mismatched: number[] = [];
  for (const c of job!.chunks) {
    copyChunkToTier(gpu, tier, geo, c);
    if (!tierChunkMatches(tier, geo, c.tierSlot, c.key, [0])) mismatched.push(c.chunk);
  }
  lo.complete(job!); // unpins
  pool.releaseUnpinned();
  return {
    r1Blocks: r1.blocks,
    r2Blocks: r2.blocks,
    mismatched,
    quarantinedWhileQueued,
    quarantinedAfter: pool.quarantined,
  };
}

describe('F6: a source block freed and reallocated before its copy finished', () => {
  it('kvoff: the freed blocks wait in quarantine until the copy ends; r2 gets others; the bytes match', async () => {
    const r = await reusedBeforeCopy(false);
    expect(r.r2Blocks.filter((b) => r.r1Blocks.includes(b))).toEqual([]);
    expect(r.mismatched).toEqual([]);
    expect(r.quarantinedWhileQueued).toBe(2); // held while the copy was queued...
    expect(r.quarantinedAfter).toBe(0); // ...and back to the free list once it ended
  });

  it("broken variant (no pins): r2 gets r1's blocks and the copy stores r2's bytes under r1's keys", async () => {
    const r = await reusedBeforeCopy(true);
    expect(r.r2Blocks.filter((b) => r.r1Blocks.includes(b)).sort()).toEqual([...r.r1Blocks].sort());
    expect(r.quarantinedWhileQueued).toBe(0);
    expect(r.mismatched).toEqual([0, 1]); // the check fails
  });

  it('fuzzer: without pins the oracle finds tier bytes that are not their key; with them, none', async () => {
    const broken = await fuzzClass('f06', 'broken', { schedules: 100 });
    expect(broken.violations).toBe(1);
    expect(broken.first?.invariant).toBe('mispairing');
    const kvoff = await fuzzClass('f06', 'kvoff', { schedules: 300 });
    expect(kvoff.violations).toBe(0);
  });

  it('fuzzer: without the re-validation after pinning, a block freed between snapshot and pins is copied (torn read)', async () => {
    const torn = await fuzz({
      policy: 'ready-prefix',
      strategy: 'random',
      pins: true,
      revalidate: false,
      watch: ['mispairing'],
      seed: 1,
      schedules: 3000,
      shrink: false,
    });
    expect(torn.violations).toBe(1);
  });
});
