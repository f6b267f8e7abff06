// The GPU block pool, owned by the allocator role (one thread). Block 0 is the
// null block and is never handed out. A freed block whose pin count is above
// zero (a copy may still read it) waits in quarantine and returns to the free
// list only once unpinned, so a copy always reads the bytes of its own chunk.
import { InvalidArgumentError, invariant } from './errors.js';

export class GpuBlockPool {
  readonly gpuBlocks: number;
  private readonly pins: Int32Array;
  private readonly free: Int32Array;
  private freeCount: number;
  private readonly quarantine: number[] = [];
  /** 1 while a block is allocated: catches double frees and frees of unknown blocks. */
  private readonly allocated: Uint8Array;
  /** Test-only: hand out pinned blocks as if they were free (shows why pins exist). */
  private readonly ignorePins: boolean;

  constructor(gpuBlocks: number, pins: Int32Array, options: { unsafeIgnorePins?: boolean } = {}) {
    // Built by host programs too (an external engine's own pool): bad arguments are typed.
    if (!Number.isInteger(gpuBlocks) || gpuBlocks < 2 || gpuBlocks > 2 ** 30) {
      throw new InvalidArgumentError('gpuBlocks', 'must be an integer in [2, 2^30]');
    }
    if (!(pins instanceof Int32Array) || pins.length < gpuBlocks) {
      throw new InvalidArgumentError(
        'pins',
        `must be the shared pin counts: an Int32Array of at least ${gpuBlocks} entries`,
      );
    }
    this.gpuBlocks = gpuBlocks;
    this.pins = pins;
    this.ignorePins = options.unsafeIgnorePins ?? false;
    this.free = new Int32Array(gpuBlocks);
    this.allocated = new Uint8Array(gpuBlocks);
    // Lowest IDs handed out first; block 0 never.
    this.freeCount = 0;
    for (let b = gpuBlocks - 1; b >= 1; b -= 1) this.free[this.freeCount++] = b;
  }

  /** Usable blocks right now (quarantined ones are not). */
  get available(): number {
    return this.freeCount;
  }
  get quarantined(): number {
    return this.quarantine.length;
  }
  get inUse(): number {
    return this.gpuBlocks - 1 - this.freeCount - this.quarantine.length;
  }

  /** True while `block` is handed out (allocated and not released). */
  isAllocated(block: number): boolean {
    return (
      Number.isInteger(block) && block > 0 && block < this.gpuBlocks && this.allocated[block] === 1
    );
  }

  /** `n` blocks, all or nothing: undefined when the pool cannot supply them (admission pressure). */
  allocate(n: number): number[] | undefined {
    if (!Number.isInteger(n) || n < 0)
      throw new InvalidArgumentError('n', 'must be a non-negative integer');
    if (n > this.freeCount) this.releaseUnpinned();
    if (n > this.freeCount) return undefined;
    const out: number[] = [];
    // A free block can be pinned: a store pass that read a block ID from a
    // snapshot taken before the block was freed pins it, then fails to
    // re-validate and unpins it. Such a block is not handed out; it waits in
    // quarantine like any pinned block. (Found by the race fuzzer.)
    while (out.length < n && this.freeCount > 0) {
      const b = this.free[--this.freeCount]!;
      if (this.allocated[b] !== 0) invariant(false, `block ${b} on the free list is not allocated`);
      if (!this.ignorePins && Atomics.load(this.pins, b) > 0) {
        this.quarantine.push(b);
        continue;
      }
      this.allocated[b] = 1;
      out.push(b);
    }
    if (out.length < n) {
      // All or nothing: put the taken blocks back in the order they came off.
      for (let i = out.length - 1; i >= 0; i -= 1) {
        this.allocated[out[i]!] = 0;
        this.free[this.freeCount++] = out[i]!;
      }
      return undefined;
    }
    return out;
  }

  /** Returns blocks to the pool; pinned ones wait in quarantine. Null blocks are ignored. */
  release(blocks: readonly number[]): void {
    for (const b of blocks) {
      if (b === 0) continue;
      if (!(b > 0 && b < this.gpuBlocks && this.allocated[b] === 1))
        invariant(false, `block ${b} freed while allocated`);
      this.allocated[b] = 0;
      if (!this.ignorePins && Atomics.load(this.pins, b) > 0) this.quarantine.push(b);
      else this.free[this.freeCount++] = b;
    }
  }

  /** Moves quarantined blocks whose copies finished back to the free list; bounded by the quarantine size. */
  releaseUnpinned(): number {
    let moved = 0;
    for (let i = this.quarantine.length - 1; i >= 0; i -= 1) {
      const b = this.quarantine[i]!;
      if (Atomics.load(this.pins, b) > 0) continue;
      this.quarantine[i] = this.quarantine[this.quarantine.length - 1]!;
      this.quarantine.pop();
      this.free[this.freeCount++] = b;
      moved += 1;
    }
    return moved;
  }
}
