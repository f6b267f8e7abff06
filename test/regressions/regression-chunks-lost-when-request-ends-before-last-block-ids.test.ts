// Regression (issue 9, part 1): chunks were lost silently when a request ended
// before its last block IDs were published. The final pass drained the
// request at once, a later append was accepted, chunks 2-3 were never stored
// and no counter said so. Now the allocator settles a generation's blocks
// (its own word), the final pass waits (bounded) for blocks and keys to
// settle, an append after settle is refused, and what never came is counted.
import { describe, expect, it } from 'vitest';
import {
  BlocksSettledError,
  IllegalTransitionError,
  InvalidArgumentError,
} from '../../src/errors.js';
import { fuzz } from '../../src/fuzz/run.js';
import { chunkIds, local, planAndComplete, tokens } from '../helpers/local.js';
import type { LocalOffload } from '../../src/local.js';
import type { RequestHandle } from '../../src/roles/handle.js';

/** The sequence up to the end: 4 keys, blocks of chunks 0-1 only, chunks 0-1 stored, finish. */
function endBeforeLastBlocks(lo: LocalOffload): RequestHandle {
  const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
  lo.hash(h);
  lo.appendBlocks(h, 0, [1, 2]);
  lo.progress(h, 0, 16);
  expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:0', '0:1']);
  lo.finish(h);
  return h;
}

function dropped(lo: LocalOffload): number {
  const c = lo.counters;
  return c.chunksDroppedUnready + c.chunksDroppedForCapacity + c.chunksTransferFailed;
}

describe('chunks lost when a request ends before its last block IDs are published (facade)', () => {
  it('the final pass waits for the late blocks and stores chunks 2-3', async () => {
    const lo = await local();
    const h = endBeforeLastBlocks(lo);
    expect(lo.plan()).toEqual([]);
    expect(lo.drained(h)).toBe(false); // chunks 2-3 are token-ready; their blocks are not settled
    lo.appendBlocks(h, 0, [3, 4]);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:2', '0:3']);
    expect(lo.drained(h)).toBe(true);
    expect(dropped(lo)).toBe(0);
    expect(lo.counters.chunksStored).toBe(4);
  });

  it('late blocks published, then settled: stored, not counted', async () => {
    const lo = await local();
    const h = endBeforeLastBlocks(lo);
    lo.plan();
    lo.appendBlocks(h, 0, [3, 4]);
    lo.settle(h);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:2', '0:3']);
    expect(lo.drained(h)).toBe(true);
    expect(dropped(lo)).toBe(0);
  });

  it('blocks settled without them: chunks 2-3 are counted as dropped (unready) at the next pass', async () => {
    const lo = await local();
    const h = endBeforeLastBlocks(lo);
    lo.plan();
    expect(lo.drained(h)).toBe(false);
    lo.settle(h);
    expect(lo.plan()).toEqual([]);
    expect(lo.drained(h)).toBe(true);
    expect(lo.counters.chunksDroppedUnready).toBe(2);
    expect(lo.counters.chunksStored + dropped(lo)).toBe(4);
  });

  it('blocks that never come and are never settled: counted once the bound (in time, not visits) is reached', async () => {
    let nowMs = 0;
    const lo = await local(undefined, { finalWaitMsMax: 5, now: () => nowMs });
    const h = endBeforeLastBlocks(lo);
    // Visits alone never end the wait: a store that keeps pace visits thousands of times a second.
    for (let i = 0; i < 1_000; i += 1) lo.plan();
    expect(lo.drained(h)).toBe(false);
    nowMs = 4.9;
    lo.plan();
    expect(lo.drained(h)).toBe(false);
    nowMs = 5;
    lo.plan();
    expect(lo.drained(h)).toBe(true);
    expect(lo.counters.chunksDroppedUnready).toBe(2);
  });

  it('a final wait bound that is not a finite number of ms, 0 or more, is a typed error', async () => {
    for (const bad of [-1, Number.POSITIVE_INFINITY, Number.NaN, '5' as unknown as number]) {
      await expect(local(undefined, { finalWaitMsMax: bad })).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
    }
  });

  it('an append after settle is a typed error (KVOFF_BLOCKS_SETTLED) and changes nothing', async () => {
    const lo = await local();
    const h = endBeforeLastBlocks(lo);
    lo.settle(h);
    const err = (() => {
      try {
        lo.appendBlocks(h, 0, [3, 4]);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(err).toBeInstanceOf(BlocksSettledError);
    expect((err as BlocksSettledError).code).toBe('KVOFF_BLOCKS_SETTLED');
    expect(lo.allocator.blockIds(h, 0)).toEqual([1, 2]);
    expect(lo.groupProgress(h, 0).blocks).toBe(2);
    lo.settle(h); // idempotent
    expect(lo.allocator.settled(h)).toBe(true);
  });

  it('settle before the request ended is an illegal transition and changes nothing', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    expect(() => lo.settle(h)).toThrow(IllegalTransitionError);
    expect(lo.allocator.settled(h)).toBe(false);
    lo.appendBlocks(h, 0, [1, 2]); // still accepted
    expect(lo.groupProgress(h, 0).blocks).toBe(2);
  });

  it('an aborted request waits for its blocks the same way', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1]);
    lo.progress(h, 12, 0); // three chunks computed, one block published
    lo.abort(h);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:0']);
    expect(lo.drained(h)).toBe(false);
    lo.appendBlocks(h, 0, [2, 3, 4]);
    lo.settle(h);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:1', '0:2']);
    expect(lo.drained(h)).toBe(true);
    expect(dropped(lo)).toBe(0);
  });

  it('keys and blocks both lag: waits for both, then drains', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
    lo.hash(h, 1);
    lo.appendBlocks(h, 0, [1, 2]);
    lo.progress(h, 0, 16);
    lo.finish(h);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:0']);
    lo.appendBlocks(h, 0, [3, 4]);
    lo.settle(h);
    expect(lo.plan()).toEqual([]);
    expect(lo.drained(h)).toBe(false); // blocks settled, keys still to come
    lo.hash(h);
    expect(chunkIds(planAndComplete(lo)[0])).toEqual(['0:1', '0:2', '0:3']);
    expect(lo.drained(h)).toBe(true);
    expect(dropped(lo)).toBe(0);
  });

  it('the unsafe switch brings the loss back: drained at once, nothing stored, nothing counted', async () => {
    const lo = await local(undefined, { unsafeSkipSettle: true });
    const h = endBeforeLastBlocks(lo);
    lo.plan();
    expect(lo.drained(h)).toBe(true);
    lo.appendBlocks(h, 0, [3, 4]); // accepted: nothing settled
    expect(lo.plan()).toEqual([]);
    expect(lo.counters.chunksStored).toBe(2);
    expect(dropped(lo)).toBe(0);
  });
});

describe('chunks lost when a request ends before its last publications (fuzzer)', () => {
  it('with the settle protocol off, the fuzzer finds the hole (random and PCT)', async () => {
    for (const strategy of ['random', 'pct'] as const) {
      const r = await fuzz({
        policy: 'ready-prefix',
        strategy,
        pins: true,
        settle: false,
        seed: 9001,
        schedules: 500,
        shrink: false,
        watch: ['hole'],
      });
      expect(r.violations, strategy).toBe(1);
      expect(r.first?.invariant).toBe('hole');
    }
  });

  it('with the protocol on, the same schedules are clean', async () => {
    for (const strategy of ['random', 'pct'] as const) {
      const r = await fuzz({
        policy: 'ready-prefix',
        strategy,
        pins: true,
        seed: 9001,
        schedules: 1000,
        shrink: false,
      });
      expect(r.violations, strategy).toBe(0);
    }
  });
});
