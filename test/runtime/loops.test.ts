// The runtime's loop bodies without threads: SPSC rings, doorbells, and every
// role's step function driven round-robin from one thread over the same shared
// memory (the inline transfer backend copies on the spot). This is how a
// single-thread driver reuses the runtime's code.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { KEY_WORDS, SpscRing, pushKey, readKey } from '../../src/runtime/rings.js';
import { oneThreadLoops } from '../helpers/one-thread-loops.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

describe('SpscRing', () => {
  it('delivers variable-length records in order across many wrap-arounds', () => {
    const ring = SpscRing.create(256);
    let sent = 0;
    let received = 0;
    for (let round = 0; round < 2000; round += 1) {
      const len = (sent * 37) % 60;
      const rec = Array.from({ length: len }, (_, i) => sent * 1000 + i);
      if (ring.push(rec)) sent += 1;
      if (round % 3 !== 0) {
        ring.pop((p) => {
          expect(p.length).toBe((received * 37) % 60);
          for (let i = 0; i < p.length; i += 1) expect(p[i]).toBe(received * 1000 + i);
          received += 1;
        });
      }
    }
    while (ring.pop(() => (received += 1)));
    expect(received).toBe(sent);
    expect(ring.used).toBe(0);
  });

  it('refuses a record it has no room for and writes nothing', () => {
    const ring = SpscRing.create(64);
    expect(ring.push(new Array<number>(31).fill(7))).toBe(true);
    const before = ring.used;
    expect(ring.push(new Array<number>(31).fill(8))).toBe(true);
    expect(ring.push([1, 2, 3])).toBe(false);
    expect(ring.used).toBe(before * 2);
    expect(() => ring.push(new Array<number>(40).fill(0))).toThrow(InvalidArgumentError);
  });

  it('says when everything pushed before a mark was popped, across wrap-arounds', () => {
    const ring = SpscRing.create(64);
    let next = 0;
    let popped = 0;
    for (let round = 0; round < 500; round += 1) {
      // A mark after some pushes: consumed exactly when those records are popped, whatever follows.
      while (ring.push(new Array<number>(1 + ((next * 7) % 13)).fill(next))) next += 1;
      const mark = ring.producedTo();
      const before = next;
      if (ring.push([next])) next += 1;
      while (popped < before) {
        expect(ring.consumedTo(mark)).toBe(false);
        ring.pop(() => (popped += 1));
      }
      expect(ring.consumedTo(mark)).toBe(true);
      while (popped < next && round % 2 === 0) ring.pop(() => (popped += 1));
    }
  });

  it('packs 256-bit keys into eight words and back', () => {
    const out: number[] = [];
    const top = (1n << 256n) - 1n;
    const keys = [
      0n,
      1n,
      0xffffffffffffffffn,
      0x8000000000000001n,
      top,
      (0x123456789abcdef0n << 192n) | 0x8000000000000001n,
    ];
    for (const k of keys) pushKey(out, k);
    expect(out).toHaveLength(KEY_WORDS * keys.length);
    const words = Int32Array.from(out);
    keys.forEach((k, i) => expect(readKey(words, KEY_WORDS * i)).toBe(k));
  });
});

describe('every role loop from one thread', () => {
  it('runs the engine simulator to the end with preemption; bytes, holes and leaks all check out', async () => {
    const loops = await oneThreadLoops({
      config: { ...SMALL_HYBRID, gpuBlocks: 700 },
      engine: {
        stepTokenBudget: 256,
        maxRunning: 8,
        abortQueuedRate: 0.01,
        abortRunningRate: 0.01,
        stepMs: 0, // steps are this loop's rounds, not wall time
        seed: 3,
      },
      engineClock: 'wall',
      allocatorLag: { publishDelayMs: 2, jitterMs: 3, seed: 3 },
      hasherEveryRounds: 2,
    });
    const { allocator, drained, ended, engine, store, views } = loops;
    const n = 30;
    for (let i = 1; i <= n; i += 1) {
      loops.submit({
        requestId: i,
        promptLength: 300 + ((i * 97) % 700),
        prefixId: i % 3,
        sharedPrefixTokens: 200,
        maxDecodeTokens: 64,
      });
    }
    // Round-robin steps; the allocator's clock advances so its lag elapses.
    loops.runUntil(() => ended.length >= n, 200_000);
    expect(ended).toHaveLength(n);
    expect(ended.some((s) => s.status === 'finished')).toBe(true);
    expect(ended.some((s) => s.preemptions > 0)).toBe(true);
    // Drain what is left: copies complete inline; quarantined blocks go back.
    loops.drainLeftovers();
    const report = store.verify();
    expect(report.entriesChecked).toBeGreaterThan(0);
    expect(report.mismatches).toBe(0);
    expect(report.holes).toBe(0);
    expect(report.doubleStores).toBe(0);
    expect(drained.every((d) => d.holes === 0 && d.doubleStores === 0)).toBe(true);
    expect(allocator.pool.inUse).toBe(0);
    expect(allocator.pool.quarantined).toBe(0);
    expect(Array.from(views.state.pins).every((p) => p === 0)).toBe(true);
    expect(store.jobsInFlight).toBe(0);
    expect(engine.pending).toBe(0);
  });
});
