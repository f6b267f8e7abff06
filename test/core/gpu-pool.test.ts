// The GPU block pool: block 0 and pinned blocks are never handed out, pinned
// frees wait in quarantine until unpinned, allocation is all or nothing, and a
// double free is a broken invariant.
import { AssertionError } from 'node:assert';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { GpuBlockPool } from '../../src/gpu-pool.js';
import { pinBlocks, pinCount, unpinBlocks } from '../../src/pins.js';

function pool(blocks: number): { pool: GpuBlockPool; pins: Int32Array } {
  const pins = new Int32Array(new SharedArrayBuffer(blocks * 4));
  return { pool: new GpuBlockPool(blocks, pins), pins };
}

describe('GpuBlockPool', () => {
  it('never hands out the null block; lowest IDs first', () => {
    const { pool: p } = pool(5);
    expect(p.available).toBe(4);
    const all = p.allocate(4)!;
    expect(all).toEqual([1, 2, 3, 4]);
    expect(all).not.toContain(0);
    expect(p.allocate(1)).toBeUndefined();
    expect(p.inUse).toBe(4);
    p.release([0, 3]); // the null block is ignored on release
    expect(p.allocate(1)).toEqual([3]);
  });

  it('allocate is all or nothing', () => {
    const { pool: p } = pool(6);
    p.allocate(3);
    expect(p.available).toBe(2);
    expect(p.allocate(3)).toBeUndefined();
    expect(p.available).toBe(2); // nothing was taken
    expect(p.allocate(0)).toEqual([]);
    expect(p.allocate(2)).toHaveLength(2);
    expect(() => p.allocate(-1)).toThrow(InvalidArgumentError);
    expect(() => p.allocate(1.5)).toThrow(InvalidArgumentError);
  });

  it('a pinned free goes to quarantine and returns only after unpin', () => {
    const { pool: p, pins } = pool(4);
    const [a, b, c] = p.allocate(3)!;
    pinBlocks(pins, [a!, a!, b!]);
    p.release([a!, b!, c!]);
    expect(p.quarantined).toBe(2);
    expect(p.available).toBe(1);
    expect(p.inUse).toBe(0);
    // Only the unpinned block can be handed out.
    expect(p.allocate(2)).toBeUndefined();
    expect(p.allocate(1)).toEqual([c]);
    unpinBlocks(pins, [b!]);
    expect(p.allocate(1)).toEqual([b]); // allocate moves unpinned blocks back by itself
    unpinBlocks(pins, [a!]);
    expect(p.releaseUnpinned()).toBe(0); // a is still pinned once
    expect(p.allocate(1)).toBeUndefined();
    unpinBlocks(pins, [a!]);
    expect(pinCount(pins, a!)).toBe(0);
    expect(p.releaseUnpinned()).toBe(1);
    expect(p.quarantined).toBe(0);
    expect(p.allocate(1)).toEqual([a]);
  });

  it('never hands out a pinned block over many cycles', () => {
    const { pool: p, pins } = pool(9);
    const pinned = new Set<number>();
    for (let round = 0; round < 50; round += 1) {
      const got = p.allocate(2);
      if (got === undefined) {
        // Unpin everything and try again: it must succeed now.
        for (const b of pinned) unpinBlocks(pins, [b]);
        pinned.clear();
        const retry = p.allocate(2);
        expect(retry).toHaveLength(2);
        p.release(retry!);
        continue;
      }
      for (const b of got) expect(pinCount(pins, b)).toBe(0);
      pinBlocks(pins, [got[0]!]);
      pinned.add(got[0]!);
      p.release(got);
    }
    expect(p.inUse).toBe(0);
  });

  it('a double free or a free of an unknown block is an assertion', () => {
    const { pool: p } = pool(4);
    const [a] = p.allocate(1)!;
    p.release([a!]);
    expect(() => p.release([a!])).toThrow(AssertionError);
    expect(() => p.release([3])).toThrow(AssertionError); // never allocated
    expect(() => p.release([4])).toThrow(AssertionError); // out of range
    expect(() => p.release([-1])).toThrow(AssertionError);
  });

  it('unpinning an unpinned block is an assertion', () => {
    const { pins } = pool(4);
    expect(() => unpinBlocks(pins, [2])).toThrow(AssertionError);
  });
});
