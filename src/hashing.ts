// Chained block digests and the keys they give.
//
// SHA-256 by default (node:crypto, so it runs the same in every thread, under
// `node --jitless` too, and costs no loading): a block digest is SHA-256 over
// the tagged, length-prefixed fields (domain, parent digest, the block's
// tokens as little-endian u32), so each digest covers its parent and its
// tokens; block 0's parent is the request's root (namespace and cache salt,
// src/identity.ts). The identity of a chunk follows from its last block's
// digest and its group (identity.ts). Predictable 64-bit hashes let one
// tenant's prompt collide with another's (vLLM GHSA-rm76-4mrf-v9r8), hence the
// cryptographic default.
//
// xxHash64 (`xxhash-wasm`, or without WebAssembly the same XXH64 in plain
// JavaScript, xxh64.ts) stays as an opt-in for one trusted process: a block
// digest is XXH64 over the tokens seeded with the parent's first 8 bytes,
// kept as 8 bytes of the 32-byte digest slot. Crafted collisions take
// practical time, so disk and Redis tiers refuse it (TierCascade.open).
//
// Cost: one SHA-256 call per hash block, through `crypto.hash` over a scratch
// buffer that already holds the constant fields (no Hash object, no
// allocation but the digest), many blocks per JavaScript call. Chaining makes
// every block wait for its parent, so native calls cannot be merged; the
// per-call overhead (about 1 us) is what a 16-token block pays, the hashing
// itself (about 2 ns per token with the SHA extensions) what a 256-token
// block pays. bench/hashing.ts measures both against xxHash.
import { hash } from 'node:crypto';
import xxhash from 'xxhash-wasm';
import type { XXHashAPI } from 'xxhash-wasm';
import type { Config } from './config.js';
import { InvalidArgumentError } from './errors.js';
import { DIGEST_BYTES, identityOf, requestRoot } from './identity.js';
import type { KeyHash } from './identity.js';
import { xxh64 } from './xxh64.js';

export interface Hashing {
  readonly algorithm: KeyHash;
  /**
   * Digests of the floor(tokens.length / tokensPerHash) hash blocks of
   * `tokens`, chained: block 0's parent is the DIGEST_BYTES at `parentAt` of
   * `parent` (a previous digest or a request root), each later block's the
   * digest before it. Writes them DIGEST_BYTES apart from `outAt` of `out`
   * (which may be the parent's array). Many blocks per call, nothing allocated
   * per block but the digest.
   */
  chain(
    parent: Uint8Array,
    parentAt: number,
    tokens: Int32Array,
    tokensPerHash: number,
    out: Uint8Array,
    outAt: number,
  ): void;
}

const loading = new Map<KeyHash, Promise<Hashing>>();

/** The key hash of this thread (once per thread per algorithm; SHA-256 by default). */
export function loadHashing(algorithm: KeyHash = 'sha256'): Promise<Hashing> {
  let p = loading.get(algorithm);
  if (p === undefined) {
    if (algorithm !== 'sha256' && algorithm !== 'xxh64') {
      return Promise.reject(new InvalidArgumentError('algorithm', 'must be sha256 or xxh64'));
    }
    p = algorithm === 'sha256' ? Promise.resolve(sha256Hashing()) : xxh64Hashing();
    loading.set(algorithm, p);
  }
  return p;
}

const TAG_DOMAIN = 0x01;
const TAG_PARENT = 0x03;
const TAG_TOKENS = 0x04;
const BLOCK_DOMAIN = Buffer.from('kvoff/block/v2', 'utf8');

/**
 * The block fields around the tokens, written once per token count:
 * [domain][parent: 32 bytes][tokens: 4 per token], each tag u8 + length u32 LE.
 */
class BlockScratch {
  readonly buffer: Buffer;
  readonly parentAt: number;
  readonly tokensAt: number;
  readonly tokenBytes: Uint8Array;

  constructor(tokensPerHash: number) {
    const n = tokensPerHash * 4;
    this.parentAt = 5 + BLOCK_DOMAIN.length + 5;
    this.tokensAt = this.parentAt + DIGEST_BYTES + 5;
    this.buffer = Buffer.alloc(this.tokensAt + n);
    let at = this.buffer.writeUInt8(TAG_DOMAIN, 0);
    at = this.buffer.writeUInt32LE(BLOCK_DOMAIN.length, at);
    at += BLOCK_DOMAIN.copy(this.buffer, at);
    at = this.buffer.writeUInt8(TAG_PARENT, at);
    this.buffer.writeUInt32LE(DIGEST_BYTES, at);
    at = this.buffer.writeUInt8(TAG_TOKENS, this.parentAt + DIGEST_BYTES);
    this.buffer.writeUInt32LE(n, at);
    this.tokenBytes = this.buffer.subarray(this.tokensAt);
  }
}

function sha256Hashing(): Hashing {
  let scratch: BlockScratch | undefined;
  return {
    algorithm: 'sha256',
    chain(parent, parentAt, tokens, tph, out, outAt) {
      checkChainArgs(tokens, tph);
      if (scratch?.tokenBytes.length !== tph * 4) scratch = new BlockScratch(tph);
      const s = scratch;
      const buf = s.buffer;
      buf.set(parent.subarray(parentAt, parentAt + DIGEST_BYTES), s.parentAt);
      const bytes = new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.byteLength);
      const n = Math.floor(tokens.length / tph);
      const blockBytes = tph * 4;
      for (let i = 0; i < n; i += 1) {
        // Token IDs are int32 in [0, 2^31): their bytes on a little-endian host are the u32 LE encoding.
        s.tokenBytes.set(bytes.subarray(i * blockBytes, (i + 1) * blockBytes));
        const d = hash('sha256', buf, 'buffer');
        out.set(d, outAt + i * DIGEST_BYTES);
        buf.set(d, s.parentAt);
      }
    },
  };
}

async function xxh64Hashing(): Promise<Hashing> {
  // Without WebAssembly (node --jitless, --no-expose-wasm) the same XXH64 in plain JavaScript.
  const wasm = (globalThis as { WebAssembly?: unknown }).WebAssembly;
  const api: Pick<XXHashAPI, 'h64Raw'> = wasm === undefined ? { h64Raw: xxh64 } : await xxhash();
  return {
    algorithm: 'xxh64',
    chain(parent, parentAt, tokens, tph, out, outAt) {
      checkChainArgs(tokens, tph);
      const pv = new DataView(parent.buffer, parent.byteOffset, parent.byteLength);
      let seed = pv.getBigUint64(parentAt, true);
      const ov = new DataView(out.buffer, out.byteOffset, out.byteLength);
      const bytes = new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.byteLength);
      const blockBytes = tph * 4;
      const n = Math.floor(tokens.length / tph);
      for (let i = 0; i < n; i += 1) {
        seed = api.h64Raw(bytes.subarray(i * blockBytes, (i + 1) * blockBytes), seed);
        const at = outAt + i * DIGEST_BYTES;
        ov.setBigUint64(at, seed, true);
        out.fill(0, at + 8, at + DIGEST_BYTES);
      }
    },
  };
}

function checkChainArgs(tokens: Int32Array, tokensPerHash: number): void {
  // 0 or a negative size never moved a loop past its first block: a hang.
  if (!Number.isInteger(tokensPerHash) || tokensPerHash < 1) {
    throw new InvalidArgumentError('tokensPerHash', 'must be a positive integer');
  }
  if (!(tokens instanceof Int32Array)) {
    throw new InvalidArgumentError(
      'tokens',
      'must be an Int32Array (e.g. Int32Array.from(prompt))',
    );
  }
}

/**
 * A request's key chain as an engine keeps it outside shared memory (the
 * simulated engine, a lookup): digests as bytes, keys (identities) per group
 * as bigints, both extended as tokens arrive. The hasher role computes the
 * same chain into shared memory.
 */
export class KeyChain {
  /** Per group, the identities of the chunks hashed so far. */
  readonly keys: bigint[][];
  private digests: Uint8Array;
  private hashes = 0;

  constructor(
    private readonly config: Config,
    private readonly hashing: Hashing,
    private readonly root: Uint8Array,
  ) {
    this.keys = config.groups.map(() => []);
    this.digests = new Uint8Array(DIGEST_BYTES * 16);
  }

  get hashCount(): number {
    return this.hashes;
  }

  /** Hashes the whole hash blocks of tokens[0, tokenCount) not hashed yet (up to the config's capacity); derives the keys they complete. */
  extend(tokens: Int32Array, tokenCount = tokens.length): void {
    const { config } = this;
    const tph = config.tokensPerHash;
    const want = Math.min(
      Math.floor(Math.min(tokenCount, tokens.length) / tph),
      config.maxHashesPerRequest,
    );
    if (want <= this.hashes) return;
    if (this.digests.length < want * DIGEST_BYTES) {
      let size = this.digests.length;
      while (size < want * DIGEST_BYTES) size *= 2;
      const grown = new Uint8Array(size);
      grown.set(this.digests.subarray(0, this.hashes * DIGEST_BYTES));
      this.digests = grown;
    }
    const parent = this.hashes === 0 ? this.root : this.digests;
    const parentAt = this.hashes === 0 ? 0 : (this.hashes - 1) * DIGEST_BYTES;
    this.hashing.chain(
      parent,
      parentAt,
      tokens.subarray(this.hashes * tph, want * tph),
      tph,
      this.digests,
      this.hashes * DIGEST_BYTES,
    );
    this.hashes = want;
    for (const g of config.groups) {
      const keys = this.keys[g.index]!;
      const target = Math.min(Math.floor(want / g.hashesPerChunk), config.maxChunksPerRequest);
      for (let c = keys.length; c < target; c += 1) {
        const last = ((c + 1) * g.hashesPerChunk - 1) * DIGEST_BYTES;
        keys.push(identityOf(this.digests, last, g.index, config.keyBits));
      }
    }
  }

  /** A copy of the digest of hash block `i`. */
  digest(i: number): Uint8Array {
    return this.digests.slice(i * DIGEST_BYTES, (i + 1) * DIGEST_BYTES);
  }
}

/**
 * Every offload key of a prompt, per group: one per whole chunk, under the
 * config's namespace and the request's cache salt (what a lookup queries and
 * what the hasher publishes for the same tokens).
 */
export function promptKeys(
  config: Config,
  hashing: Hashing,
  tokens: ArrayLike<number>,
  cacheSalt?: string,
): bigint[][] {
  const chain = new KeyChain(config, hashing, requestRoot(config, cacheSalt));
  chain.extend(Int32Array.from(tokens));
  return chain.keys;
}
