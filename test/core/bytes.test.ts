// Verifiable bytes: a block's content is a deterministic expansion of (key,
// position), and the arena copy helpers round trip against it.
import { describe, expect, it } from 'vitest';
import { blockMatches, expandBlock } from '../../src/bytes.js';
import {
  copyChunkToTier,
  gpuBlockMatches,
  gpuBlockWords,
  tierBlockWords,
  tierChunkMatches,
  writeComputedBlock,
} from '../../src/copy.js';
import type { ArenaGeometry } from '../../src/copy.js';
import type { ChunkCopy } from '../../src/copy.js';

const WORDS = 16;

function expanded(key: bigint, position: number, words = WORDS): Uint32Array {
  const out = new Uint32Array(words);
  expandBlock(key, position, out);
  return out;
}

describe('expandBlock / blockMatches', () => {
  it('round trips and is deterministic', () => {
    const key = 0xdeadbeefcafef00dn;
    const a = expanded(key, 3);
    expect(blockMatches(key, 3, a)).toBe(true);
    expect(expanded(key, 3)).toEqual(a);
    expect(new Set(a).size).toBeGreaterThan(WORDS / 2); // not a constant fill
  });

  it('differs for different keys (either half) and positions', () => {
    const key = 0x0123456789abcdefn;
    const base = expanded(key, 0);
    expect(blockMatches(key, 1, base)).toBe(false);
    expect(blockMatches(key ^ 1n, 0, base)).toBe(false); // low half
    expect(blockMatches(key ^ (1n << 40n), 0, base)).toBe(false); // high half
    const seen = new Set<string>();
    for (const k of [1n, 2n, 1n << 32n, (1n << 64n) - 1n]) {
      for (let p = 0; p < 4; p += 1) seen.add(expanded(k, p).join(','));
    }
    expect(seen.size).toBe(16);
  });

  it('a single flipped word fails the match', () => {
    const w = expanded(42n, 2);
    w[WORDS - 1] = (w[WORDS - 1]! ^ 1) >>> 0;
    expect(blockMatches(42n, 2, w)).toBe(false);
  });
});

describe('arena copy helpers', () => {
  const geo: ArenaGeometry = { wordsPerBlock: WORDS, blocksPerChunk: 2 };
  const gpu = new Uint32Array(8 * WORDS);
  const tier = new Uint32Array(4 * 2 * WORDS);

  it('copyChunkToTier then tierChunkMatches; a wrong key or slot fails', () => {
    const key = 0x1111222233334444n;
    // Chunk 3 of the group: table positions 6 and 7, in GPU blocks 5 and 2.
    writeComputedBlock(gpu, geo, 5, key, 6);
    writeComputedBlock(gpu, geo, 2, key, 7);
    expect(gpuBlockMatches(gpu, geo, 5, key, 6)).toBe(true);
    expect(gpuBlockMatches(gpu, geo, 2, key, 6)).toBe(false);
    const chunk: ChunkCopy = {
      group: 0,
      chunk: 3,
      key,
      tierSlot: 1,
      blocks: [5, 2],
      positions: [6, 7],
    };
    expect(copyChunkToTier(gpu, tier, geo, chunk)).toBe(2 * WORDS * 4);
    expect(tierChunkMatches(tier, geo, 1, key, [0, 1])).toBe(true);
    expect(tierChunkMatches(tier, geo, 1, key + 1n, [0, 1])).toBe(false);
    expect(tierChunkMatches(tier, geo, 0, key, [0, 1])).toBe(false);
    // Chunk positions are table positions mod blocksPerChunk.
    expect(tierBlockWords(tier, geo, 1, 1)).toEqual(gpuBlockWords(gpu, geo, 2));
    // Other slots are untouched.
    expect(tierBlockWords(tier, geo, 0, 0).every((w) => w === 0)).toBe(true);
    expect(tierBlockWords(tier, geo, 2, 0).every((w) => w === 0)).toBe(true);
  });

  it('a chunk with a null block copies only its non-null blocks', () => {
    const key = 77n;
    writeComputedBlock(gpu, geo, 4, key, 3);
    const chunk: ChunkCopy = { group: 1, chunk: 1, key, tierSlot: 3, blocks: [4], positions: [3] };
    expect(copyChunkToTier(gpu, tier, geo, chunk)).toBe(WORDS * 4);
    expect(tierChunkMatches(tier, geo, 3, key, [1])).toBe(true);
    expect(tierChunkMatches(tier, geo, 3, key, [0, 1])).toBe(false); // position 0 never written
  });

  it('mispairing is detected: bytes of one key copied under another', () => {
    writeComputedBlock(gpu, geo, 1, 1000n, 0);
    writeComputedBlock(gpu, geo, 3, 1000n, 1);
    const chunk: ChunkCopy = {
      group: 0,
      chunk: 0,
      key: 2000n,
      tierSlot: 2,
      blocks: [1, 3],
      positions: [0, 1],
    };
    copyChunkToTier(gpu, tier, geo, chunk);
    expect(tierChunkMatches(tier, geo, 2, 2000n, [0, 1])).toBe(false);
    expect(tierChunkMatches(tier, geo, 2, 1000n, [0, 1])).toBe(true);
  });
});
