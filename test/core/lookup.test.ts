// The load-path decisions (src/lookup.ts) as a table, in the style of vLLM's
// own lookup tests: per group a row of chunk states (H hit, M miss, P pending,
// R retry),
// the window W and EAGLE on or off, and the expected hit in tokens or DEFER.
// Every table row uses 4 tokens per chunk, so a hit of k chunks is 4k tokens.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  DEFER,
  RETRY,
  combineLevels,
  loadPlan,
  lookupHitTokens,
  lookupOrder,
  maximalPrefix,
  slidingWindow,
  touchRanges,
} from '../../src/lookup.js';
import type { ChunkState, LookupGroup, LookupResult } from '../../src/lookup.js';
import { resolveConfig } from '../../src/config.js';
import { ConfigError } from '../../src/errors.js';

const TPC = 4;

interface Row {
  /** null: full attention; else the window in chunks. */
  w: number | null;
  eagle?: boolean;
  /** One letter per chunk: H, M or P. */
  states: string;
}

interface Case {
  name: string;
  rows: Row[];
  numTokens: number;
  local?: number;
  maxLoadTokens?: number;
  skip?: boolean;
  expected: LookupResult;
}

const STATE: Record<string, ChunkState> = { H: 'hit', M: 'miss', P: 'pending', R: 'retry' };

function run(c: Case): LookupResult {
  const groups: LookupGroup[] = c.rows.map((r) => ({
    tokensPerChunk: TPC,
    windowChunks: r.w,
    eagle: r.eagle ?? false,
  }));
  const states = new Map<bigint, ChunkState>();
  const keys = c.rows.map((r, g) =>
    [...r.states].map((letter, i) => {
      const key = BigInt(g * 1000 + i);
      states.set(key, STATE[letter]!);
      return key;
    }),
  );
  return lookupHitTokens(
    groups,
    {
      numTokens: c.numTokens,
      keys,
      ...(c.local !== undefined ? { localHitTokens: c.local } : {}),
      ...(c.maxLoadTokens !== undefined ? { maxLoadTokens: c.maxLoadTokens } : {}),
      ...(c.skip !== undefined ? { skipReadingPrefixCache: c.skip } : {}),
    },
    (k) => states.get(k) ?? 'miss',
  );
}

const FA = (states: string, eagle = false): Row => ({ w: null, eagle, states });
const SW = (w: number, states: string, eagle = false): Row => ({ w, eagle, states });

const CASES: Case[] = [
  // Full attention alone: the maximal prefix, capped by the tokens.
  { name: 'FA all hit', rows: [FA('HHHH')], numTokens: 16, expected: 16 },
  { name: 'FA stops at the first miss', rows: [FA('HHMH')], numTokens: 16, expected: 8 },
  { name: 'FA leading miss', rows: [FA('MHHH')], numTokens: 16, expected: 0 },
  { name: 'FA pending before a miss defers', rows: [FA('HPHM')], numTokens: 16, expected: DEFER },
  { name: 'FA pending after a miss is moot', rows: [FA('HHMP')], numTokens: 16, expected: 8 },
  { name: 'FA fewer tokens than a chunk', rows: [FA('')], numTokens: 3, expected: 0 },
  // EAGLE: one chunk more is queried, the last hit chunk is dropped.
  {
    name: 'FA EAGLE drops its volatile tail',
    rows: [FA('HHHH', true)],
    numTokens: 16,
    expected: 12,
  },
  {
    name: 'FA EAGLE widened past the recomputed last token',
    rows: [FA('HHHHH', true), SW(2, 'HHHHH')],
    numTokens: 20,
    expected: 16,
  },
  {
    name: 'FA EAGLE miss in the widened chunk still drops one',
    rows: [FA('HHHHM', true), SW(2, 'HHHHH')],
    numTokens: 20,
    expected: 12,
  },
  // Any windowed group: the last token is always recomputed.
  {
    name: 'hybrid, prompt of whole chunks: the last token is recomputed',
    rows: [FA('HHHH'), SW(2, 'HHHH')],
    numTokens: 16,
    expected: 15,
  },
  {
    name: 'hybrid, window ends at the hit',
    rows: [FA('HHHH'), SW(2, 'MMHH')],
    numTokens: 17,
    expected: 16,
  },
  // The right-to-left scan: the rightmost full window, wherever it ends.
  {
    name: 'SW rightmost full window below the FA hit',
    rows: [FA('HHHHHHHH'), SW(2, 'MMMHHHMH')],
    numTokens: 33,
    expected: 24,
  },
  {
    name: 'SW no full window: the leading run',
    rows: [FA('HHHHHHHH'), SW(3, 'HHMHHMHH')],
    numTokens: 33,
    expected: 8,
  },
  {
    name: 'SW no full window, no leading run',
    rows: [FA('HHHHHHHH'), SW(3, 'MHMHHMHH')],
    numTokens: 33,
    expected: 0,
  },
  {
    name: 'SW pending inside the window defers',
    rows: [FA('HHHHHHHH'), SW(2, 'HHHHHHPH')],
    numTokens: 33,
    expected: DEFER,
  },
  {
    name: 'SW pending right of the window defers (waiting may give more)',
    rows: [FA('HHHHHHHH'), SW(2, 'HHHHHMHP')],
    numTokens: 33,
    expected: DEFER,
  },
  {
    // vLLM's test_swa_load_does_not_wait_for_unusable_pending_suffix: window
    // of 8 tokens, 17-token prompt, SWA chunk 2 missing and chunk 3 still
    // being written; the load takes 2 chunks per group at once.
    name: 'SW pending suffix behind a missing chunk cannot make a window: the hit before the gap, at once',
    rows: [FA('HHHH'), SW(2, 'HHMP')],
    numTokens: 17,
    expected: 8,
  },
  {
    name: 'SW pending behind a gap in a run that is the leading fallback still defers',
    rows: [FA('HHHHHHHH'), SW(3, 'HPMHHMHH')],
    numTokens: 33,
    expected: DEFER,
  },
  // RETRY (the tier could not answer): kept apart from DEFER, never a hit.
  { name: 'FA retry before a miss: RETRY', rows: [FA('HRHM')], numTokens: 16, expected: RETRY },
  { name: 'FA retry after a miss is moot', rows: [FA('HHMR')], numTokens: 16, expected: 8 },
  {
    name: 'FA pending and retry: RETRY (less is known)',
    rows: [FA('PHRH')],
    numTokens: 16,
    expected: RETRY,
  },
  {
    name: 'SW retry right of a whole window: RETRY (it may hide a window further right)',
    rows: [FA('HHHHHHHH'), SW(2, 'HHHHHHRH')],
    numTokens: 33,
    expected: RETRY,
  },
  {
    name: 'SW retry left of the rightmost window is moot',
    rows: [FA('HHHHHHHH'), SW(2, 'RHHHHHHH')],
    numTokens: 33,
    expected: 32,
  },
  {
    name: 'a retry beyond a hit other groups shortened is dropped when everyone is asked again',
    rows: [FA('HHHHHHHH'), SW(3, 'HHHHHHHR'), SW(2, 'HHHHHHMM')],
    numTokens: 33,
    expected: 24,
  },
  {
    name: 'SW pending left of the rightmost window is moot',
    rows: [FA('HHHHHHHH'), SW(2, 'PHHHHHHH')],
    numTokens: 33,
    expected: 32,
  },
  {
    name: 'SW only the window matters, not the chunks before it',
    rows: [FA('HHHHHHHH'), SW(2, 'MMMMMMHH')],
    numTokens: 33,
    expected: 32,
  },
  // An unverified EAGLE windowed group: W + 1 hits, then the tail is dropped.
  {
    name: 'SW EAGLE needs W+1',
    rows: [FA('HHHHHHHH'), SW(2, 'MMMMMHHH', true)],
    numTokens: 33,
    expected: 28,
  },
  {
    name: 'SW EAGLE with only W hits falls back to the leading run',
    rows: [FA('HHHHHHHH'), SW(2, 'MMMMMMHH', true)],
    numTokens: 33,
    expected: 0,
  },
  // Groups iterate until they agree.
  {
    name: 'a narrower window shortens the hit; the wider one is asked again',
    rows: [FA('HHHHHHHH'), SW(3, 'HHHHMHHH'), SW(2, 'HHHHHHHM')],
    numTokens: 33,
    expected: 16,
  },
  {
    name: 'a deferral beyond a shorter hit is dropped when everyone is asked again',
    rows: [FA('HHHHHHHH'), SW(3, 'HHHHHHHP'), SW(2, 'HHHHHHMM')],
    numTokens: 33,
    expected: 24,
  },
  {
    name: 'a deferral within the agreed hit stands',
    rows: [FA('HHHHHHHH'), SW(3, 'HHHHHPHH'), SW(2, 'HHHHHHMM')],
    numTokens: 33,
    expected: DEFER,
  },
  {
    name: 'FA shorter than the windows bounds them',
    rows: [FA('HHHHHMHH'), SW(2, 'HHHHHHHH')],
    numTokens: 33,
    expected: 20,
  },
  // The local prefix, the load cap and the opt-out.
  {
    name: 'local prefix: hit beyond it',
    rows: [FA('HHHHHHHH')],
    numTokens: 32,
    local: 8,
    expected: 24,
  },
  {
    name: 'local prefix: misses below it do not matter',
    rows: [FA('MMHHHHHH')],
    numTokens: 32,
    local: 8,
    expected: 24,
  },
  {
    name: 'local prefix: less than a chunk left',
    rows: [FA('HHHHHHHH'), SW(2, 'HHHHHHHH')],
    numTokens: 33,
    local: 30,
    expected: 0,
  },
  {
    name: 'maxLoadTokens caps the hit',
    rows: [FA('HHHHHHHH')],
    numTokens: 32,
    maxLoadTokens: 12,
    expected: 12,
  },
  {
    name: 'maxLoadTokens: the window must be full at the capped hit',
    rows: [FA('HHHHHHHH'), SW(2, 'HHHHMHHH')],
    numTokens: 33,
    maxLoadTokens: 24,
    expected: 16,
  },
  {
    name: 'skip reading the prefix cache',
    rows: [FA('HHHH')],
    numTokens: 16,
    skip: true,
    expected: 0,
  },
];

describe('lookupHitTokens: the table', () => {
  it.each(CASES)('$name', (c) => {
    expect(run(c)).toBe(c.expected);
  });
});

describe('the scans', () => {
  const s = (x: string) => [...x].map((l) => STATE[l]!);
  it('maximalPrefix counts to the first miss; pending before it defers', () => {
    expect(maximalPrefix(s('HHHM'))).toBe(3);
    expect(maximalPrefix(s(''))).toBe(0);
    expect(maximalPrefix(s('HPHM'))).toBe(DEFER);
    expect(maximalPrefix(s('HMP'))).toBe(1);
  });
  it('slidingWindow returns the end of the rightmost full window, else the leading run', () => {
    expect(slidingWindow(s('HHMHHHM'), 3)).toBe(6);
    expect(slidingWindow(s('HHMHHMH'), 3)).toBe(2);
    expect(slidingWindow(s('HHHH'), 1)).toBe(4);
    expect(slidingWindow(s('MHHP'), 2)).toBe(DEFER);
    expect(slidingWindow(s('PHHMHH'), 2)).toBe(6);
  });
  it('slidingWindow: a pending chunk behind a gap does not defer (vLLM test_pending_chunk_behind_gap_does_not_defer)', () => {
    // vLLM's row: window 2 over [HIT, HIT, MISS, HIT_PENDING] answers 2.
    expect(slidingWindow(s('HHMP'), 2)).toBe(2);
    // A pending run to the right of a gap, shorter than the window, never defers ...
    expect(slidingWindow(s('HHHMPH'), 3)).toBe(3);
    expect(slidingWindow(s('MHHMP'), 3)).toBe(0);
    // ... but one as long as the window is the answer, and defers.
    expect(slidingWindow(s('HHMPH'), 2)).toBe(DEFER);
  });
  it("maximalPrefix: RETRY apart from DEFER (vLLM's TestMaximalPrefixLookup retry rows)", () => {
    expect(maximalPrefix(s('RH'))).toBe(RETRY); // test_retry_defers
    expect(maximalPrefix(s('HR'))).toBe(RETRY); // test_retry_after_hit_defers
    expect(maximalPrefix(s('RMH'))).toBe(RETRY); // test_retry_stops_at_miss
    expect(maximalPrefix(s('PH'))).toBe(DEFER); // test_hit_pending_defers
    expect(maximalPrefix(s('PMH'))).toBe(DEFER); // test_hit_pending_does_not_stop_scan
    expect(maximalPrefix(s('HMR'))).toBe(1);
  });
  it("slidingWindow: RETRY apart from DEFER (vLLM's TestSlidingWindowLookup retry rows)", () => {
    expect(slidingWindow(s('HR'), 2)).toBe(RETRY); // test_retry_defers
    expect(slidingWindow(s('HHRH'), 2)).toBe(RETRY); // test_retry_with_full_window_still_defers
    expect(slidingWindow(s('HP'), 2)).toBe(DEFER); // test_hit_pending_counts_as_hit
    expect(slidingWindow(s('HPH'), 3)).toBe(DEFER); // test_hit_pending_does_not_break_streak
    // A retry does not count toward a run: [R, H] with a window of 2 has no window.
    expect(slidingWindow(s('RHH'), 2)).toBe(3);
  });
  it('lookupOrder puts full attention first, then windows widest first', () => {
    const g = (w: number | null): LookupGroup => ({
      tokensPerChunk: 4,
      windowChunks: w,
      eagle: false,
    });
    expect(lookupOrder([g(2), g(null), g(8), g(2), g(null)])).toEqual([1, 4, 2, 0, 3]);
  });
  it('combineLevels: a hit anywhere hits, else pending anywhere defers, else a retry anywhere retries', () => {
    const at =
      (m: Record<string, ChunkState>) =>
      (k: bigint): ChunkState =>
        m[String(k)] ?? 'miss';
    const a = at({ 1: 'hit', 2: 'pending', 4: 'retry', 5: 'retry', 6: 'hit' });
    const b = at({ 2: 'hit', 3: 'pending', 4: 'miss', 5: 'pending', 6: 'retry' });
    const both = combineLevels([a, b]);
    expect([0n, 1n, 2n, 3n, 4n, 5n, 6n].map(both)).toEqual([
      'miss',
      'hit',
      'hit',
      'pending',
      'retry',
      'pending',
      'hit',
    ]);
  });
});

describe("the recompute budget (vLLM's max_recompute_pending_tokens)", () => {
  const s = (x: string) => [...x].map((l) => STATE[l]!);
  it("maximalPrefix replays TestMaximalPrefixLookup's budget rows", () => {
    // test_short_pending_run_is_cut_before_first_pending: [H, P, H, P], 3 chunks of budget.
    expect(maximalPrefix(s('HPHP'), 3)).toBe(1);
    // test_pending_run_over_budget_defers: the run counts ready chunks after the first pending one.
    expect(maximalPrefix(s('HPHP'), 2)).toBe(DEFER);
    // test_leading_pending_chunk_within_budget_is_a_miss.
    expect(maximalPrefix(s('P'), 1)).toBe(0);
    // test_retry_defers_regardless_of_budget.
    expect(maximalPrefix(s('HR'), 10)).toBe(RETRY);
    // No budget: always wait (vLLM's 0).
    expect(maximalPrefix(s('HHHP'), 0)).toBe(DEFER);
  });
  const groups: LookupGroup[] = [{ tokensPerChunk: 4, windowChunks: null, eagle: false }];
  const ask = (budget: number, states = 'HPH') => {
    const keys = [[...states].map((_, i) => BigInt(i))];
    return lookupHitTokens(
      groups,
      { numTokens: 4 * states.length + 1, keys, maxRecomputePendingTokens: budget },
      (k) => STATE[states[Number(k)]!]!,
    );
  };
  it('test_recompute_budget_decides_whether_pending_chunks_are_awaited: [H, P, H] with 4-token chunks', () => {
    // A budget covering the two chunks waiting would gain loads the ready chunk at once ...
    expect(ask(8)).toBe(4);
    // ... a smaller one defers as before; the budget is counted in whole chunks.
    expect(ask(4)).toBe(DEFER);
    expect(ask(7)).toBe(DEFER);
    expect(ask(0)).toBe(DEFER);
  });
  it('a sliding-window group is not cut by the budget (vLLM budgets the maximal prefix only)', () => {
    const hybrid: LookupGroup[] = [...groups, { tokensPerChunk: 4, windowChunks: 2, eagle: false }];
    const keys = [0, 1].map((g) => [0, 1, 2, 3].map((c) => BigInt(g * 10 + c)));
    const states: Record<string, ChunkState> = { 13: 'pending' };
    const answer = lookupHitTokens(
      hybrid,
      { numTokens: 17, keys, maxRecomputePendingTokens: 64 },
      (k) => states[String(k)] ?? 'hit',
    );
    expect(answer).toBe(DEFER);
  });
  it('a budget does not cut a full-attention hit whose cut also loses a window: the whole answer is budgeted', () => {
    // Full attention [H, P, H], window of 2 chunks over [M, H, H], 13 tokens.
    // Cutting before the pending chunk leaves 1 chunk, where the window has
    // only its miss: the answer would be 0 against 12 once the entry lands,
    // 12 tokens given up for a budget of 8. (Found by the independent
    // specification over every tier state with budgets; answered 0 before.)
    const hybrid: LookupGroup[] = [...groups, { tokensPerChunk: 4, windowChunks: 2, eagle: false }];
    const keys = [0, 1].map((g) => [0, 1, 2].map((c) => BigInt(g * 10 + c)));
    const states: Record<string, ChunkState> = { 1: 'pending', 10: 'miss' };
    const at = (budget: number) =>
      lookupHitTokens(
        hybrid,
        { numTokens: 13, keys, maxRecomputePendingTokens: budget },
        (k) => states[String(k)] ?? 'hit',
      );
    expect(at(8)).toBe(DEFER);
    // A budget that covers the whole loss takes the ready answer at once.
    expect(at(12)).toBe(0);
  });
  it('test_negative_recompute_budget_is_rejected: resolveConfig refuses it with a ConfigError naming the field', () => {
    const base = { groups: [{ kind: 'full' as const, tokensPerBlock: 4 }], tokensPerHash: 4 };
    for (const bad of [-1, 0.5, Number.NaN, '8']) {
      expect(() => resolveConfig({ ...base, maxRecomputePendingTokens: bad as number })).toThrow(
        ConfigError,
      );
      expect(() => resolveConfig({ ...base, maxRecomputePendingTokens: bad as number })).toThrow(
        /maxRecomputePendingTokens/,
      );
    }
    expect(resolveConfig(base).maxRecomputePendingTokens).toBe(0);
    expect(resolveConfig({ ...base, maxRecomputePendingTokens: 8 }).maxRecomputePendingTokens).toBe(
      8,
    );
  });
});

describe('touchRanges and loadPlan', () => {
  const groups = [
    { tokensPerChunk: 8, tokensPerBlock: 4, windowChunks: null, eagle: true },
    { tokensPerChunk: 8, tokensPerBlock: 4, windowChunks: 2, eagle: false },
  ];
  it('touches every key of full attention, the window below the hit and after it for a window', () => {
    expect(touchRanges(groups, [10, 10], 48)).toEqual([
      { group: 0, from: 0, to: 10 },
      { group: 1, from: 4, to: 10 },
    ]);
    expect(touchRanges(groups, [10, 10], 0)).toEqual([
      { group: 0, from: 0, to: 10 },
      { group: 1, from: 0, to: 10 },
    ]);
  });
  it('loads only what is missing, and only the window of a windowed group', () => {
    expect(loadPlan(groups, 0, 48)).toEqual([
      { group: 0, firstChunk: 0, endChunk: 6, firstBlock: 0, endBlock: 12, cursor: 6 },
      { group: 1, firstChunk: 4, endChunk: 6, firstBlock: 8, endBlock: 12, cursor: 6 },
    ]);
    // A local prefix of 3 blocks: the first loaded chunk is partial.
    expect(loadPlan(groups, 12, 36, 'request-level')).toEqual([
      { group: 0, firstChunk: 1, endChunk: 6, firstBlock: 3, endBlock: 12, cursor: null },
      { group: 1, firstChunk: 4, endChunk: 6, firstBlock: 8, endBlock: 12, cursor: null },
    ]);
  });
});

describe('lookupHitTokens: properties', () => {
  const letter = fc.constantFrom<ChunkState>('hit', 'hit', 'hit', 'miss');
  const groupArb = fc.record({
    w: fc.option(fc.integer({ min: 1, max: 4 }), { nil: null }),
    eagle: fc.boolean(),
  });
  it('with no pending entry the answer is a hit every group can serve from whole chunks', () => {
    fc.assert(
      fc.property(
        fc.array(groupArb, { minLength: 1, maxLength: 4 }),
        fc.integer({ min: 0, max: 48 }),
        fc.array(fc.array(letter, { minLength: 12, maxLength: 12 }), {
          minLength: 4,
          maxLength: 4,
        }),
        (specs, numTokens, rows) => {
          const groups: LookupGroup[] = specs.map((s) => ({
            tokensPerChunk: TPC,
            windowChunks: s.w,
            eagle: s.eagle,
          }));
          const chunks = Math.floor(numTokens / TPC);
          const keys = groups.map((_, g) =>
            Array.from({ length: chunks }, (_, c) => BigInt(g * 100 + c)),
          );
          const state = (k: bigint) => rows[Number(k / 100n)]![Number(k % 100n)]!;
          const hit = lookupHitTokens(groups, { numTokens, keys }, state);
          expect(hit).not.toBe(DEFER);
          const h = hit as number;
          if (h === 0) return;
          expect(h).toBeGreaterThanOrEqual(TPC);
          const windowed = groups.some((g) => g.windowChunks !== null);
          expect(h).toBeLessThanOrEqual(windowed ? numTokens - 1 : numTokens);
          const end = Math.ceil(h / TPC);
          groups.forEach((g, i) => {
            const from = g.windowChunks === null ? 0 : Math.max(0, end - g.windowChunks);
            for (let c = from; c < end; c += 1) expect(rows[i]![c]).toBe('hit');
          });
        },
      ),
      { numRuns: 300 },
    );
  });
  it('a pending entry never turns a hit into a miss: an answer given despite one stands either way', () => {
    const stateArb = fc.constantFrom<ChunkState>('hit', 'hit', 'pending', 'miss');
    fc.assert(
      fc.property(
        fc.array(fc.array(stateArb, { minLength: 8, maxLength: 8 }), {
          minLength: 2,
          maxLength: 2,
        }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: 3 }),
        (rows, w1, w2) => {
          const groups: LookupGroup[] = [
            { tokensPerChunk: TPC, windowChunks: null, eagle: false },
            { tokensPerChunk: TPC, windowChunks: w1, eagle: false },
            { tokensPerChunk: TPC, windowChunks: w2, eagle: false },
          ];
          const keys = [0, 1, 2].map((g) => rows[0]!.map((_, c) => BigInt(g * 100 + c)));
          const at = (k: bigint) => rows[Number(k / 100n) - 1]![Number(k % 100n)]!;
          const ask = (pending: ChunkState) =>
            lookupHitTokens(groups, { numTokens: 33, keys }, (k) => {
              if (k < 100n) return 'hit';
              const s = at(k);
              return s === 'pending' ? pending : s;
            });
          const asked = ask('pending');
          if (asked !== DEFER) {
            expect(ask('hit')).toBe(asked);
            expect(ask('miss')).toBe(asked);
          } else {
            expect(rows.flat()).toContain('pending');
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
