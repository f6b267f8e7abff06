// F1: the store cursor passes a chunk whose key is missing (vLLM #36052,
// #33881, #46824).
//
// The sequence in those issues: token progress counted tokens whose block
// hashes were not available yet. The store path derived its boundary from
// the token count, stored the chunks whose keys existed and moved its cursor
// to the token boundary anyway. The chunks whose keys came later sat below
// the cursor: never stored, never counted, and a later request's prefix hit
// stops at that first hole.
//
// Here: a 12-token prompt (3 chunks of 4 tokens), all 12 tokens scheduled at
// once and all 3 block IDs published, but only the first hash block hashed
// when the store pass runs. Then the remaining keys arrive, the request
// finishes, and a second request with the same prompt looks it up. kvoff
// stores the keyed chunk, defers the other two (counted) and stores them once
// their keys exist; legacy-zip (the broken variant) leaves two holes.
import { describe, expect, it } from 'vitest';
import type { LocalOffloadOptions } from '../../src/local.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';
import { fuzzClass } from './helpers.js';
import { SMALL_ONE_GROUP } from '../helpers/configs.js';

const PROMPT = tokens(12, 1);

async function keysLagTokens(options: LocalOffloadOptions) {
  const lo = await local(SMALL_ONE_GROUP, options);
  const h = lo.open({ requestId: 1, promptTokens: PROMPT });
  lo.progress(h, 0, 12); // the whole prompt scheduled: 3 token chunks
  lo.appendBlocks(h, 0, [1, 2, 3]);
  lo.hash(h, 1); // only chunk 0 has its key yet
  const stored: bigint[] = [];
  const store = () => {
    for (const job of planAndComplete(lo)) stored.push(...job.chunks.map((c) => c.key));
  };
  store();
  const cursorAfterFirstPass = lo.cursor(h, 0);
  const deferredAfterFirstPass = lo.counters.chunksDeferred;
  lo.hash(h); // the late keys of chunks 1 and 2
  store();
  lo.progress(h, 12, 0);
  lo.finish(h);
  lo.settle(h);
  store();
  const keys = lo.keys(h, 0);
  // The check: every chunk token-ready at the end is stored, or counted as given up.
  const counted = lo.counters.chunksDroppedUnready + lo.counters.chunksDroppedForCapacity;
  const holes = keys.map((k, c) => (stored.includes(k) ? -1 : c)).filter((c) => c >= 0);
  // A second request with the same prompt (and one more token): its prefix hit stops at the first hole.
  const hit = lo.lookup([...PROMPT, 7]);
  return {
    cursorAfterFirstPass,
    deferredAfterFirstPass,
    drained: lo.drained(h),
    holes,
    counted,
    hitTokens: hit.deferred ? -1 : hit.hitTokens,
  };
}

describe('F1: the store cursor passes a chunk whose key is missing', () => {
  it('kvoff: the keyless chunks are deferred (counted), stored once their keys arrive; no hole', async () => {
    const r = await keysLagTokens({});
    expect(r.cursorAfterFirstPass).toBe(1); // stopped at the ready prefix
    expect(r.deferredAfterFirstPass).toBe(2);
    expect(r.drained).toBe(true);
    expect(r.holes).toEqual([]);
    expect(r.hitTokens).toBe(12);
  });

  it('broken variant (legacy-zip): the cursor passes chunks 1 and 2, which are never stored', async () => {
    const r = await keysLagTokens({ policy: 'legacy-zip' });
    expect(r.cursorAfterFirstPass).toBe(3); // the token boundary
    expect(r.holes).toEqual([1, 2]); // the check fails: two permanent holes...
    expect(r.counted).toBe(0); // ...that nothing counted as given up
    expect(r.hitTokens).toBe(4); // prefix reuse stops at the first hole
  });

  it('fuzzer: the oracle finds the cursor passing the ready prefix under legacy-zip, never under ready-prefix', async () => {
    const broken = await fuzzClass('f01', 'broken', { schedules: 200 });
    expect(broken.violations).toBe(1);
    expect(['hole', 'cursor-within-ready']).toContain(broken.first?.invariant);
    const kvoff = await fuzzClass('f01', 'kvoff', { schedules: 200 });
    expect(kvoff.violations).toBe(0);
  });
});
