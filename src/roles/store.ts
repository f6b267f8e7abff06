// The store role's view of request state: consistent snapshots and cursors. It
// is the only writer of the store line. A snapshot reads the allocator's
// seqlock, the counts (each only if its line belongs to the snapshot's
// generation), then the caller reads the entries it needs and asks `stable`
// whether nothing changed underneath; retries are bounded by the caller.
import { invariant } from '../errors.js';
import {
  A_BLOCK_COUNT,
  A_GENERATION,
  A_SEQ,
  A_SETTLED_GENERATION,
  H_GENERATION,
  H_KEY_COUNT,
  S_COMPUTED_TOKENS,
  S_GENERATION,
  S_HIT_CHUNKS,
  S_MAX_OFFLOAD_TOKENS,
  S_NUM_TOKENS,
  S_PROMPT_TOKENS,
  S_REQUEST_ID,
  S_SCHEDULED_TOKENS,
  S_STATUS,
  T_CURSOR,
  T_DRAINED_GENERATION,
  T_EPOCH,
  T_GENERATION,
} from '../layout.js';
import type { RequestFacts } from '../ready.js';
import type { SharedState } from '../state.js';

/** A reusable snapshot of one slot; allocated once per store role, refilled every pass. */
export class RequestSnapshot implements RequestFacts {
  slot = -1;
  generation = 0;
  seq = 0;
  status = 0;
  requestId = 0;
  promptTokens = 0;
  numTokens = 0;
  computedTokens = 0;
  scheduledTokens = 0;
  maxOffloadTokens = 0;
  drained = false;
  /** Resets this generation's store state went through (storeEpoch): cursors are monotonic within one. */
  epoch = 0;
  /** The allocator settled this generation's blocks: the block counts read are final. */
  blocksSettled = false;
  readonly keyCount: Int32Array;
  readonly blockCount: Int32Array;
  readonly cursor: Int32Array;

  constructor(groupCount: number) {
    this.keyCount = new Int32Array(groupCount);
    this.blockCount = new Int32Array(groupCount);
    this.cursor = new Int32Array(groupCount);
  }
}

export type SnapshotResult = 'ok' | 'free' | 'busy';

export class StoreRole {
  readonly state: SharedState;
  /**
   * Per slot and group, the offload keys read so far for the generation in
   * keyGeneration (a key is written once per generation, before the count
   * that publishes it, and never changes after). A key is 256 bits in four
   * shared words; after each store the planner reads every key of the
   * request to touch it, and composing them anew each time cost about 85 ns
   * a key more than one read of the key word did.
   */
  private readonly keyCache: bigint[][];
  private readonly keyGeneration: Int32Array;

  constructor(state: SharedState) {
    this.state = state;
    this.keyCache = Array.from({ length: state.config.maxRequests * state.groupCount }, () => []);
    this.keyGeneration = new Int32Array(state.config.maxRequests);
  }

  /**
   * Reads `slot` into `out`. 'free': no request holds the slot. 'busy': the
   * allocator is mid-change (odd seqlock); try again later. 'ok': counts are
   * read; confirm with `stable` after reading entries.
   */
  snapshot(slot: number, out: RequestSnapshot): SnapshotResult {
    const s = this.state;
    const control = s.control;
    const generation = Atomics.load(control, s.schedulerWord(slot, S_GENERATION));
    if ((generation & 1) === 0) return 'free';
    const seq = Atomics.load(control, s.allocatorWord(slot, A_SEQ));
    if ((seq & 1) === 1) return 'busy';
    this.adopt(slot, generation);
    out.slot = slot;
    out.generation = generation;
    out.seq = seq;
    // Plain reads where no other thread can be writing (Atomics.load is a
    // builtin call on Node 20 and this runs for every slot of every pass):
    // requestId, promptTokens and maxOffloadTokens are written once, before the
    // scheduler publishes the generation loaded above, and change only with
    // the next generation; the store line (drained marker, cursors) is written
    // by the store role alone, on this thread.
    out.status = Atomics.load(control, s.schedulerWord(slot, S_STATUS));
    out.requestId = control[s.schedulerWord(slot, S_REQUEST_ID)]!;
    out.promptTokens = control[s.schedulerWord(slot, S_PROMPT_TOKENS)]!;
    out.numTokens = Atomics.load(control, s.schedulerWord(slot, S_NUM_TOKENS));
    out.computedTokens = Atomics.load(control, s.schedulerWord(slot, S_COMPUTED_TOKENS));
    out.scheduledTokens = Atomics.load(control, s.schedulerWord(slot, S_SCHEDULED_TOKENS));
    out.maxOffloadTokens = control[s.schedulerWord(slot, S_MAX_OFFLOAD_TOKENS)]!;
    out.drained = control[s.storeWord(slot, T_DRAINED_GENERATION)] === generation;
    out.epoch = control[s.storeWord(slot, T_EPOCH)]!;
    // Before the block counts: the allocator stores the mark after its last
    // append, so counts loaded after a set mark are the final ones.
    out.blocksSettled =
      Atomics.load(control, s.allocatorWord(slot, A_SETTLED_GENERATION)) === generation;
    const hashed = Atomics.load(control, s.hasherWord(slot, H_GENERATION)) === generation;
    const allocated = Atomics.load(control, s.allocatorWord(slot, A_GENERATION)) === generation;
    for (let g = 0; g < s.groupCount; g += 1) {
      out.keyCount[g] = hashed ? Atomics.load(control, s.hasherWord(slot, H_KEY_COUNT + g)) : 0;
      out.blockCount[g] = allocated
        ? Atomics.load(control, s.allocatorWord(slot, A_BLOCK_COUNT + g))
        : 0;
      out.cursor[g] = control[s.storeWord(slot, T_CURSOR + g)]!;
    }
    return 'ok';
  }

  /** True when neither the slot's generation nor its block tables changed since `snap` was taken. */
  stable(snap: RequestSnapshot): boolean {
    const control = this.state.control;
    return (
      Atomics.load(control, this.state.allocatorWord(snap.slot, A_SEQ)) === snap.seq &&
      Atomics.load(control, this.state.schedulerWord(snap.slot, S_GENERATION)) === snap.generation
    );
  }

  /**
   * A reset (vLLM's reset_cache) for one live request: its store state starts
   * a new epoch, every cursor back to 0 so its chunks are stored again (the
   * tier they were in is gone). The store line is this role's own, so this
   * is one more write by its single writer; within the new epoch cursors
   * again only move forward. A drained request is left as it is (its final
   * pass ran; nothing more is stored for it). Returns false for a free or
   * drained slot.
   */
  restartEpoch(slot: number): boolean {
    const s = this.state;
    const control = s.control;
    const generation = Atomics.load(control, s.schedulerWord(slot, S_GENERATION));
    if ((generation & 1) === 0) return false;
    this.adopt(slot, generation);
    if (control[s.storeWord(slot, T_DRAINED_GENERATION)] === generation) return false;
    for (let g = 0; g < s.groupCount; g += 1)
      Atomics.store(control, s.storeWord(slot, T_CURSOR + g), 0);
    Atomics.store(control, s.storeWord(slot, T_EPOCH), control[s.storeWord(slot, T_EPOCH)]! + 1);
    return true;
  }

  /** Moves a cursor forward; never backwards (the one rule). */
  advanceCursor(snap: RequestSnapshot, group: number, to: number): void {
    const word = this.state.storeWord(snap.slot, T_CURSOR + group);
    const now = Atomics.load(this.state.control, word);
    if (!(to >= now))
      invariant(
        false,
        `cursor of slot ${snap.slot} group ${group} moves forward (${now} -> ${to})`,
      );
    Atomics.store(this.state.control, word, to);
    snap.cursor[group] = to;
  }

  /** Records that the final pass of an ended request ran; the allocator may free its blocks. */
  markDrained(snap: RequestSnapshot): void {
    Atomics.store(
      this.state.control,
      this.state.storeWord(snap.slot, T_DRAINED_GENERATION),
      snap.generation,
    );
    snap.drained = true;
  }

  /** The offload key (its whole 256-bit identity) of a chunk below the snapshot's key count. */
  key(snap: RequestSnapshot, group: number, chunk: number): bigint {
    const slot = snap.slot;
    if (this.keyGeneration[slot] !== snap.generation) {
      this.keyGeneration[slot] = snap.generation;
      for (let g = 0; g < this.state.groupCount; g += 1) {
        this.keyCache[slot * this.state.groupCount + g]!.length = 0;
      }
    }
    const cache = this.keyCache[slot * this.state.groupCount + group]!;
    let key = cache[chunk];
    if (key === undefined) {
      key = this.state.key(slot, group, chunk);
      // Filled in order as the planner reads (chunks below the snapshot's count), so no hole.
      if (chunk === cache.length) cache.push(key);
    }
    return key;
  }

  /** Chunks of `group` loaded from the tier at admission (written once, before the generation is published). */
  hitChunks(snap: RequestSnapshot, group: number): number {
    return this.state.control[this.state.schedulerWord(snap.slot, S_HIT_CHUNKS + group)]!;
  }

  block(snap: RequestSnapshot, group: number, position: number): number {
    return this.state.blocks[this.state.blockBase(snap.slot, group) + position]!;
  }

  /** The store line starts each generation with cursors at the chunks loaded from the tier. */
  private adopt(slot: number, generation: number): void {
    const s = this.state;
    const genWord = s.storeWord(slot, T_GENERATION);
    if (s.control[genWord] === generation) return; // the store line is ours: a plain read
    for (let g = 0; g < s.groupCount; g += 1) {
      Atomics.store(
        s.control,
        s.storeWord(slot, T_CURSOR + g),
        Atomics.load(s.control, s.schedulerWord(slot, S_HIT_CHUNKS + g)),
      );
    }
    Atomics.store(s.control, s.storeWord(slot, T_DRAINED_GENERATION), 0);
    Atomics.store(s.control, s.storeWord(slot, T_EPOCH), 0);
    Atomics.store(s.control, genWord, generation);
  }
}
