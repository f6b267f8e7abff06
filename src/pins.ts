// Pin counts on GPU blocks: the store role pins every source block before a
// job is dispatched, the transfer role unpins after the copy, and the allocator
// never hands out a block whose count is above zero. Exactly one unpin per pin.
import { invariant } from './errors.js';

export function pinBlocks(pins: Int32Array, blocks: readonly number[]): void {
  for (const b of blocks) Atomics.add(pins, b, 1);
}

/** Bound on one unpin's compare-exchange retries (far above any pinner count). */
const UNPIN_ATTEMPTS_MAX = 1_000_000;

export function unpinBlocks(pins: Int32Array, blocks: Iterable<number>): void {
  for (const b of blocks) {
    // Check before the word changes (a compare-exchange, not a sub then an
    // assertion): a double unpin must throw with the count still >= 0, or a
    // later pin would see the block as unpinned while a copy reads it. Several
    // transfer threads may unpin one block at once; each retry means another
    // thread's unpin landed, so the loop ends within the number of pinners.
    for (let attempt = 0; ; attempt += 1) {
      const before = Atomics.load(pins, b);
      if (!(before > 0)) invariant(false, `block ${b} was pinned before its unpin`);
      if (Atomics.compareExchange(pins, b, before, before - 1) === before) break;
      if (!(attempt < UNPIN_ATTEMPTS_MAX))
        invariant(false, `unpin of block ${b} settled within ${UNPIN_ATTEMPTS_MAX} attempts`);
    }
  }
}

export function pinCount(pins: Int32Array, block: number): number {
  return Atomics.load(pins, block);
}
