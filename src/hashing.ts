// Chained block hashes and offload keys.
//
// Choice: xxHash64 (the `xxhash-wasm` package: zero dependencies, WebAssembly,
// so it behaves identically in every thread and on every platform, and it is
// one of the two hash families vLLM offers for prefix caching). A block hash is
// XXH64 over the block's token IDs (little-endian u32) seeded with the parent
// hash, so each hash covers its parent and its tokens; the first block is seeded
// with ROOT_SEED. The offload key of chunk c of group g is XXH64 over the group
// index (big-endian u32, as vLLM appends it) seeded with the chunk's last block
// hash: equal tokens give equal keys in any thread, groups never collide.
//
// The WebAssembly module loads asynchronously once per thread (`loadHashing`);
// after that every call is synchronous.
import xxhash from 'xxhash-wasm';
import type { XXHashAPI } from 'xxhash-wasm';
import { InvalidArgumentError } from './errors.js';
import { xxh64 } from './xxh64.js';

/** Seed of the first block hash of every request ("kvoff" in ASCII). */
export const ROOT_SEED = 0x6b766f66n;

export interface Hashing {
  /** Hash of one hash block of tokens, chained on `parent`. */
  blockHash(parent: bigint, tokens: Int32Array): bigint;
  /** Offload key of a chunk of `group` whose last block hash is `lastBlockHash`. */
  offloadKey(lastBlockHash: bigint, group: number): bigint;
}

let loading: Promise<Hashing> | undefined;

export function loadHashing(): Promise<Hashing> {
  loading ??= hashingApi().then(makeHashing);
  return loading;
}

/**
 * xxhash-wasm, or without WebAssembly (node --jitless, --no-expose-wasm) the
 * same XXH64 in plain JavaScript: slower, and bit-identical (see xxh64.ts).
 */
function hashingApi(): Promise<Pick<XXHashAPI, 'h64Raw'>> {
  const wasm = (globalThis as { WebAssembly?: unknown }).WebAssembly;
  return wasm === undefined ? Promise.resolve({ h64Raw: xxh64 }) : xxhash();
}

function makeHashing(api: Pick<XXHashAPI, 'h64Raw'>): Hashing {
  // One scratch buffer for the group suffix: no allocation per key.
  const groupBytes = new Uint8Array(4);
  const groupView = new DataView(groupBytes.buffer);
  return {
    blockHash(parent, tokens) {
      return api.h64Raw(
        new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.byteLength),
        parent,
      );
    },
    offloadKey(lastBlockHash, group) {
      groupView.setUint32(0, group, false);
      return api.h64Raw(groupBytes, lastBlockHash);
    },
  };
}

/**
 * Block hashes of a whole token list (full hash blocks only), for tests and
 * for the simulator's expected values. The hasher role computes the same chain
 * incrementally.
 */
export function chainHashes(hashing: Hashing, tokens: Int32Array, tokensPerHash: number): bigint[] {
  // 0 or a negative size never moved the loop past its first block: a hang.
  if (!Number.isInteger(tokensPerHash) || tokensPerHash < 1) {
    throw new InvalidArgumentError('tokensPerHash', 'must be a positive integer');
  }
  if (!(tokens instanceof Int32Array)) {
    throw new InvalidArgumentError(
      'tokens',
      'must be an Int32Array (e.g. Int32Array.from(prompt))',
    );
  }
  const out: bigint[] = [];
  let parent = ROOT_SEED;
  for (let i = 0; (i + 1) * tokensPerHash <= tokens.length; i += 1) {
    parent = hashing.blockHash(parent, tokens.subarray(i * tokensPerHash, (i + 1) * tokensPerHash));
    out.push(parent);
  }
  return out;
}
