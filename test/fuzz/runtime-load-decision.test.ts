// The runtime fuzzer's load-path oracle (invariant 7, src/fuzz/lookup-oracle.ts):
// a lookup answer must be what the independent specification
// (src/fuzz/spec/lookup-spec.ts) allows over the tier state at that moment,
// with the request's limits, and every chunk a hit protects must
// hold its key's bytes in the tier. Each check is shown to fail on an answer
// that breaks it, and to pass on the store's own answers in a one-thread run.
import { describe, expect, it } from 'vitest';
import { expandBlock } from '../../src/bytes.js';
import { resolveConfig } from '../../src/config.js';
import { tierBlockWords } from '../../src/copy.js';
import { DEFER } from '../../src/lookup.js';
import type { ChunkState, LookupResult } from '../../src/lookup.js';
import { RuntimeViews, createRuntimeBuffers } from '../../src/runtime/buffers.js';
import type { LookupAnswered } from '../../src/runtime/store-loads.js';
import { lookupAnswerViolation } from '../../src/fuzz/lookup-oracle.js';
import { specLookup } from '../../src/fuzz/spec/lookup-spec.js';
import { UNPACED_ENGINE, oneThreadLoops, repeatedPrompt } from '../helpers/one-thread-loops.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

const config = resolveConfig(SMALL_HYBRID); // full (EAGLE) + 4-chunk window, 8-token chunks of 2 blocks
const views = new RuntimeViews(config, createRuntimeBuffers(config));
const keys = [0, 1].map((g) => Array.from({ length: 12 }, (_, c) => BigInt(1000 * g + c + 1)));
const allHit = (): ChunkState => 'hit';
const tierAllHit = { state: (): 'hit' => 'hit' };

function answered(
  over: Partial<LookupAnswered> & { cap?: number; skip?: boolean },
): LookupAnswered {
  return {
    lookup: {
      tag: 3,
      numTokens: 97, // 12 whole chunks; 96 tokens may hit
      force: false,
      maxLoadTokens: over.cap,
      skipReadingPrefixCache: over.skip ?? false,
      keys,
    },
    state: allHit,
    answer: 0,
    lower: false,
    locked: [],
    ...over,
  };
}

/** The one answer the specification leaves: the hit, or DEFER when pending entries decide it. */
function expectedLookupAnswer(a: LookupAnswered): number | typeof DEFER {
  const v = specLookup(config, a.lookup, a.state);
  return v.hitTokens === v.hitTokensIfPendingLand ? v.hitTokens : DEFER;
}

describe('oracle 7: the load decision', () => {
  it('the expected answer applies the limits: skip reads 0, a cap rounds down to whole chunks', () => {
    // 96 tokens: the EAGLE group's widened query drops its last chunk: 11 chunks.
    expect(expectedLookupAnswer(answered({}))).toBe(88);
    expect(expectedLookupAnswer(answered({ skip: true }))).toBe(0);
    expect(expectedLookupAnswer(answered({ cap: 45 }))).toBe(40);
    expect(expectedLookupAnswer(answered({ cap: 7 }))).toBe(0);
    // A full-attention chunk being written defers; a window chunk outside the final window would not.
    const pending = (k: bigint): ChunkState => (k === 3n ? 'pending' : 'hit');
    expect(
      expectedLookupAnswer(answered({ state: (k) => (k === 1002n ? 'pending' : 'hit') })),
    ).toBe(88);
    expect(expectedLookupAnswer(answered({ state: pending }))).toBe(DEFER);
    // A request that skips reading never defers.
    expect(expectedLookupAnswer(answered({ state: pending, skip: true }))).toBe(0);
  });

  it('flags an answer that is not the decision (load-decision), and passes the right one', () => {
    expect(
      lookupAnswerViolation(views, answered({ answer: 88 }), tierAllHit, false),
    ).toBeUndefined();
    const over = lookupAnswerViolation(views, answered({ answer: 96 }), tierAllHit, false);
    expect(over?.invariant).toBe('load-decision');
    expect(over?.message).toMatch(/answered 96, the specification's hit is 88/);
    const skipped = lookupAnswerViolation(
      views,
      answered({ skip: true, answer: 88 }),
      tierAllHit,
      false,
    );
    expect(skipped?.invariant).toBe('load-decision');
    const capped = lookupAnswerViolation(
      views,
      answered({ cap: 45, answer: 48 }),
      tierAllHit,
      false,
    );
    expect(capped?.invariant).toBe('load-decision');
    // Deferred for the levels below host: not a decision of the lookup.
    expect(
      lookupAnswerViolation(views, answered({ answer: DEFER, lower: true }), tierAllHit, false),
    ).toBeUndefined();
  });

  it('flags a hit chunk whose tier slot does not hold its key whole (mispairing)', () => {
    const key = keys[0]![0]!;
    const slot = 5;
    const locked = [{ key, slot, group: 0, chunk: 0 }];
    const a = answered({ answer: 88, locked });
    expect(lookupAnswerViolation(views, a, tierAllHit, false)?.invariant).toBe('mispairing');
    // Only the first block written: still not whole.
    expandBlock(key, 0, tierBlockWords(views.tier, views.geometry, slot, 0));
    expect(lookupAnswerViolation(views, a, tierAllHit, false)?.invariant).toBe('mispairing');
    expandBlock(key, 1, tierBlockWords(views.tier, views.geometry, slot, 1));
    expect(lookupAnswerViolation(views, a, tierAllHit, false)).toBeUndefined();
    // The tier says the entry is still being written: not a hit to load.
    const writing = { state: (): 'pending' => 'pending' };
    expect(lookupAnswerViolation(views, a, writing, false)?.invariant).toBe('mispairing');
    // With load-while-writing on, only the decision is checked.
    expect(lookupAnswerViolation(views, a, writing, true)).toBeUndefined();
  });

  it("the store loop's own answers pass, hits, deferrals and limits alike (one thread)", async () => {
    const seen: { answer: LookupResult; violation: string | undefined }[] = [];
    const loops = await oneThreadLoops({
      config: SMALL_HYBRID,
      engine: UNPACED_ENGINE,
      allocatorLag: { publishDelayMs: 1, jitterMs: 0, seed: 5 },
      store: {
        onLookupAnswered: (a) =>
          seen.push({
            answer: a.answer,
            violation: lookupAnswerViolation(loops.views, a, loops.store.tier, false)?.message,
          }),
      },
    });
    const { ended, store } = loops;
    const add = (
      requestId: number,
      extra: { maxLoadTokens?: number; skipReadingPrefixCache?: boolean } = {},
    ) => loops.submit({ ...repeatedPrompt(requestId), ...extra });
    const runUntil = (done: () => boolean) => expect(loops.runUntil(done, 100_000)).toBe(true);
    add(1);
    runUntil(() => ended.length === 1 && store.jobsInFlight === 0);
    // Three at once: one loads, the others wait for it (deferred), one capped, one skipping.
    add(2);
    add(3, { maxLoadTokens: 100 });
    add(4, { skipReadingPrefixCache: true });
    runUntil(() => ended.length === 4);
    expect(seen.filter((s) => s.violation !== undefined)).toEqual([]);
    expect(seen.some((s) => s.answer === DEFER)).toBe(true);
    expect(ended.map((s) => [s.requestId, s.hitChunks]).sort((a, b) => a[0]! - b[0]!)).toEqual([
      [1, 0],
      [2, 49],
      [3, 12],
      [4, 0],
    ]);
  });
});
