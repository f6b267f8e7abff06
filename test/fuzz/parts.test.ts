// The fuzzer's parts: the seeded PRNG, the strategies, replay tokens, ddmin,
// and the pool race the fuzzer found (a free block pinned by a store pass
// that read it from a stale snapshot must not be handed out).
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { GpuBlockPool } from '../../src/gpu-pool.js';
import { pinBlocks, unpinBlocks } from '../../src/pins.js';
import { Prng } from '../../src/prng.js';
import { geometryNames, scenarioFromSeed } from '../../src/fuzz/scenario.js';
import { ddmin } from '../../src/fuzz/shrink.js';
import { DecisionListStrategy, PctStrategy, RandomStrategy } from '../../src/fuzz/strategy.js';
import { decodeReplayToken, encodeReplayToken } from '../../src/fuzz/token.js';

describe('Prng', () => {
  it('is a pure function of (seed, stream)', () => {
    const a = new Prng(42, 1);
    const b = new Prng(42, 1);
    const c = new Prng(42, 2);
    const xs = Array.from({ length: 50 }, () => a.nextU32());
    expect(Array.from({ length: 50 }, () => b.nextU32())).toEqual(xs);
    expect(Array.from({ length: 50 }, () => c.nextU32())).not.toEqual(xs);
  });

  it('stays in range and covers it', () => {
    const r = new Prng(7);
    const seen = new Set<number>();
    for (let i = 0; i < 2000; i += 1) {
      const v = r.between(3, 9);
      expect(v).toBeGreaterThanOrEqual(3);
      expect(v).toBeLessThanOrEqual(9);
      seen.add(v);
    }
    expect(seen.size).toBe(7);
  });
});

describe('scenarios', () => {
  it('the same seed gives the same scenario', () => {
    expect(JSON.stringify(scenarioFromSeed(123))).toBe(JSON.stringify(scenarioFromSeed(123)));
    expect(JSON.stringify(scenarioFromSeed(123))).not.toBe(JSON.stringify(scenarioFromSeed(124)));
  });

  it('draw every fault kind across seeds', () => {
    const kinds = new Set<string>();
    const geometries = new Set<string>();
    for (let seed = 0; seed < 300; seed += 1) {
      const s = scenarioFromSeed(seed);
      geometries.add(s.geometry);
      for (const e of s.events) kinds.add(e.kind);
    }
    expect([...kinds].sort()).toEqual(
      [
        'abort',
        'copy-fail',
        'finish-mid-store',
        'preempt',
        'request',
        'reset',
        'stall',
        'tier-fail',
      ].sort(),
    );
    expect([...geometries].sort()).toEqual(geometryNames().sort());
  });
});

describe('strategies', () => {
  it('random picks only enabled roles, deterministically', () => {
    const a = new RandomStrategy(9);
    const b = new RandomStrategy(9);
    for (let i = 0; i < 200; i += 1) {
      const enabled = i % 3 === 0 ? [1, 3] : [0, 2, 4];
      const x = a.pick(enabled);
      expect(enabled).toContain(x);
      expect(b.pick(enabled)).toBe(x);
    }
  });

  it('pct runs the highest-priority enabled role until a change point demotes it', () => {
    const s = new PctStrategy(3, 1000, 1); // depth 1: no change points, a fixed order
    const first = s.pick([0, 1, 2, 3, 4], 0);
    for (let i = 1; i < 50; i += 1) expect(s.pick([0, 1, 2, 3, 4], i)).toBe(first);
    const others = [0, 1, 2, 3, 4].filter((a) => a !== first);
    expect(others).toContain(s.pick(others, 50));

    // Depth 2 on a 1-step horizon: the change point is at decision 1, so the
    // role picked at 0 is demoted from decision 1 on.
    const d = new PctStrategy(3, 1, 2);
    const top = d.pick([0, 1, 2, 3, 4], 0);
    expect(d.pick([0, 1, 2, 3, 4], 1)).not.toBe(top);
  });

  it('a decision list is followed where enabled, then falls back downstream first', () => {
    const s = new DecisionListStrategy([0, 2, 1]);
    expect(s.pick([0, 1], 0)).toBe(0);
    expect(s.pick([0, 1, 4], 1)).toBe(4); // 2 not enabled: transfer first
    expect(s.pick([1, 3], 2)).toBe(1);
    expect(s.pick([0, 2, 3], 3)).toBe(3); // list exhausted: store before allocator
  });
});

describe('replay tokens', () => {
  it('round-trip whole and shrunk schedules', () => {
    const whole = { policy: 'legacy-zip', strategy: 'pct', pins: true, seed: 4294967295 } as const;
    expect(decodeReplayToken(encodeReplayToken(whole))).toEqual(whole);
    const shrunk = {
      policy: 'ready-prefix',
      strategy: 'random',
      pins: false,
      seed: 0,
      watch: ['hole', 'crash'],
      events: [0, 3],
      decisions: [0, 1, -1, 4, 3],
    } as const;
    const token = encodeReplayToken(shrunk);
    expect(token).toBe('kvf1.ready-prefix.random.nopins.0.trl2.watch-hole,crash.e0,3.d01t43');
    expect(decodeReplayToken(token)).toEqual(shrunk);
    const torn = { ...whole, revalidate: false };
    expect(encodeReplayToken(torn)).toBe('kvf1.legacy-zip.pct.pins.4294967295.r0.trl2');
    expect(decodeReplayToken(encodeReplayToken(torn))).toEqual(torn);
  });

  it('reject anything else as bad usage', () => {
    for (const bad of [
      '',
      'kvf1',
      'kvf2.legacy-zip.pct.pins.1',
      'kvf1.nope.pct.pins.1',
      'kvf1.legacy-zip.dfs.pins.1',
      'kvf1.legacy-zip.pct.maybe.1',
      'kvf1.legacy-zip.pct.pins.-1',
      'kvf1.legacy-zip.pct.pins.4294967296',
      'kvf1.legacy-zip.pct.pins.1.d019',
      'kvf1.legacy-zip.pct.pins.1.wnothing',
      'kvf1.legacy-zip.pct.pins.1.x',
      'kvf1.legacy-zip.pct.pins.1.trl2.trl2',
      'kvf1.legacy-zip.pct.pins.1.trl2.trt4',
    ]) {
      expect(() => decodeReplayToken(bad), bad).toThrow(InvalidArgumentError);
    }
  });
});

describe('replay tokens of the roles target carry the version of its schedules', () => {
  it('a token without the .trl2 part (version 1, before the roles world scheduled by the engine policy) is refused, naming the seed to draw again', () => {
    let thrown: unknown;
    try {
      decodeReplayToken('kvf1.legacy-zip.random.pins.8.watch-hole.e0.d0030');
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(InvalidArgumentError);
    expect((thrown as InvalidArgumentError).code).toBe('KVOFF_INVALID_ARGUMENT');
    expect(String((thrown as Error).message)).toContain(
      '--policy legacy-zip --strategy random --seed 8 --schedules 1',
    );
  });

  it('a roles token of this version decodes, and its part is what encoding writes', () => {
    const spec = { policy: 'ready-prefix', strategy: 'pct', pins: true, seed: 12 } as const;
    expect(encodeReplayToken(spec)).toBe('kvf1.ready-prefix.pct.pins.12.trl2');
    expect(decodeReplayToken('kvf1.ready-prefix.pct.pins.12.trl2')).toEqual(spec);
  });
});

describe('ddmin', () => {
  it('finds a 1-minimal failing sublist', () => {
    const items = Array.from({ length: 40 }, (_, i) => i);
    const fails = (xs: number[]) => xs.includes(7) && xs.includes(31);
    expect(ddmin(items, fails)).toEqual([7, 31]);
  });

  it('keeps the input when nothing smaller fails', () => {
    expect(ddmin([1, 2, 3], (xs) => xs.length === 3)).toEqual([1, 2, 3]);
  });
});

describe('pool regression found by the fuzzer', () => {
  it('a free block pinned by a stale store pass waits in quarantine, never handed out', () => {
    const pins = new Int32Array(new SharedArrayBuffer(6 * 4));
    const pool = new GpuBlockPool(6, pins);
    const [a, b] = pool.allocate(2)!;
    pool.release([a!, b!]); // freed: back on the free list, unpinned
    pinBlocks(pins, [b!]); // a store pass read b from a snapshot taken before the free
    const got = pool.allocate(2)!;
    expect(got).not.toContain(b);
    expect(pool.quarantined).toBe(1);
    expect(pool.allocate(3)).toBeUndefined(); // all or nothing: 2 free, b quarantined
    expect(pool.available).toBe(2);
    unpinBlocks(pins, [b!]); // the pass failed to re-validate and unpinned
    expect(pool.allocate(3)).toHaveLength(3);
    expect(pool.quarantined).toBe(0);
  });
});
