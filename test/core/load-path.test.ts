// The facade's lookup and load API (LocalOffload.lookup/load/completeLoad):
// a repeated hybrid prompt hits; a request that would load what another is
// loading is deferred, then hits; one load xor stores per request, also across
// preemption; one touch per group at every lookup, in group order; loads are
// checked against the request's own keys and change nothing when refused.
import { describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { IllegalTransitionError, InvalidArgumentError } from '../../src/errors.js';
import type { LocalOffload } from '../../src/local.js';
import type { RequestHandle } from '../../src/roles/handle.js';
import { HostTier } from '../../src/tier/host-tier.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';

// Chunks of 8 tokens (2 blocks of 4); the window is 16 tokens = 2 chunks.
const HYBRID: ConfigInput = {
  groups: [
    { kind: 'full', tokensPerBlock: 4, eagle: true },
    { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 16 },
  ],
  blocksPerChunk: 2,
  tokensPerHash: 4,
  maxRequests: 4,
  maxBlocksPerRequest: 64,
  gpuBlocks: 512,
  tierChunks: 256,
};

class RecordingTier extends HostTier {
  touches: bigint[][] = [];
  override touch(keys: readonly bigint[]): void {
    this.touches.push([...keys]);
    super.touch(keys);
  }
}

let nextBlock = 1;
/** Appends fresh blocks to every group up to `count` positions (0 below `nullBelow[g]`). */
function appendUpTo(
  lo: LocalOffload,
  h: RequestHandle,
  count: number,
  nullBelow: number[] = [],
): void {
  for (let g = 0; g < lo.config.groups.length; g += 1) {
    const have = lo.groupProgress(h, g).blocks;
    const ids = Array.from({ length: Math.max(0, count - have) }, (_, i) =>
      have + i < (nullBelow[g] ?? 0) ? 0 : nextBlock++,
    );
    lo.appendBlocks(h, g, ids);
  }
}

/** Runs a request over `prompt` to its end, storing every chunk it can. */
function storePrompt(lo: LocalOffload, prompt: number[], requestId: number): void {
  const h = lo.open({ requestId, promptTokens: prompt });
  lo.hash(h);
  appendUpTo(lo, h, Math.ceil(prompt.length / 4));
  lo.progress(h, prompt.length);
  planAndComplete(lo);
  lo.finish(h);
  planAndComplete(lo);
  expect(lo.drained(h)).toBe(true);
  lo.release(h);
}

/** Opens a request with a lookup answer and appends the blocks its load needs (window only for SW). */
function openForLoad(lo: LocalOffload, prompt: number[], requestId: number, hitTokens: number) {
  const answer = lo.lookup(prompt);
  expect(answer.deferred).toBe(false);
  if (answer.deferred) throw new Error('unreachable');
  expect(answer.hitTokens).toBe(hitTokens);
  const h = lo.open({ requestId, promptTokens: prompt, hitChunks: answer.hitChunks });
  lo.hash(h);
  const blocks = Math.ceil(hitTokens / 4);
  // The window ends at the hit: 2 chunks = 4 blocks; below it the SW group holds null blocks.
  appendUpTo(lo, h, blocks, [0, Math.max(0, blocks - 4)]);
  return { h, answer };
}

// 66 tokens: 8 whole chunks per group; the last token is recomputed, so 64 tokens (8 chunks) may hit.
const PROMPT = tokens(66, 5);

describe('LocalOffload lookup and load', () => {
  it('a repeated hybrid prompt hits everything but the EAGLE tail, and loads only the window of the SW group', async () => {
    const lo = await local(HYBRID);
    storePrompt(lo, PROMPT, 1);
    // EAGLE: the widened query hits 8 chunks and the volatile last one is dropped: 7 chunks.
    const { h, answer } = openForLoad(lo, PROMPT, 2, 56);
    if (answer.deferred) throw new Error('unreachable');
    expect(answer.hitChunks).toEqual([7, 7]);
    const job = lo.load(h, answer);
    const byGroup = (g: number) => job.chunks.filter((c) => c.group === g).map((c) => c.chunk);
    expect(byGroup(0)).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(byGroup(1)).toEqual([5, 6]);
    // Every loaded chunk carries the request's own key and the tier slot holding it.
    for (const c of job.chunks) {
      expect(c.key).toBe(lo.keys(h, c.group)[c.chunk]);
      expect(lo.tier.slotOf(c.key)).toBe(c.tierSlot);
      expect(c.positions).toEqual([c.chunk * 2, c.chunk * 2 + 1]);
    }
    expect(lo.tier.stats().reading).toBe(9);
    lo.completeLoad(job);
    expect(lo.tier.stats().reading).toBe(0);
    expect([lo.cursor(h, 0), lo.cursor(h, 1)]).toEqual([7, 7]);
  });

  it('a second request that would load a chunk another is loading is deferred, then hits', async () => {
    const lo = await local(HYBRID);
    storePrompt(lo, PROMPT, 1);
    const { h, answer } = openForLoad(lo, PROMPT, 2, 56);
    const job = lo.load(h, answer);
    expect(lo.lookup(PROMPT)).toEqual({ deferred: true, reason: 'pending' });
    // Another prompt that shares nothing is not held up.
    const other = lo.lookup(tokens(66, 9));
    expect(other.deferred).toBe(false);
    lo.completeLoad(job);
    const again = lo.lookup(PROMPT);
    expect(again.deferred === false && again.hitTokens).toBe(56);
  });

  it('one load xor stores per request, across preemption', async () => {
    const lo = await local(HYBRID);
    storePrompt(lo, PROMPT, 1);
    // A longer prompt over the stored one: its first 8 chunks are present, the next 4 are stored.
    const long = [...PROMPT, ...tokens(32, 11)];
    const h = lo.open({ requestId: 2, promptTokens: long });
    lo.hash(h);
    appendUpTo(lo, h, 25);
    lo.progress(h, long.length);
    const jobs = lo.plan();
    expect(jobs.map((j) => j.chunks.length)).toEqual([8]);
    lo.preempt(h);
    // Re-admission while its store jobs are in flight: ask again later.
    expect(lo.lookup(long, { handle: h })).toEqual({ deferred: true, reason: 'transfers' });
    const answer = lo.lookup(PROMPT);
    expect(answer.deferred).toBe(false);
    expect(() => lo.load(h, answer)).toThrow(IllegalTransitionError);
    for (const j of jobs) lo.complete(j);
    const readmitted = lo.lookup(long, { handle: h });
    expect(readmitted.deferred === false && readmitted.hitTokens).toBe(88);
    appendUpTo(lo, h, 22, [0, 18]);
    const load = lo.load(h, readmitted);
    // While it loads: no progress (nothing to store), no preemption, no release.
    expect(() => lo.progress(h, 60)).toThrow(IllegalTransitionError);
    expect(() => lo.preempt(h)).toThrow(IllegalTransitionError);
    expect(() => lo.release(h)).toThrow(IllegalTransitionError);
    expect(() => lo.load(h, readmitted)).toThrow(IllegalTransitionError);
    expect(lo.plan()).toEqual([]);
    lo.completeLoad(load);
    lo.progress(h, 88);
    expect(() => lo.completeLoad(load)).toThrow(InvalidArgumentError);
  });

  it('touches once per group at every lookup, in group order: every FA key, the window below the hit and after it for SW', async () => {
    const tier = new RecordingTier(256);
    const lo = await local(HYBRID, { tier });
    storePrompt(lo, PROMPT, 1);
    tier.touches = [];
    const answer = lo.lookup(PROMPT);
    if (answer.deferred) throw new Error('unreachable');
    expect(tier.touches).toEqual([answer.keys[0], answer.keys[1]!.slice(5)]);
    // A miss touches too: everything of both groups (no hit, so the window starts at 0).
    tier.touches = [];
    const miss = lo.lookup(tokens(66, 77));
    if (miss.deferred) throw new Error('unreachable');
    expect(miss.hitTokens).toBe(0);
    expect(tier.touches).toEqual([miss.keys[0], miss.keys[1]]);
  });

  it('skipReadingPrefixCache hits nothing, maxLoadTokens caps the hit, a local prefix is not loaded again', async () => {
    const lo = await local(HYBRID);
    storePrompt(lo, PROMPT, 1);
    const skip = lo.lookup(PROMPT, { skipReadingPrefixCache: true });
    expect(skip.deferred === false && skip.hitTokens).toBe(0);
    // The cap bounds the hit in tokens (vLLM loads the chunk the cap ends in and recomputes from the cap).
    const capped = lo.lookup(PROMPT, { maxLoadTokens: 20 });
    expect(capped.deferred === false && capped.hitTokens).toBe(20);
    const beyond = lo.lookup(PROMPT, { localHitTokens: 16 });
    expect(beyond.deferred === false && beyond.hitTokens).toBe(40);
    if (beyond.deferred) throw new Error('unreachable');
    const h = lo.open({ requestId: 3, promptTokens: PROMPT, hitChunks: beyond.hitChunks });
    appendUpTo(lo, h, 14, [0, 10]);
    const job = lo.load(h, beyond);
    expect(job.chunks.filter((c) => c.group === 0).map((c) => c.chunk)).toEqual([2, 3, 4, 5, 6]);
    lo.completeLoad(job);
    expect(() => lo.lookup(PROMPT, { localHitTokens: -1 })).toThrow(InvalidArgumentError);
    expect(() => lo.lookup(PROMPT, { maxLoadTokens: 1.5 })).toThrow(InvalidArgumentError);
    const notBoolean = { skipReadingPrefixCache: 'yes' } as unknown as {
      skipReadingPrefixCache: boolean;
    };
    expect(() => lo.lookup(PROMPT, notBoolean)).toThrow(/skipReadingPrefixCache/);
  });

  it('refuses a load of another prompt or of an evicted entry, and changes nothing', async () => {
    const lo = await local({ ...HYBRID, tierChunks: 16 });
    storePrompt(lo, PROMPT, 1);
    const answer = lo.lookup(PROMPT);
    const stranger = tokens(66, 6);
    const h = lo.open({ requestId: 2, promptTokens: stranger });
    appendUpTo(lo, h, 14, [0, 10]);
    expect(() => lo.load(h, answer)).toThrow(InvalidArgumentError);
    expect(lo.tier.stats().reading).toBe(0);
    // Released only once drained: abort it and let a pass take its (empty) final offer.
    lo.abort(h);
    lo.plan();
    lo.release(h);
    // Evict the stored prompt with another one, then try the stale answer.
    storePrompt(lo, tokens(66, 8), 3);
    const h2 = lo.open({ requestId: 4, promptTokens: PROMPT });
    appendUpTo(lo, h2, 14, [0, 10]);
    expect(() => lo.load(h2, answer)).toThrow(InvalidArgumentError);
    expect(lo.tier.stats().reading).toBe(0);
    expect([lo.cursor(h2, 0), lo.cursor(h2, 1)]).toEqual([0, 0]);
  });
});
