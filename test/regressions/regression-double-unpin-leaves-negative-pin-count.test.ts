// A double unpin threw only after the count had gone to -1, so the word was
// already wrong when the assertion fired (a later pin would read 0 and the
// allocator could hand the block out while a copy still read it). The check
// now comes before the word changes.
import { describe, expect, it } from 'vitest';
import { pinBlocks, pinCount, unpinBlocks } from '../../src/pins.js';

describe('regression: a double unpin left a negative pin count', () => {
  it('throws and leaves the count at zero', () => {
    const pins = new Int32Array(new SharedArrayBuffer(4 * 4));
    pinBlocks(pins, [1, 2]);
    unpinBlocks(pins, [1, 2]);
    expect(() => unpinBlocks(pins, [2])).toThrow(/pinned before its unpin/);
    expect(pinCount(pins, 2)).toBe(0);
    expect(pinCount(pins, 1)).toBe(0);
  });

  it('one pin per unpin still balances when pins stack on one block', () => {
    const pins = new Int32Array(new SharedArrayBuffer(4 * 4));
    pinBlocks(pins, [3]);
    pinBlocks(pins, [3]);
    unpinBlocks(pins, [3]);
    expect(pinCount(pins, 3)).toBe(1);
    unpinBlocks(pins, [3]);
    expect(pinCount(pins, 3)).toBe(0);
  });
});
