// Pin counts on GPU blocks: the store role pins every source block before a
// job is dispatched, the transfer role unpins after the copy, and the allocator
// never hands out a block whose count is above zero. Exactly one unpin per pin.
import { invariant } from './errors.js';

export function pinBlocks(pins: Int32Array, blocks: readonly number[]): void {
  for (const b of blocks) Atomics.add(pins, b, 1);
}

export function unpinBlocks(pins: Int32Array, blocks: readonly number[]): void {
  for (const b of blocks) {
    const before = Atomics.sub(pins, b, 1);
    invariant(before > 0, `block ${b} was pinned before its unpin`);
  }
}

export function pinCount(pins: Int32Array, block: number): number {
  return Atomics.load(pins, block);
}
