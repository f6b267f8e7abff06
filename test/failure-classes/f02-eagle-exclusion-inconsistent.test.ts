// F2: the EAGLE/MTP trailing-chunk exclusion applied in one place but not the
// other (vLLM #46971 / #46972).
//
// The sequence in that issue: a request decodes with EAGLE drafts. While it
// decodes, the chunk holding its newest tokens may still be rewritten by
// rejected drafts, so the store path held that trailing chunk back when it
// collected the keys to store. But the cursor was advanced from the plain
// token count, without the exclusion: every time decoding crossed a chunk
// boundary the held-back chunk fell below the cursor and was never stored.
// One chunk lost per boundary, silently.
//
// Here: an 8-token prompt (2 chunks of 4 tokens) stored at prefill, then
// decode one token per step with 2 drafts scheduled, to 17 tokens, then
// finish (16 offloadable tokens: 4 chunks). kvoff applies the exclusion once,
// in the token-chunk count every decision uses, so chunks 2 and 3 wait and are
// stored once final. The broken variant (switch unsafeEagleCursorUnexcluded:
// the exclusion on the chunks stored, not on the cursor) loses both.
import { describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import type { LocalOffloadOptions } from '../../src/local.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';
import { fuzzClass } from './helpers.js';
import { SMALL_ONE_GROUP } from '../helpers/configs.js';

const CONFIG: ConfigInput = {
  ...SMALL_ONE_GROUP,
  groups: [{ kind: 'full', tokensPerBlock: 4, eagle: true }],
};
const PROMPT = tokens(8, 2);
const DRAFTS = 2;
const FINAL_TOKENS = 17;

async function eagleDecode(options: LocalOffloadOptions) {
  const lo = await local(CONFIG, options);
  const h = lo.open({ requestId: 1, promptTokens: PROMPT });
  let blocks = 0;
  const cover = (tokenCount: number) => {
    const want = Math.ceil(tokenCount / 4);
    const ids: number[] = [];
    while (blocks < want) ids.push(++blocks);
    if (ids.length > 0) lo.appendBlocks(h, 0, ids);
  };
  const stored: bigint[] = [];
  const store = () => {
    for (const job of planAndComplete(lo)) stored.push(...job.chunks.map((c) => c.key));
  };
  lo.progress(h, 0, 8);
  cover(8);
  lo.hash(h);
  store();
  const cursors: number[] = [];
  for (let n = 9; n <= FINAL_TOKENS; n += 1) {
    // A decode step: the token sampled last step is known, it and the drafts are scheduled.
    lo.appendTokens(h, [1000 + n]);
    lo.progress(h, n - 1, 1 + DRAFTS);
    cover(n + DRAFTS);
    lo.hash(h);
    store();
    cursors.push(lo.cursor(h, 0));
  }
  lo.finish(h);
  lo.settle(h);
  store();
  const { tokenChunks } = lo.groupProgress(h, 0);
  const keys = lo.keys(h, 0).slice(0, tokenChunks);
  // The check: every chunk token-ready at the end is stored, or counted as given up.
  const holes = keys.map((k, c) => (stored.includes(k) ? -1 : c)).filter((c) => c >= 0);
  const counted = lo.counters.chunksDroppedUnready + lo.counters.chunksDroppedForCapacity;
  return { tokenChunks, cursors, holes, counted, drained: lo.drained(h) };
}

describe('F2: the EAGLE trailing-chunk exclusion applied to the keys but not to the cursor', () => {
  it('kvoff: the trailing chunk waits while decoding and is stored once final; no hole', async () => {
    const r = await eagleDecode({});
    expect(r.tokenChunks).toBe(4);
    // Decoding 9..17 tokens, the cursor stays below the trailing chunk: floor(n / 4) - 1, at least the prompt's 2.
    expect(r.cursors).toEqual([2, 2, 2, 2, 2, 2, 2, 3, 3]);
    expect(r.drained).toBe(true);
    expect(r.holes).toEqual([]);
  });

  it('broken variant (unsafeEagleCursorUnexcluded): one chunk lost per boundary crossed', async () => {
    const r = await eagleDecode({ unsafeEagleCursorUnexcluded: true });
    expect(r.tokenChunks).toBe(4);
    expect(r.cursors).toEqual([2, 2, 2, 3, 3, 3, 3, 4, 4]); // floor(n / 4): over the trailing chunk
    expect(r.holes).toEqual([2, 3]); // the check fails: the boundaries at 12 and 16 tokens
    expect(r.counted).toBe(0); // and nothing counted them
  });

  it('fuzzer: the oracle finds the switch under EAGLE decode, and nothing without it', async () => {
    const broken = await fuzzClass('f02', 'broken', { schedules: 300 });
    expect(broken.violations).toBe(1);
    expect(['hole', 'cursor-within-ready']).toContain(broken.first?.invariant);
    const kvoff = await fuzzClass('f02', 'kvoff', { schedules: 300 });
    expect(kvoff.violations).toBe(0);
  });
});
