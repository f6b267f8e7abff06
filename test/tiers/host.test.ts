// The host tier (offloading manager): lookup sees only completed entries,
// prepareStore is atomic and order-preserving, LRU eviction never takes an
// entry being written or read or one of the offered keys. Unit cases, then a
// fast-check model test against a small reference model.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { HostTier } from '../../src/tier/host-tier.js';
import type { PrepareStoreResult, TierEvent, TierStats } from '../../src/tier/types.js';

const [A, B, C, D, E] = [1n, 2n, 3n, 4n, 5n];

function stored(tier: HostTier, ...keys: bigint[]): void {
  const out = tier.prepareStore(keys);
  expect(out.ok).toBe(true);
  tier.completeStore(keys);
}

function okResult(out: PrepareStoreResult) {
  if (!out.ok) throw new Error(`expected ok, got cannot-allocate (needed ${out.needed})`);
  return out;
}

function expectConsistent(s: TierStats): void {
  expect(s.used).toBe(s.writing + s.reading + s.evictable);
  expect(s.used).toBeLessThanOrEqual(s.capacityChunks);
}

describe('HostTier', () => {
  it('rejects a non-positive or fractional capacity', () => {
    expect(() => new HostTier(0)).toThrow(InvalidArgumentError);
    expect(() => new HostTier(1.5)).toThrow(InvalidArgumentError);
  });

  it('lookup is the length of the stored prefix and sees only completed entries', () => {
    const tier = new HostTier(8);
    expect(tier.lookup([A, B, C])).toBe(0);
    okResult(tier.prepareStore([A, B, C]));
    expect(tier.lookup([A, B, C])).toBe(0); // being written: not visible yet
    expect([tier.state(A), tier.state(D)]).toEqual(['pending', 'miss']);
    tier.completeStore([A, C]);
    expect(tier.lookup([A, B, C])).toBe(1); // B is still pending: the prefix stops there
    expect(tier.lookup([C])).toBe(1);
    expect(tier.lookup([D, A])).toBe(0);
    tier.completeStore([B]);
    expect(tier.lookup([A, B, C, D])).toBe(3);
    expect(tier.lookup([])).toBe(0);
    expect(tier.state(B)).toBe('hit');
  });

  it('prepareStore skips present and in-flight keys, dedupes, and preserves offer order', () => {
    const tier = new HostTier(8);
    stored(tier, B);
    okResult(tier.prepareStore([D])); // in flight
    const out = okResult(tier.prepareStore([E, A, B, A, D, C, E]));
    expect(out.keysToStore).toEqual([E, A, C]);
    expect(out.slots).toHaveLength(3);
    expect(new Set([...out.slots, tier.slotOf(B), tier.slotOf(D)]).size).toBe(5);
    out.keysToStore.forEach((k, i) => expect(tier.slotOf(k)).toBe(out.slots[i]));
    expect(out.evicted).toEqual([]);
    // Everything present: an empty, successful answer (not a failure).
    const none = okResult(tier.prepareStore([A, B, C]));
    expect([none.keysToStore, none.slots, none.evicted]).toEqual([[], [], []]);
  });

  it('cannot-allocate is atomic and reports needed and evictable', () => {
    const tier = new HostTier(3);
    stored(tier, A);
    okResult(tier.prepareStore([B])); // writing: not evictable
    tier.takeEvents();
    const before = { stats: tier.stats(), slots: [A, B].map((k) => tier.slotOf(k)) };
    const out = tier.prepareStore([C, D, E]); // 1 free slot, 1 evictable, 3 wanted
    expect(out).toEqual({ ok: false, reason: 'cannot-allocate', needed: 2, evictable: 1 });
    const after = tier.stats();
    expect({ ...after, allocationFailures: 0 }).toEqual({
      ...before.stats,
      allocationFailures: 0,
    });
    expect(after.allocationFailures).toBe(before.stats.allocationFailures + 1);
    expect([A, B].map((k) => tier.slotOf(k))).toEqual(before.slots);
    expect([C, D, E].map((k) => tier.state(k))).toEqual(['miss', 'miss', 'miss']);
    expect(tier.state(A)).toBe('hit'); // the evictable entry was not evicted for a failed call
    expect(tier.takeEvents()).toEqual([]);
    // Exactly what fits still works.
    expect(okResult(tier.prepareStore([C, D])).evicted).toEqual([A]);
  });

  it('evicts least recently used first; completion makes an entry most recent', () => {
    const tier = new HostTier(3);
    okResult(tier.prepareStore([A, B, C]));
    tier.completeStore([C]);
    tier.completeStore([A]);
    tier.completeStore([B]); // recency: C, A, B
    expect(okResult(tier.prepareStore([D])).evicted).toEqual([C]);
    tier.completeStore([D]); // A, B, D
    expect(okResult(tier.prepareStore([E, C])).evicted).toEqual([A, B]);
  });

  it('touch walks the keys in reverse: the first key ends most recent', () => {
    const tier = new HostTier(3);
    stored(tier, A, B, C); // completed together: A, B, C in order
    tier.touch([A, B, C]); // recency now C, B, A (A most recent)
    expect(okResult(tier.prepareStore([D])).evicted).toEqual([C]);
    tier.completeStore([D]);
    tier.touch([B, E]); // unknown keys are ignored; B most recent: A, D, B
    expect(okResult(tier.prepareStore([E, C])).evicted).toEqual([A, D]);
  });

  it('never evicts an entry being written', () => {
    const tier = new HostTier(2);
    okResult(tier.prepareStore([A]));
    stored(tier, B);
    expect(okResult(tier.prepareStore([C])).evicted).toEqual([B]);
    const out = tier.prepareStore([D]);
    expect(out).toMatchObject({ ok: false, needed: 1, evictable: 0 });
    expect([tier.state(A), tier.state(C)]).toEqual(['pending', 'pending']);
  });

  it('never evicts an entry being read; it is evictable again after completeLoad', () => {
    const tier = new HostTier(2);
    stored(tier, A, B);
    expect(tier.prepareLoad([A, A])).toEqual([tier.slotOf(A), tier.slotOf(A)]);
    expect(tier.stats()).toMatchObject({ reading: 1, evictable: 1 });
    expect(okResult(tier.prepareStore([C])).evicted).toEqual([B]); // C stays being written
    expect(tier.prepareStore([D])).toMatchObject({ ok: false, needed: 1, evictable: 0 });
    tier.completeLoad([A]);
    expect(tier.prepareStore([D])).toMatchObject({ ok: false }); // one reader left
    tier.completeLoad([A]);
    expect(tier.stats()).toMatchObject({ reading: 0, evictable: 1, writing: 1 });
    expect(okResult(tier.prepareStore([D])).evicted).toEqual([A]);
  });

  it('prepareLoad of a missing or unfinished key throws and protects nothing', () => {
    const tier = new HostTier(4);
    stored(tier, A);
    okResult(tier.prepareStore([B]));
    const before = tier.stats();
    expect(() => tier.prepareLoad([A, B])).toThrow(InvalidArgumentError);
    expect(() => tier.prepareLoad([A, C])).toThrow(InvalidArgumentError);
    expect(tier.stats()).toEqual(before);
  });

  it('never evicts one of the offered keys', () => {
    const tier = new HostTier(2);
    stored(tier, A);
    stored(tier, B); // A is least recent
    const out = okResult(tier.prepareStore([A, C])); // A offered: protected although LRU
    expect(out.keysToStore).toEqual([C]);
    expect(out.evicted).toEqual([B]);
    tier.completeStore([C]);
    // Both idle entries are offered: nothing may be evicted for the third key.
    expect(tier.prepareStore([A, C, D])).toEqual({
      ok: false,
      reason: 'cannot-allocate',
      needed: 1,
      evictable: 2,
    });
    expect(tier.lookup([A, C])).toBe(2);
  });

  it('completeStore(success = false) frees the slot and publishes nothing', () => {
    const tier = new HostTier(1);
    const first = okResult(tier.prepareStore([A]));
    tier.takeEvents();
    tier.completeStore([A], false);
    expect(tier.state(A)).toBe('miss');
    expect(tier.slotOf(A)).toBeUndefined();
    expect(tier.stats()).toMatchObject({ used: 0, writing: 0, stores: 0 });
    expect(tier.takeEvents()).toEqual([]);
    const second = okResult(tier.prepareStore([B]));
    expect(second.evicted).toEqual([]);
    expect(second.slots).toEqual(first.slots); // the freed slot is reused
    // Completing again (or completing unknown keys) is ignored.
    tier.completeStore([A, B]);
    tier.completeStore([A, B]);
    expect(tier.stats()).toMatchObject({ used: 1, evictable: 1, stores: 1 });
  });

  it('emits events for stored and removed entries', () => {
    const tier = new HostTier(2);
    okResult(tier.prepareStore([A, B]));
    expect(tier.takeEvents()).toEqual([]); // reserved, not stored
    tier.completeStore([B, A]);
    okResult(tier.prepareStore([C]));
    tier.completeStore([C]);
    const events = tier.takeEvents();
    expect(events).toEqual<TierEvent[]>([
      { kind: 'stored', keys: [B, A] },
      { kind: 'removed', keys: [B] },
      { kind: 'stored', keys: [C] },
    ]);
    expect(tier.takeEvents()).toEqual([]);
  });

  it('stats stay consistent: used = writing + reading + evictable', () => {
    const tier = new HostTier(4);
    okResult(tier.prepareStore([A, B, C]));
    expectConsistent(tier.stats());
    tier.completeStore([A, B]);
    tier.prepareLoad([A]);
    expect(tier.stats()).toMatchObject({ used: 3, writing: 1, reading: 1, evictable: 1 });
    expectConsistent(tier.stats());
    okResult(tier.prepareStore([D, E])); // evicts B
    expect(tier.stats()).toMatchObject({ used: 4, writing: 3, evictions: 1, stores: 2 });
    expectConsistent(tier.stats());
  });
});

// ---------------------------------------------------------------------------
// Model test: HostTier against a reference written from the contract alone.

interface ModelEntry {
  /** -1 writing, 0 idle, > 0 readers. */
  ref: number;
}

class ReferenceTier {
  /** Least recently used first. */
  order: bigint[] = [];
  entries = new Map<bigint, ModelEntry>();
  events: TierEvent[] = [];
  stores = 0;
  evictions = 0;
  failures = 0;
  /** Slots a reset took from entries being written or read, with the jobs still holding each. */
  retired: { slot: number; jobs: number }[] = [];
  constructor(readonly capacity: number) {}

  private moveToEnd(key: bigint): void {
    this.order = this.order.filter((k) => k !== key);
    this.order.push(key);
  }

  lookup(keys: bigint[]): number {
    let n = 0;
    for (const k of keys) {
      const e = this.entries.get(k);
      if (e === undefined || e.ref === -1) break;
      n += 1;
    }
    return n;
  }

  stateOf(key: bigint): string {
    const e = this.entries.get(key);
    return e === undefined ? 'miss' : e.ref === -1 ? 'pending' : 'hit';
  }

  idle(): bigint[] {
    return this.order.filter((k) => this.entries.get(k)!.ref === 0);
  }

  prepareStore(keys: bigint[]) {
    const offered = new Set(keys);
    const toStore = [...offered].filter((k) => !this.entries.has(k));
    if (toStore.length === 0) return { ok: true, keysToStore: [], evicted: [] as bigint[] };
    const needed = toStore.length - (this.capacity - this.entries.size - this.retired.length);
    let evicted: bigint[] = [];
    if (needed > 0) {
      const idle = this.idle();
      const victims = idle.filter((k) => !offered.has(k)).slice(0, needed);
      if (victims.length < needed) {
        this.failures += 1;
        return { ok: false, reason: 'cannot-allocate', needed, evictable: idle.length };
      }
      for (const k of victims) {
        this.entries.delete(k);
        this.order = this.order.filter((x) => x !== k);
      }
      evicted = victims;
      this.evictions += victims.length;
      this.events.push({ kind: 'removed', keys: victims });
    }
    for (const k of toStore) {
      this.entries.set(k, { ref: -1 });
      this.order.push(k);
    }
    return { ok: true, keysToStore: toStore, evicted };
  }

  completeStore(keys: bigint[], success: boolean): void {
    const done: bigint[] = [];
    for (const k of keys) {
      const e = this.entries.get(k);
      if (e === undefined || e.ref !== -1) continue;
      if (success) {
        e.ref = 0;
        this.moveToEnd(k);
        done.push(k);
        this.stores += 1;
      } else {
        this.entries.delete(k);
        this.order = this.order.filter((x) => x !== k);
      }
    }
    if (done.length > 0) this.events.push({ kind: 'stored', keys: done });
  }

  touch(keys: bigint[]): void {
    for (const k of [...keys].reverse()) if (this.entries.get(k)?.ref === 0) this.moveToEnd(k);
  }

  /** False (and nothing changed) when some key is not readable. */
  prepareLoad(keys: bigint[]): boolean {
    if (!keys.every((k) => (this.entries.get(k)?.ref ?? -1) >= 0)) return false;
    for (const k of keys) this.entries.get(k)!.ref += 1;
    return true;
  }

  completeLoad(key: bigint): void {
    this.entries.get(key)!.ref -= 1;
  }

  /** vLLM's reset_cache: no entry is left; slots in use stay taken until their jobs end. */
  reset(slotOf: (k: bigint) => number): void {
    for (const [k, e] of this.entries) {
      if (e.ref !== 0) this.retired.push({ slot: slotOf(k), jobs: e.ref === -1 ? 1 : e.ref });
    }
    this.entries.clear();
    this.order = [];
    this.events = [];
  }

  /** One job holding retired slot `i` ends; returns the slot. */
  release(i: number): number {
    const r = this.retired[i]!;
    r.jobs -= 1;
    if (r.jobs === 0) this.retired.splice(i, 1);
    return r.slot;
  }

  stats() {
    const refs = [...this.entries.values()].map((e) => e.ref);
    return {
      capacityChunks: this.capacity,
      used: this.entries.size,
      writing: refs.filter((r) => r === -1).length,
      reading: refs.filter((r) => r > 0).length,
      evictable: refs.filter((r) => r === 0).length,
      stores: this.stores,
      evictions: this.evictions,
      allocationFailures: this.failures,
      retired: this.retired.length,
    };
  }
}

const UNIVERSE = [1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n];
const keyList = fc.array(fc.constantFrom(...UNIVERSE), { maxLength: 5 });
const op = fc.oneof(
  { arbitrary: fc.record({ t: fc.constant('store' as const), keys: keyList }), weight: 4 },
  {
    arbitrary: fc.record({
      t: fc.constant('complete' as const),
      keys: keyList,
      success: fc.boolean(),
    }),
    weight: 4,
  },
  { arbitrary: fc.record({ t: fc.constant('touch' as const), keys: keyList }), weight: 2 },
  { arbitrary: fc.record({ t: fc.constant('load' as const), keys: keyList }), weight: 2 },
  { arbitrary: fc.record({ t: fc.constant('unload' as const), pick: fc.nat() }), weight: 2 },
  { arbitrary: fc.record({ t: fc.constant('lookup' as const), keys: keyList }), weight: 1 },
  { arbitrary: fc.record({ t: fc.constant('reset' as const) }), weight: 1 },
  { arbitrary: fc.record({ t: fc.constant('release' as const), pick: fc.nat() }), weight: 2 },
);

describe('HostTier against a reference model', () => {
  it('agrees on every answer, state, event and statistic over random operation sequences', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 5 }), fc.array(op, { maxLength: 40 }), (cap, ops) => {
        const tier = new HostTier(cap);
        const model = new ReferenceTier(cap);
        for (const o of ops) {
          switch (o.t) {
            case 'store': {
              const got = tier.prepareStore(o.keys);
              const want = model.prepareStore(o.keys);
              if (got.ok) {
                expect({ ok: true, keysToStore: got.keysToStore, evicted: got.evicted }).toEqual(
                  want,
                );
                expect(got.slots).toHaveLength(got.keysToStore.length);
                got.keysToStore.forEach((k, i) => expect(tier.slotOf(k)).toBe(got.slots[i]));
              } else {
                expect(got).toEqual(want);
              }
              break;
            }
            case 'complete':
              tier.completeStore(o.keys, o.success);
              model.completeStore(o.keys, o.success);
              break;
            case 'touch':
              tier.touch(o.keys);
              model.touch(o.keys);
              break;
            case 'load': {
              if (model.prepareLoad(o.keys)) {
                expect(tier.prepareLoad(o.keys)).toEqual(o.keys.map((k) => tier.slotOf(k)));
              } else {
                expect(() => tier.prepareLoad(o.keys)).toThrow(InvalidArgumentError);
              }
              break;
            }
            case 'unload': {
              const reading = [...model.entries].filter(([, e]) => e.ref > 0).map(([k]) => k);
              if (reading.length === 0) break;
              const key = reading[o.pick % reading.length]!;
              tier.completeLoad([key]);
              model.completeLoad(key);
              break;
            }
            case 'lookup':
              expect(tier.lookup(o.keys)).toBe(model.lookup(o.keys));
              break;
            case 'reset':
              model.reset((k) => tier.slotOf(k)!);
              tier.reset();
              break;
            case 'release': {
              if (model.retired.length === 0) break;
              tier.releaseRetired([model.release(o.pick % model.retired.length)]);
              break;
            }
          }
          // After every step: same visible state, same statistics, same events.
          expect(tier.stats()).toEqual(model.stats());
          expectConsistent(tier.stats());
          for (const k of UNIVERSE) expect(tier.state(k)).toBe(model.stateOf(k));
          expect(tier.lookup(UNIVERSE)).toBe(model.lookup(UNIVERSE));
          expect(tier.takeEvents()).toEqual(model.events);
          model.events = [];
          // Live entries hold distinct slots within capacity.
          const slots = [
            ...[...model.entries.keys()].map((k) => tier.slotOf(k)!),
            ...model.retired.map((r) => r.slot),
          ];
          // ...and none of them is a slot a reset retired while a job holds it.
          expect(new Set(slots).size).toBe(slots.length);
          for (const s of slots) expect(s >= 0 && s < cap).toBe(true);
          for (const k of UNIVERSE) {
            if (!model.entries.has(k)) expect(tier.slotOf(k)).toBeUndefined();
          }
        }
      }),
      { numRuns: 300 },
    );
  });
});
