// The hasher role: turns published tokens into chained block digests and
// per-group offload keys. It is the only writer of the hasher line, the hash
// array and the key and key-check arrays. Entries are written first, counts
// published after: a key word and its check both before the key count.
import { InvalidArgumentError, invariant } from '../errors.js';
import type { Hashing } from '../hashing.js';
import {
  DIGEST_BYTES,
  groupMixBytes,
  groupMixWords,
  writeIdentity,
  writeIdentityWords,
} from '../identity.js';
import {
  H_GENERATION,
  H_HASH_COUNT,
  H_KEY_COUNT,
  KEY_CHECK_WORDS,
  S_NUM_TOKENS,
  markDirty,
} from '../layout.js';
import type { SharedState } from '../state.js';
import { checkHandle } from './handle.js';
import type { RequestHandle } from './handle.js';

export class HasherRole {
  readonly state: SharedState;
  private readonly hashing: Hashing;
  /** Per group, m(g) as bytes (the group's mix into each identity word). */
  private readonly mixes: Uint8Array[];
  /** The same, as 32-bit words, with word views of the digests, key words and checks (writeIdentityWords). */
  private readonly mixWords: Int32Array[];
  private readonly hashWords: Int32Array;
  private readonly keyWords: Int32Array;
  private readonly checkWords: Int32Array;

  /** The caller's handle, read once into this object (see ownHandle); valid until the next call. */
  private readonly own: { slot: number; generation: number } = { slot: 0, generation: 0 };

  constructor(state: SharedState, hashing: Hashing) {
    if (hashing.algorithm !== state.config.keyHash) {
      throw new InvalidArgumentError(
        'hashing',
        `is ${hashing.algorithm}; the config's keyHash is ${state.config.keyHash}`,
      );
    }
    this.state = state;
    this.hashing = hashing;
    this.mixes = state.config.groups.map((g) => groupMixBytes(g.index));
    this.mixWords = state.config.groups.map((g) => groupMixWords(g.index));
    this.hashWords = new Int32Array(state.buffers.hashes);
    this.keyWords = new Int32Array(state.buffers.keys);
    this.checkWords = new Int32Array(state.buffers.keyChecks);
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
    // Block 0 chains on the request's root (written at open, before the generation we checked).
    const parent = have === 0 ? state.roots : hashes;
    const parentAt = have === 0 ? slot * DIGEST_BYTES : (hashBase + have - 1) * DIGEST_BYTES;
    hashing.chain(
      parent,
      parentAt,
      tokens.subarray(tokenBase + have * tph, tokenBase + target * tph),
      tph,
      hashes,
      (hashBase + have) * DIGEST_BYTES,
    );
    Atomics.store(control, hashCountWord, target);
    this.publishKeys(slot, target);
    markDirty(state.dirty, slot);
    return target - have;
  }

  /** Keys follow hashes: key c of group g needs hash (c+1)*hashesPerChunk - 1. */
  private publishKeys(slot: number, hashCount: number): void {
    const { state } = this;
    const { control, hashes, keyBytes, keyCheckBytes, config } = state;
    const hashBase = state.hashBase(slot);
    // An index loop: for-of here built an iterator object on every call (once
    // per request and round), the hasher thread's largest allocation.
    for (let gi = 0; gi < config.groups.length; gi += 1) {
      const group = config.groups[gi]!;
      const countWord = state.hasherWord(slot, H_KEY_COUNT + group.index);
      const have = Atomics.load(control, countWord);
      const want = Math.min(
        Math.floor(hashCount / group.hashesPerChunk),
        config.maxChunksPerRequest,
      );
      if (want <= have) continue;
      const keyBase = state.keyBase(slot, group.index);
      const mix = this.mixes[group.index]!;
      const mixWords = this.mixWords[group.index]!;
      const wholeKey = config.keyBits >= 64;
      for (let c = have; c < want; c += 1) {
        const last = (c + 1) * group.hashesPerChunk - 1;
        invariant(last < hashCount, 'key derives from a published hash');
        const k = keyBase + c;
        const from = (hashBase + last) * DIGEST_BYTES;
        if (wholeKey) {
          writeIdentityWords(
            this.hashWords,
            from >>> 2,
            mixWords,
            this.keyWords,
            k * 2,
            this.checkWords,
            k * KEY_CHECK_WORDS * 2,
          );
          continue;
        }
        writeIdentity(
          hashes,
          from,
          mix,
          config.keyBits,
          keyBytes,
          k * 8,
          keyCheckBytes,
          k * KEY_CHECK_WORDS * 8,
        );
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
