// The Redis level's delay-based bound on stores in flight: it grows by one per
// fast store, halves on a slow (or timed-out) one at most once per latency
// mark, and never leaves [min, max], over any sequence of completions.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { InFlightWindow } from '../../src/tier/in-flight-window.js';

describe('in-flight window', () => {
  it('grows by one per fast store up to max, halves on a slow one, once per latency mark', () => {
    let now = 0;
    const w = new InFlightWindow(4, 20, 100, 16, () => now);
    expect(w.limit).toBe(16);
    for (let i = 0; i < 10; i += 1) w.completed(5);
    expect(w.limit).toBe(20);
    w.completed(101);
    expect(w.limit).toBe(10);
    // A burst of slow answers at the same moment is one signal.
    for (let i = 0; i < 50; i += 1) w.completed(2000);
    expect(w.limit).toBe(10);
    now += 100;
    w.completed(2000);
    expect(w.limit).toBe(5);
    now += 100;
    w.completed(2000);
    expect(w.limit).toBe(4);
    w.completed(100); // at the mark is fast
    expect(w.limit).toBe(5);
  });

  it('starts inside [min, max] whatever the initial value', () => {
    expect(new InFlightWindow(8, 64, 10, 1).limit).toBe(8);
    expect(new InFlightWindow(8, 64, 10, 1000).limit).toBe(64);
    expect(() => new InFlightWindow(0, 64, 10, 8)).toThrow();
    expect(() => new InFlightWindow(65, 64, 10, 8)).toThrow();
  });

  test.prop([
    fc.integer({ min: 1, max: 64 }),
    fc.integer({ min: 0, max: 256 }),
    fc.integer({ min: 0, max: 512 }),
    fc.array(fc.tuple(fc.integer({ min: 0, max: 300 }), fc.integer({ min: 0, max: 50 })), {
      maxLength: 300,
    }),
  ])('never leaves [min, max]; moves by +1 or to half', (min, extra, initial, steps) => {
    let now = 0;
    const max = min + extra;
    const w = new InFlightWindow(min, max, 100, initial, () => now);
    for (const [latencyMs, advanceMs] of steps) {
      now += advanceMs;
      const before = w.limit;
      w.completed(latencyMs);
      expect(w.limit).toBeGreaterThanOrEqual(min);
      expect(w.limit).toBeLessThanOrEqual(max);
      if (latencyMs <= 100) expect(w.limit).toBe(Math.min(max, before + 1));
      else expect([before, Math.max(min, Math.floor(before / 2))]).toContain(w.limit);
    }
  });
});
