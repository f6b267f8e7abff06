// F3: the key/block length assertion (vLLM #49118 fixed by #49146, #52170,
// #55503, #52211; fixed by capping at the ready prefix in #52923; the seeds).
//
// The sequence in those issues: the store path sliced a request's offload
// keys and its GPU block IDs at the token boundary and asserted that the two
// slices had equal lengths. Whenever one of the two lagged the tokens the
// assertion fired and killed the engine; the issues reached that state by a
// queued abort, eviction or preemption under memory pressure, multi-turn
// traffic at high concurrency, and multi-tier offloading with MTP.
//
// Here, three ways to reach it on a 12-token prompt (3 chunks of 4 tokens):
// block IDs behind the keys (the seeds' scenario), a preemption under
// pressure that clears the blocks while the keys stay and reallocates only
// one block, and keys behind the block IDs. kvoff asserts no length: what is
// not ready is deferred (counted) and stored once it is. The broken variant
// (policy legacy-assert, the old code) throws on each: the engine crash.
import { describe, expect, it } from 'vitest';
import { LegacyAssertionError } from '../../src/errors.js';
import type { LocalOffload } from '../../src/local.js';
import type { StorePolicy } from '../../src/ready.js';
import type { RequestHandle } from '../../src/roles/handle.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';
import { fuzzClass } from './helpers.js';
import { SMALL_ONE_GROUP } from '../helpers/configs.js';

const PROMPT = tokens(12, 3);

interface Lag {
  readonly name: string;
  /** Brings the request to a pass where keys and block IDs disagree; returns how to catch up. */
  readonly setup: (lo: LocalOffload, h: RequestHandle) => () => void;
}

const LAGS: readonly Lag[] = [
  {
    name: 'block IDs lag the keys (the seeds)',
    setup: (lo, h) => {
      lo.progress(h, 0, 12);
      lo.hash(h);
      lo.appendBlocks(h, 0, [1, 2]);
      return () => lo.appendBlocks(h, 0, [3]);
    },
  },
  {
    name: 'preempted under pressure: blocks cleared, only one reallocated, keys kept',
    setup: (lo, h) => {
      lo.progress(h, 0, 12);
      lo.hash(h);
      lo.appendBlocks(h, 0, [1]);
      lo.preempt(h);
      lo.progress(h, 0, 12);
      lo.appendBlocks(h, 0, [7]);
      return () => lo.appendBlocks(h, 0, [8, 9]);
    },
  },
  {
    name: 'keys lag the block IDs',
    setup: (lo, h) => {
      lo.progress(h, 0, 12);
      lo.appendBlocks(h, 0, [1, 2, 3]);
      lo.hash(h, 1);
      return () => lo.hash(h);
    },
  },
];

async function run(lag: Lag, policy: StorePolicy) {
  const lo = await local(SMALL_ONE_GROUP, { policy });
  const h = lo.open({ requestId: 1, promptTokens: PROMPT });
  const catchUp = lag.setup(lo, h);
  const first = planAndComplete(lo).flatMap((j) => j.chunks.map((c) => c.chunk));
  const deferred = lo.counters.chunksDeferred;
  catchUp();
  const second = planAndComplete(lo).flatMap((j) => j.chunks.map((c) => c.chunk));
  return { first, deferred, second, cursor: lo.cursor(h, 0) };
}

describe('F3: key/block length assertion at the token boundary', () => {
  for (const lag of LAGS) {
    it(`kvoff: ${lag.name}: the ready chunks are stored, the rest deferred (counted), then stored`, async () => {
      const r = await run(lag, 'ready-prefix');
      expect(r.deferred).toBe(3 - r.first.length);
      expect(r.deferred).toBeGreaterThan(0);
      expect([...r.first, ...r.second].sort()).toEqual([0, 1, 2]);
      expect(r.cursor).toBe(3);
    });

    it(`broken variant (legacy-assert): ${lag.name}: the pass throws (the engine crash)`, async () => {
      await expect(run(lag, 'legacy-assert')).rejects.toThrow(LegacyAssertionError);
    });
  }

  it('fuzzer: legacy-assert crashes within a few schedules; ready-prefix never does', async () => {
    const broken = await fuzzClass('f03', 'broken', { schedules: 100 });
    expect(broken.violations).toBe(1);
    expect(broken.first?.invariant).toBe('crash');
    expect(broken.first?.message).toContain('LegacyAssertionError');
    const kvoff = await fuzzClass('f03', 'kvoff', { schedules: 300 });
    expect(kvoff.violations).toBe(0);
  });
});
