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
  S_GENERATION,
  Status,
  markDirty,
} from '../layout.js';
import type { SharedState } from '../state.js';
import { RoleClaim } from './claim.js';
import { IntInput } from './input.js';
import {
  DirtyBatch,
  HandleCopies,
  SlotMarks,
  batchLength,
  batchValues,
  checkHandle,
  ownHandle,
  statusName,
  statusOf,
} from './handle.js';
import type { RequestHandle } from './handle.js';

export interface AllocatorRoleOptions {
  /** The pool's word on a block ID: appends of a block it did not hand out are refused. */
  handedOut?: (block: number) => boolean;
}

export class AllocatorRole {
  readonly state: SharedState;
  /** The allocator role's owner word: this view writes only while it holds it. */
  private readonly claim: RoleClaim;
  private readonly handedOut: ((block: number) => boolean) | undefined;
  /**
   * Per block ID: slot + 1 of the request whose table holds it, 0 if none.
   * Private to this view; exact because it is the role's only writer (the
   * claim). Refuses a block appended twice or held by another request.
   */
  private readonly owner: Int32Array;
  /** Per block ID: the append call that last saw it (finds duplicates within one call). */
  private readonly seen: Uint32Array;
  private call = 0;
  /** appendBlocksBatch refuses a slot named twice. */
  private readonly named: SlotMarks;
  private readonly dirtyBatch: DirtyBatch;
  /** appendBlocksBatch's per-entry counts before the batch (reused between batches). */
  private batchCounts = new Int32Array(0);
  /** Private copies of the caller's arrays, each read once (see IntInput). */
  private readonly idInput = new IntInput();
  /** The block ID rule in an error, made once: it depends on the config alone. */
  private readonly blockIdRule: string;
  private readonly countInput = new IntInput();
  private readonly handleCopies = new HandleCopies();

  constructor(state: SharedState, options: AllocatorRoleOptions = {}) {
    this.state = state;
    this.handedOut = options.handedOut;
    this.owner = new Int32Array(state.config.gpuBlocks);
    this.seen = new Uint32Array(state.config.gpuBlocks);
    this.blockIdRule = `must be a block ID in [0, ${state.config.gpuBlocks})`;
    this.named = new SlotMarks(state.config.maxRequests);
    this.dirtyBatch = new DirtyBatch(state.config.maxRequests);
    // A view that takes the role over from another learns the tables it left.
    this.claim = new RoleClaim(state, 'allocator', () => this.findOwners());
  }

  /**
   * This view stops driving the allocator role so another view (usually on
   * another thread) can take it over; it may take it back later if free.
   */
  handOff(): void {
    this.claim.handOff();
  }

  /** Rebuilds the owner of every block from the live tables in shared memory. */
  private findOwners(): void {
    const { control, blocks } = this.state;
    this.owner.fill(0);
    for (let slot = 0; slot < this.state.config.maxRequests; slot += 1) {
      const gen = Atomics.load(control, this.state.allocatorWord(slot, A_GENERATION));
      if (gen !== Atomics.load(control, this.state.schedulerWord(slot, S_GENERATION))) continue;
      for (let g = 0; g < this.state.groupCount; g += 1) {
        const n = Atomics.load(control, this.state.allocatorWord(slot, A_BLOCK_COUNT + g));
        const base = this.state.blockBase(slot, g);
        for (let i = 0; i < n; i += 1)
          if (blocks[base + i] !== 0) this.owner[blocks[base + i]!] = slot + 1;
      }
    }
  }

  /**
   * Appends block IDs to a group's table. Refused, with nothing written: an ID
   * out of range, given twice, already in this request's table, held by
   * another live request, or (with a pool) not handed out by the pool.
   */
  appendBlocks(handle: RequestHandle, group: number, blockIds: ArrayLike<number>): void {
    handle = ownHandle(handle);
    this.claim.check();
    this.checkGroup(group);
    const ids = this.readBlockIds(blockIds);
    this.newCall();
    const n = this.checkAppend(handle, group, ids, 0, ids.length);
    this.claim.take();
    this.writeAppend(handle, group, ids, 0, ids.length, n);
  }

  /**
   * `appendBlocks` for many requests of one group in one call: entry i
   * appends `counts[i]` IDs (1 each when `counts` is absent) to `handles[i]`,
   * taken in order from `blockIds`. The claim is checked and taken once per
   * batch and each handle is checked once; every entry is validated before
   * the first write (a block given twice anywhere in the batch, a slot named
   * twice, or any refusal of appendBlocks), so a refused batch changes nothing.
   */
  appendBlocksBatch(
    handles: readonly RequestHandle[],
    group: number,
    blockIds: ArrayLike<number>,
    counts?: ArrayLike<number>,
  ): void {
    this.claim.check();
    this.checkGroup(group);
    const n = batchLength(handles);
    batchValues('counts', counts, n);
    const ids = this.readBlockIds(blockIds);
    // Each entry is read once: the handles and counts written are the ones checked.
    const hs = this.handleCopies.copy(handles, n);
    const ks =
      counts === undefined
        ? undefined
        : this.countInput.read(
            counts,
            n,
            'counts',
            0,
            0x7fffffff,
            'must be a non-negative integer',
          );
    let total = 0;
    for (let i = 0; i < n; i += 1) total += ks === undefined ? 1 : ks[i]!;
    if (total !== ids.length) {
      throw new InvalidArgumentError('blockIds', `must hold the ${total} IDs the counts add up to`);
    }
    this.newCall();
    this.named.begin();
    const before = this.batchCounts.length >= n ? this.batchCounts : new Int32Array(n);
    for (let i = 0, at = 0; i < n; i += 1) {
      const k = ks === undefined ? 1 : ks[i]!;
      before[i] = this.checkAppend(hs[i]!, group, ids, at, at + k);
      this.named.once(hs[i]!.slot, i);
      at += k;
    }
    this.batchCounts = before;
    this.claim.take();
    for (let i = 0, at = 0; i < n; i += 1) {
      const k = ks === undefined ? 1 : ks[i]!;
      this.writeAppend(hs[i]!, group, ids, at, at + k, before[i]!, false);
      this.dirtyBatch.add(hs[i]!.slot);
      at += k;
    }
    // One Atomics.or per bitmap word, after all of the batch's writes.
    this.dirtyBatch.raise(this.state.dirty);
  }

  /** Every check of an append of `ids[from, to)`; reads only. Returns the group's count now. */
  private checkAppend(
    handle: RequestHandle,
    group: number,
    ids: ArrayLike<number>,
    from: number,
    to: number,
  ): number {
    checkHandle(this.state, handle);
    if (this.settledChecked(handle)) {
      throw new BlocksSettledError(handle.slot, handle.generation);
    }
    this.checkOwners(handle, ids, from, to);
    // Validate against this generation's count (0 before adoption) before any write,
    // so a rejected call changes nothing, not even the lazy adoption.
    const n = this.countChecked(handle, group);
    const max = this.state.config.maxBlocksPerRequest;
    if (n + to - from > max) {
      throw new RequestCapacityError('blocks per request per group', max, n + to - from);
    }
    return n;
  }

  private writeAppend(
    handle: RequestHandle,
    group: number,
    ids: ArrayLike<number>,
    from: number,
    to: number,
    n: number,
    mark = true,
  ): void {
    const { control, blocks } = this.state;
    this.adopt(handle);
    const countWord = this.state.allocatorWord(handle.slot, A_BLOCK_COUNT + group);
    invariant(Atomics.load(control, countWord) === n, 'block count unchanged by adoption');
    const base = this.state.blockBase(handle.slot, group) + n - from;
    for (let i = from; i < to; i += 1) {
      const b = ids[i]!;
      blocks[base + i] = b;
      if (b !== 0) this.owner[b] = handle.slot + 1;
    }
    Atomics.store(control, countWord, n + to - from);
    // `mark` false: the batch raises the bit after all of its writes.
    if (mark) markDirty(this.state.dirty, handle.slot);
  }

  /**
   * Publishes that this ended request's blocks are settled: every block ID the
   * allocator will ever append for this generation is published (call it after
   * the last append). The store's final pass waits for this mark (bounded)
   * before it counts still-missing chunks as dropped. Idempotent.
   */
  settle(handle: RequestHandle): void {
    handle = ownHandle(handle);
    this.claim.check();
    checkHandle(this.state, handle);
    const status = statusOf(this.state, handle.slot);
    if (status !== Status.finished && status !== Status.aborted) {
      throw new IllegalTransitionError('settle the blocks of', statusName(status));
    }
    this.claim.take();
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
    handle = ownHandle(handle);
    checkHandle(this.state, handle);
    return this.settledChecked(handle);
  }

  /** `settled` for a handle checked already. */
  private settledChecked(handle: RequestHandle): boolean {
    return (
      Atomics.load(
        this.state.control,
        this.state.allocatorWord(handle.slot, A_SETTLED_GENERATION),
      ) === handle.generation
    );
  }

  /** Block IDs currently held in `group` (a copy). */
  blockIds(handle: RequestHandle, group: number): number[] {
    handle = ownHandle(handle);
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
    handle = ownHandle(handle);
    this.claim.check();
    checkHandle(this.state, handle);
    this.claim.take();
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
      this.disown(handle.slot, base, n);
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
    handle = ownHandle(handle);
    this.claim.check();
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
    this.claim.take();
    const index = this.state.blockBase(handle.slot, group) + position;
    const old = this.state.blocks[index]!;
    this.writeBegin(handle.slot);
    this.state.blocks[index] = 0;
    this.writeEnd(handle.slot);
    if (old !== 0 && this.owner[old] === handle.slot + 1) this.owner[old] = 0;
    markDirty(this.state.dirty, handle.slot);
    return old;
  }

  /** Block IDs published in `group` for this handle's generation (0 before the first append). */
  count(handle: RequestHandle, group: number): number {
    handle = ownHandle(handle);
    checkHandle(this.state, handle);
    this.checkGroup(group);
    return this.countChecked(handle, group);
  }

  /** `count` for a handle and group checked already. */
  private countChecked(handle: RequestHandle, group: number): number {
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

  /**
   * The caller's block IDs, each read once into private memory and checked to
   * be an ID in [0, gpuBlocks) before anything indexes by them.
   */
  private readBlockIds(blockIds: ArrayLike<number>): Int32Array {
    const { gpuBlocks, maxRequests, maxBlocksPerRequest } = this.state.config;
    const n = IntInput.lengthOf(
      blockIds,
      'blockIds',
      maxRequests * maxBlocksPerRequest,
      (k) => new RequestCapacityError('blocks per request per group', maxBlocksPerRequest, k),
      'must be an array of block IDs',
    );
    return this.idInput.read(blockIds, n, 'blockIds', 0, gpuBlocks - 1, this.blockIdRule);
  }

  /** Starts a new call for checkOwners: a block may appear once per call (a batch is one call). */
  private newCall(): void {
    this.call = (this.call + 1) >>> 0;
    if (this.call === 0) {
      this.seen.fill(0);
      this.call = 1;
    }
  }

  /** Refuses duplicate, foreign or never handed out block IDs in `blockIds[from, to)`; writes nothing. */
  private checkOwners(
    handle: RequestHandle,
    blockIds: ArrayLike<number>,
    from: number,
    to: number,
  ): void {
    for (let i = from; i < to; i += 1) {
      const b = blockIds[i]!;
      if (b === 0) continue; // null positions repeat freely
      if (this.seen[b] === this.call) {
        throw new InvalidArgumentError(`blockIds[${i}]`, `block ${b} is given twice`);
      }
      this.seen[b] = this.call;
      const o = this.owner[b]!;
      if (o !== 0 && this.liveOwner(o - 1, handle)) {
        throw new InvalidArgumentError(
          `blockIds[${i}]`,
          o - 1 === handle.slot
            ? `block ${b} is already in this request's block table`
            : `block ${b} is held by the live request in slot ${o - 1}`,
        );
      }
      if (this.handedOut !== undefined && !this.handedOut(b)) {
        throw new InvalidArgumentError(
          `blockIds[${i}]`,
          `block ${b} was not handed out by the pool`,
        );
      }
    }
  }

  /**
   * True while the table of `slot` that holds a block is current: the slot
   * was not released since (and, for the caller's own slot, is this
   * generation's). A released table's blocks are dropped by the next adoption.
   */
  private liveOwner(slot: number, handle: RequestHandle): boolean {
    const { control } = this.state;
    const tableGen = Atomics.load(control, this.state.allocatorWord(slot, A_GENERATION));
    if (slot === handle.slot) return tableGen === handle.generation;
    return tableGen === Atomics.load(control, this.state.schedulerWord(slot, S_GENERATION));
  }

  /** Forgets the owner of the blocks in [base, base + n) of `slot`'s table (if still that slot). */
  private disown(slot: number, base: number, n: number): void {
    const { blocks } = this.state;
    for (let i = 0; i < n; i += 1) {
      const b = blocks[base + i]!;
      if (b !== 0 && this.owner[b] === slot + 1) this.owner[b] = 0;
    }
  }

  private adopt(handle: RequestHandle): void {
    const { control } = this.state;
    const genWord = this.state.allocatorWord(handle.slot, A_GENERATION);
    if (Atomics.load(control, genWord) === handle.generation) return;
    this.writeBegin(handle.slot);
    for (let g = 0; g < this.state.groupCount; g += 1) {
      const countWord = this.state.allocatorWord(handle.slot, A_BLOCK_COUNT + g);
      // The previous generation's table is dropped: so is its hold on its blocks.
      this.disown(
        handle.slot,
        this.state.blockBase(handle.slot, g),
        Atomics.load(control, countWord),
      );
      Atomics.store(control, countWord, 0);
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
