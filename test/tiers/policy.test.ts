// The host tier's cache policies on small sequences worked by hand. Each step
// says what the policy holds after it (oldest first); the tier's rules (an
// entry being written or read is never evicted, nor one offered in the same
// store) hold under every policy.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, UnknownPolicyError } from '../../src/errors.js';
import { HostTier } from '../../src/tier/host-tier.js';
import { ArcPolicy, LruPolicy, S3FifoPolicy } from '../../src/tier/policy/index.js';
import type { PolicyEntry } from '../../src/tier/policy/index.js';
import { ONE_GROUP } from '../helpers/configs.js';
import { chunkIds, local, planAndComplete, tokens } from '../helpers/local.js';

const [A, B, C, D, E, F] = [1n, 2n, 3n, 4n, 5n, 6n];

function store(tier: HostTier, ...keys: bigint[]): readonly bigint[] {
  const out = tier.prepareStore(keys);
  if (!out.ok) throw new Error(`store of ${keys.join(',')} refused`);
  tier.completeStore(out.keysToStore);
  return out.evicted;
}

function resident(tier: HostTier, ...keys: bigint[]): bigint[] {
  return keys.filter((k) => tier.slotOf(k) !== undefined);
}

describe('LRU (the host tier default, unchanged)', () => {
  it('evicts the least recent idle entry; touch walks in reverse so the first key ends most recent', () => {
    const tier = new HostTier(3);
    const lru = tier.policy as LruPolicy;
    store(tier, A, B, C); //                       A B C
    tier.touch([A]); //                            B C A
    expect(store(tier, D)).toEqual([B]); //        C A D
    tier.touch([C, A]); // A moves, then C:        D A C
    expect(lru.order()).toEqual([D, A, C]);
    expect(store(tier, E)).toEqual([D]); //        A C E
    // A is being read: passed over, C goes.
    tier.prepareLoad([A]);
    expect(store(tier, F)).toEqual([C]); //        A E F
    tier.completeLoad([A]);
    expect(lru.order()).toEqual([A, E, F]);
  });

  it('an entry being written is not moved by a touch and becomes most recent when published', () => {
    const tier = new HostTier(3);
    const lru = tier.policy as LruPolicy;
    store(tier, A);
    const out = tier.prepareStore([B, C]); //      A B(w) C(w)
    expect(out.ok).toBe(true);
    tier.touch([A, B, C]); // only A moves:        B C A
    expect(lru.order()).toEqual([B, C, A]);
    tier.completeStore([B]); //                    C A B
    expect(lru.order()).toEqual([C, A, B]);
  });
});

describe("ARC (vLLM's offloading ARC)", () => {
  it('moves touched entries to T2, learns from ghost hits, evicts by the T1 target', () => {
    const tier = new HostTier(3, { policy: 'arc' });
    const arc = tier.policy as ArcPolicy;
    store(tier, A, B, C); //                  T1 A B C
    tier.touch([A]); // A is readable:        T1 B C   T2 A
    // T1 (2) >= floor(target 0): T1's oldest goes to B1.
    expect(store(tier, D)).toEqual([B]); //   T1 C D   T2 A   B1 B
    // B comes back in a lookup: B1 hit, target + max(1, |B2|/|B1| = 0) = 1.
    tier.touch([B]);
    expect(arc.targetT1).toBe(1);
    // Stored again: T1 (2) >= 1, C goes to B1; B leaves B1 and enters T1.
    expect(store(tier, B)).toEqual([C]); //   T1 D B   T2 A   B1 C
    // E is being written when touched: it stays in T1 (moved to its newest end); B moves to T2.
    const out = tier.prepareStore([E]); // T1 (2) >= 1: D goes.
    expect(out.ok && out.evicted).toEqual([D]); // T1 B E(w)  B1 C D
    tier.touch([E, B]); // reverse: B -> T2, then E -> newest of T1
    tier.completeStore([E]);
    expect(arc.lists()).toEqual({ t1: [E], t2: [A, B], b1: [C, D], b2: [] });
    // C in B1: target + max(1, |B2| 0 / |B1| 2) = 2, and C moves to B1's newest end.
    tier.touch([C]); //                       B1 D C
    expect(arc.targetT1).toBe(2);
    // T1 (1) < 2: T2's oldest, A, goes to B2.
    expect(store(tier, F)).toEqual([A]); //   T1 E F   T2 B   B1 D C   B2 A
    // A in B2: target - max(1, |B1| 2 / |B2| 1) = 0.
    tier.touch([A]);
    expect(arc.targetT1).toBe(0);
    expect(arc.lists()).toEqual({ t1: [E, F], t2: [B], b1: [D, C], b2: [A] });
  });

  it('refuses a store when T1 is below its target and T2 has no idle entry, as vLLM does', () => {
    const tier = new HostTier(3, { policy: 'arc' });
    const arc = tier.policy as ArcPolicy;
    store(tier, A, B, C);
    tier.touch([B, C]); //                     T1 A   T2 C B (reverse: C first, then B)
    expect(store(tier, D)).toEqual([A]); //    T1 D   T2 C B   B1 A
    tier.touch([A]); // B1 hit: target 1
    tier.touch([A]); // again: target 2
    expect(arc.targetT1).toBe(2);
    tier.prepareLoad([B, C]); // T2 is being read
    // T1 (1) < 2, so vLLM looks in T2 only and finds nothing idle: refused,
    // though D in T1 is idle (textbook ARC would take it).
    const refused = tier.prepareStore([E]);
    expect(refused.ok).toBe(false);
    expect(resident(tier, B, C, D)).toEqual([B, C, D]);
    tier.completeLoad([B, C]);
    expect(store(tier, E)).toEqual([C]); //    T2's oldest is C
  });
});

function entry(key: bigint): PolicyEntry {
  return { key, refCount: 0, prev: null, next: null, queue: -1, freq: 0 };
}

describe('S3-FIFO', () => {
  it('S is 10% of the capacity; read twice in S moves to M, else to the ghost; M reinserts while its counter lasts', () => {
    const s3 = new S3FifoPolicy(10); // S target 1, ghost holds 9 keys
    const [a, b, c] = [entry(A), entry(B), entry(C)];
    const all = (e: PolicyEntry) => e.refCount === 0;
    for (const e of [a, b, c]) s3.insert(e); //           S a b c
    s3.read(a);
    s3.read(a);
    s3.read(b);
    // |S| 3 >= 1: from S. a was read twice: to M (counter reset); b once: the victim, its key to G.
    expect(s3.evict(1, all)).toEqual([b]); //             S c   M a   G B
    expect(s3.queues()).toEqual({ small: [C], main: [A], ghost: [B] });
    const b2 = entry(B);
    s3.insert(b2); // B is in G: straight into M          S c   M a b   G -
    expect(s3.queues()).toEqual({ small: [C], main: [A, B], ghost: [] });
    s3.read(a); //                                         a 1
    for (let i = 0; i < 4; i += 1) s3.read(b2); //         b 3 (capped)
    expect(b2.freq).toBe(3);
    expect(s3.evict(1, all)).toEqual([c]); // |S| 1 >= 1   S -   M a b   G C
    // |S| 0 < 1: from M. a 1 -> 0, to M's end (M b a); b 3 -> 2 (M a b); a at 0 is the victim.
    // Then b alone: 2 -> 1 -> 0, then the victim.
    expect(s3.evict(2, all)).toEqual([a, b2]);
    expect(s3.queues()).toEqual({ small: [], main: [], ghost: [C] });
  });

  it('passes over entries the tier may not evict, where they stand', () => {
    const tier = new HostTier(10, { policy: 's3-fifo' });
    const s3 = tier.policy as S3FifoPolicy;
    store(tier, A, B, C, D, E, F, 7n, 8n, 9n, 10n); //     S A..10
    tier.prepareLoad([A]); // A is being read
    // From S: A is passed over (not evictable), B is the victim.
    expect(store(tier, 11n)).toEqual([B]);
    // A was read once (not twice) and is idle again, but offered in this store: passed over; C goes.
    tier.completeLoad([A]);
    const out = tier.prepareStore([A, 12n]);
    expect(out.ok && out.evicted).toEqual([C]);
    // Read once is not enough to reach M: A is the next victim.
    expect(store(tier, 13n)).toEqual([A]);
    expect(s3.queues().ghost).toEqual([B, C, A]);
  });
});

describe("store threshold (vLLM's store_threshold)", () => {
  it('stores a chunk only once lookups saw it that many times', () => {
    const tier = new HostTier(8, { storeThreshold: 2 });
    tier.recordLookup([A, B, C]); //                    A1 B1 C1
    let out = tier.prepareStore([A, B, C]);
    expect(out.ok && out.keysToStore).toEqual([]);
    tier.recordLookup([A, B, D]); //                    A2 B2 C1 D1
    out = tier.prepareStore([A, B, D]);
    expect(out.ok && out.keysToStore).toEqual([A, B]);
    expect(tier.admissionSkips).toBe(4); // A B C, then D
  });

  it('counts every key of a lookup, not only those up to the first miss (vLLM #52022)', () => {
    // Two lookups of a cold 3-chunk prompt: counting stopped at the first miss
    // would give A 2, B 0, C 0 and admit only A; every key counts: all three.
    const tier = new HostTier(8, { storeThreshold: 2 });
    tier.recordLookup([A, B, C]);
    tier.recordLookup([A, B, C]);
    const out = tier.prepareStore([A, B, C]);
    expect(out.ok && out.keysToStore).toEqual([A, B, C]);
  });

  it('forgets the least recently looked-up key beyond the tracker size', () => {
    const tier = new HostTier(8, { storeThreshold: 2, admissionTrackerKeys: 2 });
    tier.recordLookup([A]);
    tier.recordLookup([B]);
    tier.recordLookup([C]); // A is forgotten: A's count starts again
    tier.recordLookup([A]); // A1 (and B forgotten)
    tier.recordLookup([C]); // C2
    const out = tier.prepareStore([A, C]);
    expect(out.ok && out.keysToStore).toEqual([C]);
  });

  it("the facade's lookups count too: a prompt seen twice is stored, once is not", async () => {
    const tier = new HostTier(16, { storeThreshold: 2 });
    const lo = await local(ONE_GROUP, { tier });
    const prompt = tokens(8, 1); // two 4-token chunks
    const storeOnce = () => {
      const h = lo.open({ requestId: 1, promptTokens: prompt });
      lo.hash(h);
      lo.appendBlocks(h, 0, [10, 11]);
      lo.progress(h, 0, 8);
      const stored = planAndComplete(lo).flatMap((j) => chunkIds(j));
      lo.finish(h);
      planAndComplete(lo);
      lo.release(h);
      return stored;
    };
    expect(lo.lookup(prompt)).toMatchObject({ deferred: false, hitTokens: 0 }); // 1 sighting
    expect(storeOnce()).toEqual([]);
    expect(lo.lookup(prompt)).toMatchObject({ deferred: false, hitTokens: 0 }); // 2 sightings
    expect(storeOnce()).toEqual(['0:0', '0:1']);
    expect(lo.lookup(prompt)).toMatchObject({ deferred: false, hitTokens: 8 });
  });

  it('refuses a bad threshold or policy with a typed error', () => {
    expect(() => new HostTier(8, { storeThreshold: 0 })).toThrow(InvalidArgumentError);
    expect(() => new HostTier(8, { storeThreshold: 1.5 })).toThrow(InvalidArgumentError);
    expect(() => new HostTier(8, { policy: 'mru' as never })).toThrow(UnknownPolicyError);
  });
});
