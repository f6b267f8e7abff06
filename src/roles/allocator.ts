// The allocator role's view of request state: per-group GPU block IDs. It is
// the only writer of the allocator line and the block array. Appends publish
// the count after the entries; every other change (preemption clear, nulling a
// sliding-window position, adopting a reused slot) runs inside the slot's
// seqlock so the store role can tell a torn read from a consistent one.
//
// The end of a request: once the allocator has handled it (published every
// block ID it answered for the request), it settles the generation's blocks
// (`settle`): a word only it writes, stored after the last append, so a store
// role that reads it set also sees every block count it will ever get. Appends
// after that are refused; the store's final pass waits for it.
import {
  BlocksSettledError,
  IllegalTransitionError,
  InvalidArgumentError,
  RequestCapacityError,
  invariant,
} from '../errors.js';
import {
  A_BLOCK_COUNT,
  A_GENERATION,
  A_SEQ,
  A_SETTLED_GENERATION,
  Status,
  markDirty,
} from '../layout.js';
import type { SharedState } from '../state.js';
import { checkHandle, statusName, statusOf } from './handle.js';
import type { RequestHandle } from './handle.js';

export class AllocatorRole {
  readonly state: SharedState;

  constructor(state: SharedState) {
    this.state = state;
  }

  appendBlocks(handle: RequestHandle, group: number, blockIds: ArrayLike<number>): void {
    checkHandle(this.state, handle);
    this.checkGroup(group);
    const { config, control, blocks } = this.state;
    if (blockIds === null || typeof blockIds !== 'object' || typeof blockIds.length !== 'number') {
      throw new InvalidArgumentError('blockIds', 'must be an array of block IDs');
    }
    for (let i = 0; i < blockIds.length; i += 1) {
      const id = blockIds[i];
      if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= config.gpuBlocks) {
        throw new InvalidArgumentError(
          `blockIds[${i}]`,
          `must be a block ID in [0, ${config.gpuBlocks})`,
        );
      }
    }
    if (this.settled(handle)) throw new BlocksSettledError(handle.slot, handle.generation);
    // Validate against this generation's count (0 before adoption) before any write,
    // so a rejected call changes nothing, not even the lazy adoption.
    const n = this.count(handle, group);
    if (n + blockIds.length > config.maxBlocksPerRequest) {
      throw new RequestCapacityError(
        'blocks per request per group',
        config.maxBlocksPerRequest,
        n + blockIds.length,
      );
    }
    this.adopt(handle);
    const countWord = this.state.allocatorWord(handle.slot, A_BLOCK_COUNT + group);
    invariant(Atomics.load(control, countWord) === n, 'block count unchanged by adoption');
    const base = this.state.blockBase(handle.slot, group);
    for (let i = 0; i < blockIds.length; i += 1) blocks[base + i + n] = blockIds[i]!;
    Atomics.store(control, countWord, n + blockIds.length);
    markDirty(this.state.dirty, handle.slot);
  }

  /**
   * Publishes that this ended request's blocks are settled: every block ID the
   * allocator will ever append for this generation is published (call it after
   * the last append). The store's final pass waits for this mark (bounded)
   * before it counts still-missing chunks as dropped. Idempotent.
   */
  settle(handle: RequestHandle): void {
    checkHandle(this.state, handle);
    const status = statusOf(this.state, handle.slot);
    if (status !== Status.finished && status !== Status.aborted) {
      throw new IllegalTransitionError('settle the blocks of', statusName(status));
    }
    this.adopt(handle);
    Atomics.store(
      this.state.control,
      this.state.allocatorWord(handle.slot, A_SETTLED_GENERATION),
      handle.generation,
    );
    // The final pass waits for this mark: without the bit it would wait for a publication that never comes.
    markDirty(this.state.dirty, handle.slot);
  }

  /** True once `settle` ran for this handle's generation. */
  settled(handle: RequestHandle): boolean {
    checkHandle(this.state, handle);
    return (
      Atomics.load(
        this.state.control,
        this.state.allocatorWord(handle.slot, A_SETTLED_GENERATION),
      ) === handle.generation
    );
  }

  /** Block IDs currently held in `group` (a copy). */
  blockIds(handle: RequestHandle, group: number): number[] {
    checkHandle(this.state, handle);
    this.checkGroup(group);
    const n = this.count(handle, group);
    const base = this.state.blockBase(handle.slot, group);
    return Array.from(this.state.blocks.subarray(base, base + n));
  }

  /**
   * Empties every group's block table (preemption, finish, abort) and returns
   * the non-null IDs that were held so the pool can free them. Cursors are not
   * touched: chunks come back once blocks are re-appended.
   */
  clear(handle: RequestHandle): number[] {
    checkHandle(this.state, handle);
    this.adopt(handle);
    const freed: number[] = [];
    const { control, blocks } = this.state;
    this.writeBegin(handle.slot);
    for (let g = 0; g < this.state.groupCount; g += 1) {
      const countWord = this.state.allocatorWord(handle.slot, A_BLOCK_COUNT + g);
      const n = Atomics.load(control, countWord);
      const base = this.state.blockBase(handle.slot, g);
      for (let i = 0; i < n; i += 1) if (blocks[base + i] !== 0) freed.push(blocks[base + i]!);
      Atomics.store(control, countWord, 0);
    }
    this.writeEnd(handle.slot);
    markDirty(this.state.dirty, handle.slot);
    return freed;
  }

  /**
   * Replaces the block at `position` of a sliding-window/mamba group with the
   * null block (it slid out of the window) and returns the ID it held.
   */
  nullBlock(handle: RequestHandle, group: number, position: number): number {
    checkHandle(this.state, handle);
    this.checkGroup(group);
    if (this.state.config.groups[group]!.windowChunks === null) {
      throw new InvalidArgumentError(
        'group',
        `group ${group} is full attention; only windowed groups null blocks`,
      );
    }
    const n = this.count(handle, group);
    if (!Number.isInteger(position) || position < 0 || position >= n) {
      throw new InvalidArgumentError('position', `must be in [0, ${n})`);
    }
    const index = this.state.blockBase(handle.slot, group) + position;
    const old = this.state.blocks[index]!;
    this.writeBegin(handle.slot);
    this.state.blocks[index] = 0;
    this.writeEnd(handle.slot);
    markDirty(this.state.dirty, handle.slot);
    return old;
  }

  /** Block IDs published in `group` for this handle's generation (0 before the first append). */
  count(handle: RequestHandle, group: number): number {
    checkHandle(this.state, handle);
    this.checkGroup(group);
    if (
      Atomics.load(this.state.control, this.state.allocatorWord(handle.slot, A_GENERATION)) !==
      handle.generation
    )
      return 0;
    return Atomics.load(
      this.state.control,
      this.state.allocatorWord(handle.slot, A_BLOCK_COUNT + group),
    );
  }

  private checkGroup(group: number): void {
    if (!Number.isInteger(group) || group < 0 || group >= this.state.groupCount) {
      throw new InvalidArgumentError('group', `must be in [0, ${this.state.groupCount})`);
    }
  }

  private adopt(handle: RequestHandle): void {
    const { control } = this.state;
    const genWord = this.state.allocatorWord(handle.slot, A_GENERATION);
    if (Atomics.load(control, genWord) === handle.generation) return;
    this.writeBegin(handle.slot);
    for (let g = 0; g < this.state.groupCount; g += 1) {
      Atomics.store(control, this.state.allocatorWord(handle.slot, A_BLOCK_COUNT + g), 0);
    }
    Atomics.store(control, genWord, handle.generation);
    this.writeEnd(handle.slot);
  }

  private writeBegin(slot: number): void {
    Atomics.add(this.state.control, this.state.allocatorWord(slot, A_SEQ), 1); // odd: writing
  }

  private writeEnd(slot: number): void {
    Atomics.add(this.state.control, this.state.allocatorWord(slot, A_SEQ), 1); // even: stable
  }
}
