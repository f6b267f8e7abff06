// Regression for the seeds "[Bugfix][KV Offloading] Defer stores until block IDs
// are tracked" and "defer stores until metadata is ready": the token-derived
// store boundary ran ahead of the offload keys or of the tracked GPU block IDs;
// the old code asserted equal slice lengths (engine crash), a zip() would have
// moved the cursor past an unstored chunk (silent hole).
//
// Setup of both seed scenarios: one full-attention group, 4 tokens per block,
// 1 block per chunk, 4 tokens per hash; a running request with a 12-token
// prompt (3 chunks), cursor 0, 0 computed and 12 scheduled tokens.
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import type { ConfigInput } from '../../src/config.js';
import { LegacyAssertionError } from '../../src/errors.js';
import { loadHashing, promptKeys } from '../../src/hashing.js';
import type { StorePolicy } from '../../src/ready.js';
import { HostTier } from '../../src/tier/host-tier.js';
import type { OffloadTier, PrepareStoreResult } from '../../src/tier/types.js';
import { local, tokens } from '../helpers/local.js';
import { SMALL_ONE_GROUP } from '../helpers/configs.js';

const SEED: ConfigInput = SMALL_ONE_GROUP;
const PROMPT = tokens(12, 11);
const [B1, B2, B3] = [21, 22, 23];

/** k0, k1, k2: the offload keys of the prompt's three chunks, computed independently. */
async function seedKeys(): Promise<bigint[]> {
  return promptKeys(resolveConfig(SEED), await loadHashing(), PROMPT)[0]!;
}

/** A host tier that records every offer and can be told to refuse the next ones. */
class RecordingTier extends HostTier {
  readonly offers: bigint[][] = [];
  refuse = 0;
  override prepareStore(keys: readonly bigint[]): PrepareStoreResult {
    this.offers.push([...keys]);
    if (this.refuse > 0) {
      this.refuse -= 1;
      return { ok: false, reason: 'cannot-allocate', needed: keys.length, evictable: 0 };
    }
    return super.prepareStore(keys);
  }
}

async function seedRequest(tier: OffloadTier = new HostTier(16), policy?: StorePolicy) {
  const lo = await local(SEED, policy === undefined ? { tier } : { tier, policy });
  const h = lo.open({ requestId: 1, promptTokens: PROMPT });
  lo.progress(h, 0, 12); // running: 12 tokens scheduled, 3 token chunks
  return { lo, h };
}

describe('SR-1: block IDs lag', () => {
  it('stores the two ready chunks, then exactly chunk 3 once its block ID arrives', async () => {
    const [k0, k1, k2] = await seedKeys();
    const { lo, h } = await seedRequest();
    lo.hash(h); // 3 hashes: keys k0, k1, k2
    lo.appendBlocks(h, 0, [B1, B2]); // only two block IDs tracked
    expect(lo.groupProgress(h, 0)).toEqual({
      tokenChunks: 3,
      keys: 3,
      blocks: 2,
      ready: 2,
      cursor: 0,
    });

    // Step A: ready 2. One job {k0, k1} from [b1, b2]; cursor 2; no assertion.
    const a = lo.plan();
    expect(a).toHaveLength(1);
    expect(a[0]!.chunks.map((c) => c.key)).toEqual([k0, k1]);
    expect(a[0]!.chunks.map((c) => c.blocks)).toEqual([[B1], [B2]]);
    expect(a[0]!.chunks.map((c) => c.positions)).toEqual([[0], [1]]);
    expect(a[0]!.chunks.map((c) => c.group)).toEqual([0, 0]);
    expect(lo.cursor(h, 0)).toBe(2);
    lo.complete(a[0]!);
    expect(lo.plan()).toEqual([]); // nothing new while b3 is missing: deferred, not skipped
    expect(lo.cursor(h, 0)).toBe(2);

    // Step B: b3 arrives; horizon 12 computed + 1 scheduled. One job {k2} from [b3].
    lo.appendBlocks(h, 0, [B3]);
    lo.progress(h, 12, 1);
    const b = lo.plan();
    expect(b).toHaveLength(1);
    expect(b[0]!.chunks.map((c) => c.key)).toEqual([k2]);
    expect(b[0]!.chunks.map((c) => c.chunk)).toEqual([2]);
    expect(b[0]!.chunks[0]!.blocks).toEqual([B3]);
    expect(b[0]!.chunks[0]!.positions).toEqual([2]);
    expect(lo.cursor(h, 0)).toBe(3);
    lo.complete(b[0]!);
    expect(lo.tier.lookup([k0!, k1!, k2!])).toBe(3);
  });

  it('the old code crashes on step A, and zip() leaves k2 as a permanent hole', async () => {
    const [k0, k1, k2] = await seedKeys();
    for (const policy of ['legacy-assert', 'legacy-zip'] as const) {
      const { lo, h } = await seedRequest(new HostTier(16), policy);
      lo.hash(h);
      lo.appendBlocks(h, 0, [B1, B2]);
      if (policy === 'legacy-assert') {
        expect(() => lo.plan()).toThrow(LegacyAssertionError);
        continue;
      }
      for (const j of lo.plan()) lo.complete(j);
      expect(lo.cursor(h, 0)).toBe(3); // moved past the unstored chunk
      lo.appendBlocks(h, 0, [B3]);
      lo.progress(h, 12, 1);
      expect(lo.plan()).toEqual([]);
      expect(lo.tier.lookup([k0!, k1!, k2!])).toBe(2);
    }
  });
});

describe('SR-2: keys lag (symmetric)', () => {
  it('stores the two hashed chunks, then exactly chunk 3 once its hash arrives', async () => {
    const [k0, k1, k2] = await seedKeys();
    const { lo, h } = await seedRequest();
    lo.appendBlocks(h, 0, [B1, B2, B3]);
    lo.hash(h, 2); // only two hashes: keys k0, k1
    expect(lo.groupProgress(h, 0)).toMatchObject({ tokenChunks: 3, keys: 2, blocks: 3, ready: 2 });

    // Step A: ready min(3, 2, 3) = 2. Job {k0, k1} from [b1, b2]; cursor 2.
    const [a, ...noMore] = lo.plan();
    expect(noMore).toEqual([]);
    expect(a!.chunks.map((c) => c.key)).toEqual([k0, k1]);
    expect(a!.chunks.map((c) => c.blocks)).toEqual([[B1], [B2]]);
    expect(lo.cursor(h, 0)).toBe(2);
    lo.complete(a!);

    // Step B: the third hash arrives; key k2 is published. Job {k2} from [b3]; cursor 3.
    expect(lo.hash(h)).toBe(1);
    const [b] = lo.plan();
    expect(b!.chunks.map((c) => c.key)).toEqual([k2]);
    expect(b!.chunks[0]!.blocks).toEqual([B3]);
    expect(lo.cursor(h, 0)).toBe(3);
  });

  it('the old code crashes here too; zip() skips k2 forever', async () => {
    const [k0, k1, k2] = await seedKeys();
    const crash = await seedRequest(new HostTier(16), 'legacy-assert');
    crash.lo.appendBlocks(crash.h, 0, [B1, B2, B3]);
    crash.lo.hash(crash.h, 2);
    expect(() => crash.lo.plan()).toThrow(LegacyAssertionError);

    const { lo, h } = await seedRequest(new HostTier(16), 'legacy-zip');
    lo.appendBlocks(h, 0, [B1, B2, B3]);
    lo.hash(h, 2);
    for (const j of lo.plan()) lo.complete(j);
    lo.hash(h);
    expect(lo.plan()).toEqual([]);
    expect(lo.cursor(h, 0)).toBe(3);
    expect(lo.tier.lookup([k0!, k1!, k2!])).toBe(2);
  });
});

describe('lag combined with the tier', () => {
  it('lag plus an allocation failure: cursor stays, the next offer is only the ready prefix', async () => {
    const [k0, k1, k2] = await seedKeys();
    const tier = new RecordingTier(16);
    const { lo, h } = await seedRequest(tier);
    lo.hash(h);
    lo.appendBlocks(h, 0, [B1, B2]);

    tier.refuse = 1;
    expect(lo.plan()).toEqual([]);
    expect(lo.cursor(h, 0)).toBe(0); // unchanged on allocation failure
    expect(lo.counters.allocationFailures).toBe(1);
    expect(tier.offers).toEqual([[k0, k1]]); // never the lagging k2

    const [retry] = lo.plan();
    expect(tier.offers).toEqual([
      [k0, k1],
      [k0, k1],
    ]);
    expect(retry!.chunks.map((c) => c.key)).toEqual([k0, k1]);
    expect(lo.cursor(h, 0)).toBe(2);
    lo.complete(retry!);

    lo.appendBlocks(h, 0, [B3]);
    const [last] = lo.plan();
    expect(tier.offers[2]).toEqual([k2]);
    expect(last!.chunks.map((c) => c.key)).toEqual([k2]);
    expect(lo.cursor(h, 0)).toBe(3);
    // The refused pass pinned nothing for good: only the live job's block is pinned.
    expect(Atomics.load(lo.state.pins, B1)).toBe(0);
    expect(Atomics.load(lo.state.pins, B3)).toBe(1);
  });

  it('lag plus every key already present: the cursor moves to ready, not beyond', async () => {
    const [k0, k1, k2] = await seedKeys();
    const tier = new RecordingTier(16);
    // Another request already stored the whole prompt.
    const prepared = tier.prepareStore([k0!, k1!, k2!]);
    expect(prepared.ok).toBe(true);
    tier.completeStore([k0!, k1!, k2!]);
    tier.offers.length = 0;

    const { lo, h } = await seedRequest(tier);
    lo.hash(h);
    lo.appendBlocks(h, 0, [B1, B2]);
    expect(lo.plan()).toEqual([]); // keysToStore is empty: no job
    expect(tier.offers).toEqual([[k0, k1]]);
    expect(lo.cursor(h, 0)).toBe(2); // ready, not the token boundary 3
    expect(lo.counters.chunksAlreadyPresent).toBe(2);
    expect(Atomics.load(lo.state.pins, B1)).toBe(0); // nothing left pinned

    lo.appendBlocks(h, 0, [B3]);
    expect(lo.plan()).toEqual([]);
    expect(tier.offers[1]).toEqual([k2]);
    expect(lo.cursor(h, 0)).toBe(3);
    expect(lo.counters.chunksAlreadyPresent).toBe(3);
  });
});
