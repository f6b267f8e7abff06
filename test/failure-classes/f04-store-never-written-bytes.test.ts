// F4: storing never-written bytes (vLLM #54288).
//
// The sequence in that issue: a request decodes; each step feeds the token
// sampled by the previous step through the model (writing its KV) and samples
// the next one. The request finishes on a sampled token (EOS or its length
// limit) that is never fed back, so its KV is never computed. The store path
// stored the finished request up to its total token count: when that count
// ended on a chunk boundary, the last chunk's final slot held whatever the
// block held before, and that junk was later served under a valid hash.
//
// Here: an 8-token prompt (2 chunks of 4 tokens) prefilled, then decoded one
// token per step until the request knows 12 tokens; it finishes there. The
// test keeps its own record of which tokens' KV a forward pass computed. kvoff
// stores 2 chunks (the last sampled token is not offloadable); the broken
// variant (switch unsafeStoreLastSampledToken) stores the third, whose token 11
// was never computed, and a later lookup serves it. The runtime fuzzer, whose
// engine writes a block's bytes only for computed tokens, sees those bytes
// mismatch their key.
import { describe, expect, it } from 'vitest';
import type { LocalOffloadOptions } from '../../src/local.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';
import { fuzzClass } from './helpers.js';
import { SMALL_ONE_GROUP } from '../helpers/configs.js';

const PROMPT = tokens(8, 4);
const FINAL_TOKENS = 12;

async function decodeToFinish(options: LocalOffloadOptions) {
  const lo = await local(SMALL_ONE_GROUP, options);
  const h = lo.open({ requestId: 1, promptTokens: PROMPT });
  const all = [...PROMPT];
  const kvComputed = new Set<number>(); // token indexes a forward pass ran on
  const storedChunks: number[] = [];
  let blocks = 0;
  const forward = (from: number, count: number) => {
    lo.progress(h, from, count);
    const want = Math.ceil((from + count) / 4);
    const ids: number[] = [];
    while (blocks < want) ids.push(++blocks);
    if (ids.length > 0) lo.appendBlocks(h, 0, ids);
    for (let t = from; t < from + count; t += 1) kvComputed.add(t);
    lo.hash(h);
    for (const job of planAndComplete(lo)) storedChunks.push(...job.chunks.map((c) => c.chunk));
  };
  const sample = () => {
    const t = 500 + all.length;
    all.push(t);
    lo.appendTokens(h, [t]);
  };
  forward(0, PROMPT.length);
  sample();
  while (all.length < FINAL_TOKENS) {
    forward(all.length - 1, 1); // the token sampled last step is fed through the model
    sample();
  }
  lo.finish(h); // on token 11, sampled but never fed back: its KV was never computed
  lo.settle(h);
  lo.hash(h);
  for (const job of planAndComplete(lo)) storedChunks.push(...job.chunks.map((c) => c.chunk));
  // The check: every token of every stored chunk had its KV computed.
  const neverWritten = storedChunks.flatMap((c) =>
    [0, 1, 2, 3].map((i) => c * 4 + i).filter((t) => !kvComputed.has(t)),
  );
  const hit = lo.lookup([...all, 9]);
  return { storedChunks, neverWritten, hitTokens: hit.deferred ? -1 : hit.hitTokens };
}

describe("F4: storing a finished request's last sampled token, whose KV was never computed", () => {
  it('kvoff: the chunk ending with the last sampled token is not stored; a lookup serves only computed KV', async () => {
    const r = await decodeToFinish({});
    expect(r.storedChunks.sort()).toEqual([0, 1]);
    expect(r.neverWritten).toEqual([]);
    expect(r.hitTokens).toBe(8);
  });

  it('broken variant (unsafeStoreLastSampledToken): chunk 2 is stored with token 11 never computed, then served', async () => {
    const r = await decodeToFinish({ unsafeStoreLastSampledToken: true });
    expect(r.storedChunks.sort()).toEqual([0, 1, 2]);
    expect(r.neverWritten).toEqual([11]); // the check fails
    expect(r.hitTokens).toBe(12); // the junk is served under a valid hash
  });

  it('runtime fuzzer: the switch stores bytes that do not match their key; without it, none', async () => {
    const broken = await fuzzClass('f04', 'broken', { schedules: 100 });
    expect(broken.violations).toBe(1);
    expect(broken.first?.invariant).toBe('mispairing');
    const kvoff = await fuzzClass('f04', 'kvoff', { schedules: 50 });
    expect(kvoff.violations).toBe(0);
  });
});
