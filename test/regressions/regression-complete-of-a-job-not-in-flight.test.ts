// Regression (issue 10, item 2): LocalOffload.complete() of a job already
// completed, or never issued, drove a block's pin count to -1 before throwing
// an untyped AssertionError; the next copy of that block then read pin 0 while
// in flight, so the pool could hand the block out mid-copy (failure class F6).
// Now the job is checked (issued by this planner, not yet completed) before
// any pin or tier entry is touched, and the error is typed.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { GpuBlockPool } from '../../src/gpu-pool.js';
import type { StoreJob } from '../../src/job.js';
import { local, tokens } from '../helpers/local.js';

/** A facade with one request whose two chunks (blocks 11, 12) are ready. */
async function oneJob() {
  const lo = await local();
  const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
  lo.hash(h);
  lo.appendBlocks(h, 0, [11, 12]);
  lo.progress(h, 8);
  const [job] = lo.plan();
  return { lo, h, job: job! };
}

function pins(lo: { state: { pins: Int32Array } }): number[] {
  return Array.from(lo.state.pins);
}

describe('regression: complete of a job not in flight', () => {
  it('a second complete() of the same job is refused with InvalidArgumentError and changes nothing', async () => {
    const { lo, job } = await oneJob();
    lo.complete(job);
    const before = pins(lo);
    const tierUsed = lo.tier.stats().used;
    expect(() => lo.complete(job)).toThrow(InvalidArgumentError);
    expect(() => lo.complete(job, false)).toThrow(InvalidArgumentError);
    expect(pins(lo)).toEqual(before);
    expect(Math.min(...pins(lo))).toBe(0);
    expect(lo.tier.stats().used).toBe(tierUsed);
    expect(lo.counters.chunksTransferFailed).toBe(0);
  });

  it('complete() of a job never issued (a copy, a forged one, not an object) is refused; the real one still completes', async () => {
    const { lo, job } = await oneJob();
    const before = pins(lo);
    expect(before[11]).toBe(1);
    const forged: StoreJob = { ...job, chunks: job.chunks.map((c) => ({ ...c })) };
    expect(() => lo.complete(forged)).toThrow(InvalidArgumentError);
    expect(() => lo.complete({ ...job, jobId: job.jobId + 1 })).toThrow(InvalidArgumentError);
    expect(() => lo.complete(null as unknown as StoreJob)).toThrow(InvalidArgumentError);
    expect(() => lo.complete(7 as unknown as StoreJob)).toThrow(InvalidArgumentError);
    expect(() => lo.complete(job, 'yes' as unknown as boolean)).toThrow(InvalidArgumentError);
    expect(pins(lo)).toEqual(before);
    lo.complete(job);
    expect(pins(lo)[11]).toBe(0);
  });

  it('F6: after a refused double complete, a block in flight stays pinned and the pool will not hand it out', async () => {
    const { lo, h, job } = await oneJob();
    lo.complete(job);
    // A new chunk on the same block 11 is planned (re-appended after a preemption) and in flight.
    lo.preempt(h);
    lo.appendBlocks(h, 0, [11, 12, 13]);
    lo.progress(h, 8);
    lo.appendTokens(h, tokens(4, 9));
    lo.hash(h);
    lo.progress(h, 12);
    const inFlight = lo.plan();
    expect(inFlight).toHaveLength(1);
    const pinned = inFlight[0]!.chunks.flatMap((c) => c.blocks);
    expect(pinned.length).toBeGreaterThan(0);
    // The stale job is completed again: refused, so every in-flight pin holds.
    expect(() => lo.complete(job)).toThrow(InvalidArgumentError);
    for (const b of pinned) expect(lo.state.pins[b]).toBe(1);
    // A pool over the same pins quarantines rather than hands out a pinned block.
    const pool = new GpuBlockPool(lo.config.gpuBlocks, lo.state.pins);
    const all = pool.allocate(lo.config.gpuBlocks - 1 - pinned.length)!;
    for (const b of pinned) expect(all).not.toContain(b);
    lo.complete(inFlight[0]!);
  });
});
