// The fuzzer's independent specification (src/fuzz/spec/): worked examples
// from first principles, then exhaustive agreement with the rule the planner
// and the store use (src/ready.ts, src/lookup.ts) over every small request
// and tier state, so the two statements back each other. This test may import
// both; the oracle itself imports neither (checked below).
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import type { Config, ConfigInput } from '../../src/config.js';
import { NO_CAP, Status } from '../../src/layout.js';
import { lookupHitTokens } from '../../src/lookup.js';
import type { ChunkState, LookupUnsafe } from '../../src/lookup.js';
import { offloadableTokens, readyPrefix, tokenChunks } from '../../src/ready.js';
import { specLookup, specLookupMismatch } from '../../src/fuzz/spec/lookup-spec.js';
import type { SpecLookup } from '../../src/fuzz/spec/lookup-spec.js';
import {
  specReadyChunks,
  specTokenChunks,
  specTokenOffloadable,
} from '../../src/fuzz/spec/ready-spec.js';
import type { SpecRequest } from '../../src/fuzz/spec/ready-spec.js';

const base = { tokensPerHash: 4, blocksPerChunk: 1, maxBlocksPerRequest: 16 };
const FULL: ConfigInput = { ...base, groups: [{ kind: 'full', tokensPerBlock: 4 }] };
const EAGLE: ConfigInput = { ...base, groups: [{ kind: 'full', tokensPerBlock: 4, eagle: true }] };
const HYBRID: ConfigInput = {
  ...base,
  groups: [
    { kind: 'full', tokensPerBlock: 4 },
    { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8 },
  ],
};
const BPC2: ConfigInput = {
  ...base,
  tokensPerHash: 2,
  blocksPerChunk: 2,
  groups: [{ kind: 'full', tokensPerBlock: 2, eagle: true }],
};

function req(over: Partial<SpecRequest>): SpecRequest {
  return {
    status: Status.running,
    promptTokens: 8,
    numTokens: 8,
    computedTokens: 0,
    scheduledTokens: 0,
    maxOffloadTokens: NO_CAP,
    ...over,
  };
}

describe('the specification of the ready rule, by example', () => {
  const config = resolveConfig(FULL);
  it("a finished request's last sampled token is never offloaded; its prompt always is", () => {
    const r = req({ status: Status.finished, promptTokens: 8, numTokens: 11 });
    expect([7, 8, 9, 10].map((t) => specTokenOffloadable(config, r, t))).toEqual([
      true,
      true,
      true,
      false,
    ]);
    const promptOnly = req({ status: Status.finished, promptTokens: 8, numTokens: 8 });
    expect(specTokenOffloadable(config, promptOnly, 7)).toBe(true);
  });

  it('an aborted request offloads only what was computed, whatever was scheduled', () => {
    const r = req({ status: Status.aborted, computedTokens: 5, scheduledTokens: 3 });
    expect(specTokenChunks(config, r, config.groups[0]!)).toBe(1);
  });

  it('EAGLE: while decoding the trailing chunk waits; at finish it is final again', () => {
    const eagle = resolveConfig(EAGLE);
    const g = eagle.groups[0]!;
    const decoding = req({ numTokens: 13, computedTokens: 12, scheduledTokens: 1 });
    expect(specTokenChunks(eagle, decoding, g)).toBe(2);
    expect(specTokenChunks(eagle, { ...decoding, status: Status.finished }, g)).toBe(3);
    const prefill = req({ numTokens: 8, computedTokens: 0, scheduledTokens: 8 });
    expect(specTokenChunks(eagle, prefill, g)).toBe(2);
  });

  it('a chunk is ready only with its key and every one of its blocks published', () => {
    const c = resolveConfig(BPC2);
    const r = req({ computedTokens: 8 });
    expect(specReadyChunks(c, r, c.groups[0]!, 2, 4)).toBe(2);
    expect(specReadyChunks(c, r, c.groups[0]!, 1, 4)).toBe(1);
    expect(specReadyChunks(c, r, c.groups[0]!, 2, 3)).toBe(1); // chunk 1 has one block of two
  });
});

/** Every small request of a config: statuses, token counts, horizons, caps. */
function* requests(config: Config): Generator<SpecRequest> {
  const caps = [NO_CAP, 0, 5, 9];
  for (const status of [Status.running, Status.finished, Status.aborted])
    for (let prompt = 1; prompt <= 9; prompt += 1)
      for (let num = prompt; num <= prompt + 4; num += 1)
        for (let computed = 0; computed <= num; computed += 3)
          for (let scheduled = 0; computed + scheduled <= num + 3; scheduled += 2)
            for (const cap of caps)
              yield {
                status,
                promptTokens: prompt,
                numTokens: num,
                computedTokens: computed,
                scheduledTokens: scheduled,
                maxOffloadTokens: cap,
              };
  void config;
}

describe('the specification agrees with the rule the planner uses (exhaustive, small)', () => {
  for (const [name, input] of [
    ['full', FULL],
    ['eagle', EAGLE],
    ['hybrid', HYBRID],
    ['eagle, 2 blocks per chunk', BPC2],
    ['prompt only', { ...EAGLE, offloadPromptOnly: true }],
  ] as const) {
    it(`${name}: token chunks and ready prefix`, () => {
      const config = resolveConfig(input);
      let n = 0;
      const wrong: string[] = [];
      for (const r of requests(config)) {
        for (const g of config.groups) {
          const tc = tokenChunks(r, g, offloadableTokens(r, config));
          if (specTokenChunks(config, r, g) !== tc) wrong.push(`token chunks ${JSON.stringify(r)}`);
          for (const keys of [0, 1, 3])
            for (const blocks of [0, 1, 2, 5]) {
              const ready = readyPrefix(tc, keys, blocks, config.blocksPerChunk);
              if (specReadyChunks(config, r, g, keys, blocks) !== ready)
                wrong.push(`ready ${JSON.stringify(r)} keys ${keys} blocks ${blocks}`);
              n += 1;
            }
        }
      }
      expect(wrong.slice(0, 3)).toEqual([]);
      expect(n).toBeGreaterThan(1000);
    });
  }
});

/** Every tier state of `cells` keys over `all` states (all.length^cells). */
function* tierStates(
  cells: number,
  all: readonly ChunkState[] = ['hit', 'miss', 'pending', 'retry'],
): Generator<ChunkState[]> {
  const n = all.length;
  for (let i = 0; i < n ** cells; i += 1) {
    const s: ChunkState[] = [];
    let x = i;
    for (let c = 0; c < cells; c += 1) {
      s.push(all[x % n]!);
      x = Math.floor(x / n);
    }
    yield s;
  }
}

/** The store loop's call (the runtime's limits), as src/runtime/store-loop.ts makes it. */
function storeAnswer(
  config: Config,
  lookup: SpecLookup,
  state: (k: bigint) => ChunkState,
  unsafe: LookupUnsafe = {},
  maxRecomputePendingTokens = 0,
) {
  const tpc = config.groups[0]!.tokensPerChunk;
  const window = unsafe.unsafeLastTokenLoaded !== true && config.groups.some((g) => g.windowChunks);
  const loadable = Math.min(lookup.numTokens - (window ? 1 : 0), lookup.maxLoadTokens ?? Infinity);
  return lookupHitTokens(
    config.groups,
    {
      numTokens: lookup.numTokens,
      keys: lookup.keys,
      maxLoadTokens: Math.floor(Math.max(0, loadable) / tpc) * tpc,
      skipReadingPrefixCache: lookup.skipReadingPrefixCache,
      maxRecomputePendingTokens,
    },
    state,
    unsafe,
  );
}

/**
 * Counts the lookups over every tier state (hit, miss, pending, retry) and
 * recompute budget (none, one chunk, two) where the answer breaks the
 * specification.
 */
function disagreements(input: ConfigInput, unsafe: LookupUnsafe = {}): [number, number] {
  const config = resolveConfig(input);
  const groups = config.groups.length;
  const tpc = config.groups[0]!.tokensPerChunk;
  const chunks = groups === 1 ? 5 : 3;
  let bad = 0;
  let n = 0;
  for (const extra of [0, 1]) {
    for (const cap of [undefined, 4, 9]) {
      const numTokens = chunks * tpc + extra;
      const keys = config.groups.map((_, g) =>
        Array.from({ length: chunks }, (_, c) => BigInt(100 * g + c)),
      );
      for (const s of tierStates(chunks * groups)) {
        const state = (k: bigint) => s[Math.floor(Number(k) / 100) * chunks + (Number(k) % 100)]!;
        const lookup = { numTokens, keys, maxLoadTokens: cap, skipReadingPrefixCache: false };
        for (const budget of [0, tpc, 2 * tpc]) {
          const answer = storeAnswer(config, lookup, state, unsafe, budget);
          const why = specLookupMismatch(specLookup(config, lookup, state), answer, budget);
          if (why !== undefined) bad += 1;
          n += 1;
        }
      }
    }
  }
  return [bad, n];
}

describe('the lookup specification agrees with the lookup the store uses (every tier state, small)', () => {
  for (const [name, input] of [
    ['full', FULL],
    ['eagle', EAGLE],
    ['hybrid', HYBRID],
  ] as const) {
    it(`${name}: no answer breaks the specification`, () => {
      const [bad, n] = disagreements(input);
      expect(n).toBeGreaterThan(1000);
      expect(bad).toBe(0);
    });
  }

  it('the broken rules break it: rule-lookup-long (EAGLE) and rule-last-token (window)', () => {
    expect(disagreements(EAGLE, { unsafeEagleTailKept: true })[0]).toBeGreaterThan(0);
    expect(disagreements(HYBRID, { unsafeLastTokenLoaded: true })[0]).toBeGreaterThan(0);
  });

  it('a deferral with nothing pending, and a number pending entries would change, both break it', () => {
    const config = resolveConfig(FULL);
    const keys = [[1n, 2n, 3n]];
    const lookup = { numTokens: 12, keys, maxLoadTokens: undefined, skipReadingPrefixCache: false };
    const allHit = specLookup(config, lookup, () => 'hit');
    expect(specLookupMismatch(allHit, 12)).toBeUndefined();
    expect(specLookupMismatch(allHit, 'defer')).toMatch(/no entry it reads is pending/);
    const second = specLookup(config, lookup, (k) => (k === 2n ? 'pending' : 'hit'));
    expect(specLookupMismatch(second, 4)).toMatch(/must defer/);
    expect(specLookupMismatch(second, 'defer')).toBeUndefined();
  });

  it('a retry answer needs an unanswered key among the reads; the budget bounds what a number gives up', () => {
    const config = resolveConfig(FULL);
    const keys = [[1n, 2n, 3n]];
    const lookup = { numTokens: 13, keys, maxLoadTokens: undefined, skipReadingPrefixCache: false };
    const pendingOnly = specLookup(config, lookup, (k) => (k === 2n ? 'pending' : 'hit'));
    expect(specLookupMismatch(pendingOnly, 'retry')).toMatch(/no key it reads is unanswered/);
    const unanswered = specLookup(config, lookup, (k) => (k === 2n ? 'retry' : 'hit'));
    expect(specLookupMismatch(unanswered, 'retry')).toBeUndefined();
    // 4 ready, 12 if the entries land: 8 given up.
    expect(specLookupMismatch(pendingOnly, 4, 8)).toBeUndefined();
    expect(specLookupMismatch(pendingOnly, 4, 7)).toMatch(/must defer/);
    expect(specLookupMismatch(unanswered, 4, 7)).toMatch(/must defer/);
  });
});

/** The decisions the oracle checks; the fuzzer may import names (policies, types) but none of these. */
const CHECKED = [
  'offloadableTokens',
  'tokenChunks',
  'keysExpected',
  'alignmentChunks',
  'storeReachable',
  'readyPrefix',
  'storeWindow',
  'combineLevels',
  'lookupOrder',
  'maximalPrefix',
  'slidingWindow',
  'lookupHitTokens',
  'touchRanges',
  'loadPlan',
];

describe('what the oracle shares', () => {
  it('no file of the fuzzer imports a rule (src/ready.ts) or lookup (src/lookup.ts) function the oracle checks', () => {
    const dir = join(import.meta.dirname, '../../src/fuzz');
    const files = [
      ...readdirSync(dir).map((f) => join(dir, f)),
      ...readdirSync(join(dir, 'spec')).map((f) => join(dir, 'spec', f)),
    ].filter((f) => f.endsWith('.ts'));
    expect(files.length).toBeGreaterThan(10);
    const found: string[] = [];
    for (const f of files) {
      const text = readFileSync(f, 'utf8');
      for (const m of text.matchAll(
        /import\s*(?:type\s*)?\{([^}]*)\}\s*from\s*'[./]*\/(ready|lookup)\.js'/g,
      )) {
        for (const name of m[1]!.split(',').map((x) => x.trim()))
          if (CHECKED.includes(name)) found.push(`${f}: ${name}`);
      }
    }
    expect(found).toEqual([]);
  });
});
