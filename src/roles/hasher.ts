// The hasher role: turns published tokens into chained block hashes and
// per-group offload keys. It is the only writer of the hasher line, the hash
// array and the key array. Entries are written first, counts published after.
import { InvalidArgumentError, invariant } from '../errors.js';
import type { Hashing } from '../hashing.js';
import { ROOT_SEED } from '../hashing.js';
import { H_GENERATION, H_HASH_COUNT, H_KEY_COUNT, S_NUM_TOKENS, markDirty } from '../layout.js';
import type { SharedState } from '../state.js';
import { checkHandle } from './handle.js';
import type { RequestHandle } from './handle.js';

export class HasherRole {
  readonly state: SharedState;
  private readonly hashing: Hashing;

  /** The caller's handle, read once into this object (see ownHandle); valid until the next call. */
  private readonly own: { slot: number; generation: number } = { slot: 0, generation: 0 };

  constructor(state: SharedState, hashing: Hashing) {
    this.state = state;
    this.hashing = hashing;
  }

  /**
   * ownHandle without a fresh object per call (hash runs once per chunk of
   * every request): the fields are read once into `own`, which nothing reads
   * after hash() took the slot into a local.
   */
  private ownCopy(handle: RequestHandle): RequestHandle {
    if (typeof handle !== 'object' || handle === null) return handle;
    let slot: number;
    let generation: number;
    try {
      slot = handle.slot;
      generation = handle.generation;
    } catch {
      throw new InvalidArgumentError('handle', 'must be a request handle whose fields can be read');
    }
    // Written only after both reads: a getter that calls hash() again (with
    // another handle) cannot leave `own` holding half of each.
    this.own.slot = slot;
    this.own.generation = generation;
    return this.own;
  }

  /**
   * Hashes up to `hashesMax` new full hash blocks of published tokens and
   * publishes every offload key they complete. Returns the hashes added, so a
   * driver can lag the hasher on purpose by giving it a small budget.
   */
  hash(handle: RequestHandle, hashesMax = Number.MAX_SAFE_INTEGER): number {
    handle = this.ownCopy(handle);
    checkHandle(this.state, handle);
    // NaN or a fraction would publish a count that disagrees with the hashes written.
    if (!(Number.isInteger(hashesMax) || hashesMax === Infinity) || hashesMax < 0) {
      throw new InvalidArgumentError('hashesMax', 'must be a non-negative integer');
    }
    this.adopt(handle);
    const { state, hashing } = this;
    const { control, tokens, hashes, config } = state;
    const slot = handle.slot;
    const tph = config.tokensPerHash;
    const numTokens = Atomics.load(control, state.schedulerWord(slot, S_NUM_TOKENS));
    const hashCountWord = state.hasherWord(slot, H_HASH_COUNT);
    const have = Atomics.load(control, hashCountWord);
    const available = Math.min(Math.floor(numTokens / tph), config.maxHashesPerRequest);
    const target = Math.min(available, have + hashesMax);
    if (target <= have) return 0;
    const tokenBase = state.tokenBase(slot);
    const hashBase = state.hashBase(slot);
    let parent = have === 0 ? ROOT_SEED : hashes[hashBase + have - 1]!;
    for (let i = have; i < target; i += 1) {
      parent = hashing.blockHash(
        parent,
        tokens.subarray(tokenBase + i * tph, tokenBase + (i + 1) * tph),
      );
      hashes[hashBase + i] = parent;
    }
    Atomics.store(control, hashCountWord, target);
    this.publishKeys(slot, target);
    markDirty(state.dirty, slot);
    return target - have;
  }

  /** Keys follow hashes: key c of group g needs hash (c+1)*hashesPerChunk - 1. */
  private publishKeys(slot: number, hashCount: number): void {
    const { state, hashing } = this;
    const { control, hashes, keys, config } = state;
    const hashBase = state.hashBase(slot);
    for (const group of config.groups) {
      const countWord = state.hasherWord(slot, H_KEY_COUNT + group.index);
      const have = Atomics.load(control, countWord);
      const want = Math.min(
        Math.floor(hashCount / group.hashesPerChunk),
        config.maxChunksPerRequest,
      );
      if (want <= have) continue;
      const keyBase = state.keyBase(slot, group.index);
      for (let c = have; c < want; c += 1) {
        const last = (c + 1) * group.hashesPerChunk - 1;
        invariant(last < hashCount, 'key derives from a published hash');
        keys[keyBase + c] = hashing.offloadKey(hashes[hashBase + last]!, group.index);
      }
      Atomics.store(control, countWord, want);
    }
  }

  /** On the first call for a new generation the hasher zeroes its own line, then claims it. */
  private adopt(handle: RequestHandle): void {
    const { control } = this.state;
    const genWord = this.state.hasherWord(handle.slot, H_GENERATION);
    if (Atomics.load(control, genWord) === handle.generation) return;
    Atomics.store(control, this.state.hasherWord(handle.slot, H_HASH_COUNT), 0);
    for (let g = 0; g < this.state.groupCount; g += 1) {
      Atomics.store(control, this.state.hasherWord(handle.slot, H_KEY_COUNT + g), 0);
    }
    Atomics.store(control, genWord, handle.generation);
  }
}
