// The byte layout of the two arenas and the copy between them, shared by the
// transfer task (real threads), the deterministic simulator and tests.
//
// GPU arena: block b occupies words [b * wordsPerBlock, (b + 1) * wordsPerBlock).
// Tier arena: slot s holds one chunk, `blocksPerChunk` blocks; the block at
// chunk position p (= position in the group's table mod blocksPerChunk)
// occupies words [(s * blocksPerChunk + p) * wordsPerBlock, ... + wordsPerBlock).
import { blockMatches, expandBlock } from './bytes.js';
import type { RankLayout } from './config.js';

/**
 * One chunk to copy between GPU blocks and a tier slot, the same shape for a
 * store (blocks -> slot) and a load (slot -> blocks).
 */
export interface ChunkCopy {
  readonly group: number;
  readonly chunk: number;
  readonly key: bigint;
  readonly tierSlot: number;
  /**
   * Non-null GPU blocks of the chunk, in position order (a load's first chunk
   * may be partial: a window's leading null blocks are left out).
   */
  readonly blocks: readonly number[];
  /** Position (within the group's block table) of each block. */
  readonly positions: readonly number[];
}

export interface ArenaGeometry {
  readonly wordsPerBlock: number;
  readonly blocksPerChunk: number;
}

/**
 * The words of every block that tensor-parallel rank `rank` holds, copies and
 * restores: [from, to). Sharded, rank r holds the r-th of `ranks` equal
 * ranges (a GPU's heads of every layer, in one process's view of N devices:
 * no rank's copy touches another's words). Replicated (MLA), every rank
 * holds the whole block, so rank 0 copies all of it and the other ranks
 * hold an empty range: they acknowledge without copying. A tier entry is the
 * whole block either way, so it does not depend on the rank count.
 */
export function rankShard(
  wordsPerBlock: number,
  ranks: number,
  layout: RankLayout,
  rank: number,
): { readonly from: number; readonly to: number } {
  if (layout === 'replicated') return rank === 0 ? { from: 0, to: wordsPerBlock } : NO_WORDS;
  const words = wordsPerBlock / ranks;
  return { from: rank * words, to: (rank + 1) * words };
}

const NO_WORDS = Object.freeze({ from: 0, to: 0 });

export function gpuBlockWords(gpu: Uint32Array, geo: ArenaGeometry, block: number): Uint32Array {
  return gpu.subarray(block * geo.wordsPerBlock, (block + 1) * geo.wordsPerBlock);
}

export function tierBlockWords(
  tier: Uint32Array,
  geo: ArenaGeometry,
  slot: number,
  chunkPosition: number,
): Uint32Array {
  const start = (slot * geo.blocksPerChunk + chunkPosition) * geo.wordsPerBlock;
  return tier.subarray(start, start + geo.wordsPerBlock);
}

/** Copies one stored chunk's source blocks into its tier slot; returns bytes copied. */
export function copyChunkToTier(
  gpu: Uint32Array,
  tier: Uint32Array,
  geo: ArenaGeometry,
  chunk: ChunkCopy,
): number {
  for (let i = 0; i < chunk.blocks.length; i += 1) {
    const p = chunk.positions[i]! % geo.blocksPerChunk;
    tierBlockWords(tier, geo, chunk.tierSlot, p).set(gpuBlockWords(gpu, geo, chunk.blocks[i]!));
  }
  return chunk.blocks.length * geo.wordsPerBlock * 4;
}

/** Writes the bytes a forward pass would produce for block `position` of the chunk named `key`. */
export function writeComputedBlock(
  gpu: Uint32Array,
  geo: ArenaGeometry,
  block: number,
  key: bigint,
  position: number,
): void {
  expandBlock(key, position % geo.blocksPerChunk, gpuBlockWords(gpu, geo, block));
}

/** True when the tier slot holds the expansion of `key` at every given chunk position. */
export function tierChunkMatches(
  tier: Uint32Array,
  geo: ArenaGeometry,
  slot: number,
  key: bigint,
  chunkPositions: readonly number[],
): boolean {
  for (const p of chunkPositions) {
    if (!blockMatches(key, p, tierBlockWords(tier, geo, slot, p))) return false;
  }
  return true;
}

/** True when a GPU block holds the expansion of (key, position): used to verify loads. */
export function gpuBlockMatches(
  gpu: Uint32Array,
  geo: ArenaGeometry,
  block: number,
  key: bigint,
  position: number,
): boolean {
  return blockMatches(key, position % geo.blocksPerChunk, gpuBlockWords(gpu, geo, block));
}
