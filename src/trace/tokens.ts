// Prompt tokens for an anonymized trace, and the offload keys they give.
//
// Tokens: block i of a prompt gets the first tokens of the expansion of its
// hash ID, token j of an expansion being a function of (ID, j) that is a
// bijection of the ID's low 32 bits for each j (murmur3's finalizer over an
// odd-stepped counter). So equal IDs give equal tokens, and two different IDs
// agree on one token with probability about 2^-31, on a whole block never in
// practice. A prompt is the concatenation of its blocks; its last block is cut
// at input_length. Output tokens are not synthesized: the engine samples its
// own per request, and the trace replays offload prompts only.
//
// Chunk keys without tokens (the cache mode, the full traces): the token path
// keys chunk c of block i by the hash chain over the prompt's tokens up to the
// chunk's end, a function of (ID_0, ..., ID_i, c) alone, and distinct such
// tuples give distinct token prefixes (above). `chunkKeys` keys the same tuple
// by a hash chain over the IDs and then c, so two chunks share a chunk key
// exactly when they share a token key (up to hash collisions); a test
// compares both on slices of both traces. Keys are equal as a relation, not as
// values: the cache mode never mixes them with token-path keys. The chain is
// the key hash's own (`Hashing.chain`, two words per step) from a fixed root
// outside any namespace, and the key is the full identity (identityOf).
import type { Hashing } from '../hashing.js';
import { DIGEST_BYTES, identityOf } from '../identity.js';
import type { TraceRequest } from './trace.js';

/** The chain's root: no request root is all zeros (they are SHA-256 digests). */
const TRACE_ROOT = new Uint8Array(DIGEST_BYTES);

/** Token IDs are drawn in [0, 2^31): what a submitted prompt may hold. */
const TOKEN_MASK = 0x7fffffff;

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** Writes the first `count` tokens of hash ID `id`'s expansion into `out` at `at`. */
export function writeBlockTokens(id: number, count: number, out: Int32Array, at: number): void {
  const lo = id >>> 0;
  // IDs of 2^32 and above mix their high part in (Mooncake's are far below).
  const hi = fmix32(Math.floor(id / 4294967296) ^ 0x6b766f66);
  for (let j = 0; j < count; j += 1) {
    const step = Math.imul(j, 0x9e3779b9);
    out[at + j] = fmix32(((lo + step) ^ hi) >>> 0) & TOKEN_MASK;
  }
}

/** The synthesized prompt of a trace request. */
export function promptTokens(r: TraceRequest, blockTokens: number): Int32Array {
  const out = new Int32Array(r.inputLength);
  for (let i = 0; i < r.hashIds.length; i += 1) {
    const at = i * blockTokens;
    writeBlockTokens(r.hashIds[i]!, Math.min(blockTokens, r.inputLength - at), out, at);
  }
  return out;
}

/**
 * Chunk-level keys of a request's whole chunks, from its hash IDs: one per
 * `tokensPerChunk` tokens of the prompt (a partial chunk has none), for the
 * group `group`. `tokensPerChunk` must divide `blockTokens` (checkTraceChunk).
 */
export function chunkKeys(
  hashing: Hashing,
  r: TraceRequest,
  blockTokens: number,
  tokensPerChunk: number,
  group = 0,
): bigint[] {
  const chunks = Math.floor(r.inputLength / tokensPerChunk);
  const perBlock = blockTokens / tokensPerChunk;
  const keys: bigint[] = [];
  const word = new Int32Array(2);
  const parent = new Uint8Array(DIGEST_BYTES);
  const step = new Uint8Array(DIGEST_BYTES);
  for (let i = 0; i * perBlock < chunks; i += 1) {
    const id = r.hashIds[i]!;
    word[0] = id | 0;
    word[1] = Math.floor(id / 4294967296);
    hashing.chain(i === 0 ? TRACE_ROOT : parent, 0, word, 2, parent, 0);
    const end = Math.min(perBlock, chunks - i * perBlock);
    for (let c = 0; c < end; c += 1) {
      word[0] = c;
      word[1] = -1; // never an ID's high word: a chunk step cannot mimic a block step
      hashing.chain(parent, 0, word, 2, step, 0);
      keys.push(identityOf(step, 0, group));
    }
  }
  return keys;
}
